"""YOLOv7 size table, as data.

Channel numbers are those of the reference deploy configurations (``cfg/deploy/yolov7-tiny.yaml``,
``cfg/deploy/yolov7.yaml`` and ``cfg/deploy/yolov7x.yaml`` of WongKinYiu/yolov7). An ELAN entry is
``(c_branch, c_mid, n, tap, c_out)`` = :class:`libreyolo.models.yolo7.elan7.ELAN7` arguments.
Anchors are the published ones (pixels, three (w, h) pairs per level, strides 8, 16, 32).
Loss gains are the reference recipes' (``hyp.scratch.p5.yaml`` for b and x,
``hyp.scratch.tiny.yaml`` for tiny).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ELAN7Args = tuple[int, int, int, int, int]  # (c_branch, c_mid, n, tap, c_out)
Anchors = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True, kw_only=True)
class YOLO7Variant:
    """One size of the YOLOv7 detector.

    act: ``"silu"`` or ``"lrelu"`` (LeakyReLU 0.1, tiny).
    stem: ``(c_out, k, s)`` per stem conv; the stem ends at stride 4.
    down: backbone downsampler to P3, P4, P5: ``"mp"`` (:class:`MPConv`, output ``2 * c``) or
        ``"maxpool"``; down_c: the MPConv widths (ignored for ``"maxpool"``).
    backbone: ELAN args of the stride-4, 8, 16, 32 stages.
    spp: ``"sppcspc"`` or ``"tiny"`` (:class:`SPPCSPTiny`) and its output width.
    lateral: widths of the top-down 1x1 convs (to P4, to P3); both the upsampled path and the
        backbone route are projected to this width.
    top: ELAN args of the top-down blocks (P4, P3 = the stride-8 output).
    neck_down: bottom-up downsampler ``"mp"`` (MPConv) or ``"conv"`` (3x3 stride-2 conv) and
        its widths (P3 -> P4, P4 -> P5). MPConv outputs ``2 * c`` channels, the conv ``c``.
    bottom: ELAN args of the bottom-up blocks (P4, P5).
    head_conv: ``"repconv"`` or ``"conv"`` 3x3 before the detection convs, widths per level.
    anchors: per level ``(w0, h0, w1, h1, w2, h2)`` in pixels.
    box, obj, cls: loss gains of the reference recipe for this size.
    paper_params_m: parameters (millions, 80 classes, deploy form) in the paper's table.
    """

    size: str
    act: Literal["silu", "lrelu"]
    stem: tuple[tuple[int, int, int], ...]
    down: Literal["mp", "maxpool"]
    down_c: tuple[int, int, int]
    backbone: tuple[ELAN7Args, ELAN7Args, ELAN7Args, ELAN7Args]
    spp: tuple[Literal["sppcspc", "tiny"], int]
    lateral: tuple[int, int]
    top: tuple[ELAN7Args, ELAN7Args]
    neck_down: tuple[Literal["mp", "conv"], int, int]
    bottom: tuple[ELAN7Args, ELAN7Args]
    head_conv: tuple[Literal["repconv", "conv"], tuple[int, int, int]]
    anchors: Anchors
    box: float
    obj: float
    cls: float
    paper_params_m: float


VARIANTS: dict[str, YOLO7Variant] = {
    "tiny": YOLO7Variant(
        size="tiny", act="lrelu",
        stem=((32, 3, 2), (64, 3, 2)),
        down="maxpool", down_c=(0, 0, 0),
        backbone=((32, 32, 2, 1, 64), (64, 64, 2, 1, 128), (128, 128, 2, 1, 256),
                  (256, 256, 2, 1, 512)),
        spp=("tiny", 256),
        lateral=(128, 64),
        top=((64, 64, 2, 1, 128), (32, 32, 2, 1, 64)),
        neck_down=("conv", 128, 256),
        bottom=((64, 64, 2, 1, 128), (128, 128, 2, 1, 256)),
        head_conv=("conv", (128, 256, 512)),
        anchors=((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119),
                 (116, 90, 156, 198, 373, 326)),
        box=0.05, obj=1.0, cls=0.5,
        paper_params_m=6.2,
    ),
    "b": YOLO7Variant(
        size="b", act="silu",
        stem=((32, 3, 1), (64, 3, 2), (64, 3, 1), (128, 3, 2)),
        down="mp", down_c=(128, 256, 512),
        backbone=((64, 64, 4, 2, 256), (128, 128, 4, 2, 512), (256, 256, 4, 2, 1024),
                  (256, 256, 4, 2, 1024)),
        spp=("sppcspc", 512),
        lateral=(256, 128),
        top=((256, 128, 4, 1, 256), (128, 64, 4, 1, 128)),
        neck_down=("mp", 128, 256),
        bottom=((256, 128, 4, 1, 256), (512, 256, 4, 1, 512)),
        head_conv=("repconv", (256, 512, 1024)),
        anchors=((12, 16, 19, 36, 40, 28), (36, 75, 76, 55, 72, 146),
                 (142, 110, 192, 243, 459, 401)),
        box=0.05, obj=0.7, cls=0.3,
        paper_params_m=36.9,
    ),
    "x": YOLO7Variant(
        size="x", act="silu",
        stem=((40, 3, 1), (80, 3, 2), (80, 3, 1), (160, 3, 2)),
        down="mp", down_c=(160, 320, 640),
        backbone=((64, 64, 6, 2, 320), (128, 128, 6, 2, 640), (256, 256, 6, 2, 1280),
                  (256, 256, 6, 2, 1280)),
        spp=("sppcspc", 640),
        lateral=(320, 160),
        top=((256, 256, 6, 2, 320), (128, 128, 6, 2, 160)),
        neck_down=("mp", 160, 320),
        bottom=((256, 256, 6, 2, 320), (512, 512, 6, 2, 640)),
        head_conv=("conv", (320, 640, 1280)),
        anchors=((12, 16, 19, 36, 40, 28), (36, 75, 76, 55, 72, 146),
                 (142, 110, 192, 243, 459, 401)),
        box=0.05, obj=0.7, cls=0.3,
        paper_params_m=71.3,
    ),
}
