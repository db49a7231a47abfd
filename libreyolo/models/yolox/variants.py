"""YOLOX size table, as data.

Depth and width multipliers, the depthwise flag and the training input size are those of the
reference experiment files (``exps/default/yolox_{nano,tiny,s,m,l,x}.py`` of Megvii-BaseDetection/YOLOX);
``paper_params_m`` is the parameter count (millions, 80 classes) of the reference model zoo table.

Derived numbers, as the reference computes them: backbone base width ``int(64 * width)``, base
depth ``max(round(3 * depth), 1)``; neck/head channels ``int(c * width)`` for c in
(256, 512, 1024); head width ``int(256 * width)``; neck CSP depth ``round(3 * depth)``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class YOLOXVariant:
    """One size of YOLOX.

    depth / width: the reference's ``depth`` and ``width`` multipliers.
    depthwise: depthwise-separable 3x3 convs in backbone, neck and head (nano only).
    imgsz: the default (training and evaluation) input size.
    paper_params_m: published parameter count in millions at 80 classes.
    """

    size: str
    depth: float
    width: float
    depthwise: bool
    imgsz: int
    paper_params_m: float

    @property
    def base_channels(self) -> int:
        return int(64 * self.width)

    @property
    def base_depth(self) -> int:
        return max(round(3 * self.depth), 1)

    @property
    def neck_channels(self) -> tuple[int, int, int]:
        """Channels of the three pyramid levels (strides 8, 16, 32)."""
        return (int(256 * self.width), int(512 * self.width), int(1024 * self.width))

    @property
    def neck_depth(self) -> int:
        return round(3 * self.depth)

    @property
    def head_width(self) -> int:
        return int(256 * self.width)


VARIANTS: dict[str, YOLOXVariant] = {
    "nano": YOLOXVariant(size="nano", depth=0.33, width=0.25, depthwise=True, imgsz=416, paper_params_m=0.91),
    "tiny": YOLOXVariant(size="tiny", depth=0.33, width=0.375, depthwise=False, imgsz=416, paper_params_m=5.06),
    "s": YOLOXVariant(size="s", depth=0.33, width=0.50, depthwise=False, imgsz=640, paper_params_m=9.0),
    "m": YOLOXVariant(size="m", depth=0.67, width=0.75, depthwise=False, imgsz=640, paper_params_m=25.3),
    "l": YOLOXVariant(size="l", depth=1.0, width=1.0, depthwise=False, imgsz=640, paper_params_m=54.2),
    "x": YOLOXVariant(size="x", depth=1.33, width=1.25, depthwise=False, imgsz=640, paper_params_m=99.1),
}
