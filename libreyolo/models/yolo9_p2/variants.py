"""YOLOv9-P2 sizes, as data: the GELAN size table (:mod:`libreyolo.models._gelan.variants`) plus
the stride-4 neck extension of each size.

No upstream config publishes a YOLOv9 with a P2 output. The extension follows the rule by which
Ultralytics' ``yolov8-p2.yaml`` extends ``yolov8.yaml`` (one more top-down step to stride 4, one
more bottom-up step back to stride 8, before the unchanged stride-16/32 steps), with the widths
of the YOLOv9 neck halved once more per level: the stride-4 ELAN is half the stride-8 one, the
new downsampler half the stride-8 width, as ``yolov9{t,s}.yaml``'s own downsamplers are.
"""

from __future__ import annotations

from .._gelan.net import P2Neck
from .._gelan.variants import VARIANTS as GELAN_VARIANTS
from .._gelan.variants import YOLO9Variant

SIZES = ("t", "s")

VARIANTS: dict[str, YOLO9Variant] = {s: GELAN_VARIANTS[s] for s in SIZES}

P2_NECKS: dict[str, P2Neck] = {
    "t": P2Neck(top2=(32, 32, 16, 3), down3=32, bottom3=(64, 64, 32, 3)),
    "s": P2Neck(top2=(64, 64, 32, 3), down3=64, bottom3=(128, 128, 64, 3)),
}
