"""YOLOv9 (GELAN) size table, as data.

Channel and depth numbers are those of the reference GELAN detection configs
(``models/detect/gelan-{t,s,m,c}.yaml`` of WongKinYiu/yolov9, which the converted
``yolov9-{t,s,m,c}`` inference models equal). An ELAN entry is
``(c_out, c_hidden, c_branch, depth)`` = the reference's ``RepNCSPELAN4(c2, c3, c4, c5)``.
Output widths are as the reference model builder makes them: it rounds every block's output
channels up to a multiple of 8, which changes one number (gelan-m's 180 -> 184).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ELANArgs = tuple[int, int, int, int]  # (c_out, c_hidden, c_branch, depth)


@dataclass(frozen=True, kw_only=True)
class YOLO9Variant:
    """One size of the GELAN detector.

    stem: output channels of the two stride-2 3x3 convs (P1/2, P2/4).
    p2_block: the stride-4 block, ``"elan1"`` (t, s: ELAN1, depth ignored) or ``"repncspelan4"``.
    p2: its ELAN args.
    down: downsampler used everywhere after the stem: ``"aconv"`` or ``"adown"``.
    backbone_down: output channels of the downsamplers to P3, P4, P5.
    backbone: ELAN args of the P3, P4, P5 backbone blocks.
    spp: SPPELAN (c_out, c_hidden).
    neck_up: ELAN args of the top-down blocks (P4, then P3 = the stride-8 output).
    neck_down: output channels of the bottom-up downsamplers (P3->P4, P4->P5).
    neck_out: ELAN args of the bottom-up blocks (P4 = stride-16 output, P5 = stride-32 output).
    paper_params_m: parameters (millions, 80 classes, re-parameterised) reported by the paper.
    """

    size: str
    stem: tuple[int, int]
    p2_block: Literal["elan1", "repncspelan4"]
    p2: ELANArgs
    down: Literal["aconv", "adown"]
    backbone_down: tuple[int, int, int]
    backbone: tuple[ELANArgs, ELANArgs, ELANArgs]
    spp: tuple[int, int]
    neck_up: tuple[ELANArgs, ELANArgs]
    neck_down: tuple[int, int]
    neck_out: tuple[ELANArgs, ELANArgs]
    paper_params_m: float


VARIANTS: dict[str, YOLO9Variant] = {
    "t": YOLO9Variant(
        size="t", stem=(16, 32), p2_block="elan1", p2=(32, 32, 16, 1), down="aconv",
        backbone_down=(64, 96, 128),
        backbone=((64, 64, 32, 3), (96, 96, 48, 3), (128, 128, 64, 3)),
        spp=(128, 64),
        neck_up=((96, 96, 48, 3), (64, 64, 32, 3)),
        neck_down=(48, 64),
        neck_out=((96, 96, 48, 3), (128, 128, 64, 3)),
        paper_params_m=2.0,
    ),
    "s": YOLO9Variant(
        size="s", stem=(32, 64), p2_block="elan1", p2=(64, 64, 32, 1), down="aconv",
        backbone_down=(128, 192, 256),
        backbone=((128, 128, 64, 3), (192, 192, 96, 3), (256, 256, 128, 3)),
        spp=(256, 128),
        neck_up=((192, 192, 96, 3), (128, 128, 64, 3)),
        neck_down=(96, 128),
        neck_out=((192, 192, 96, 3), (256, 256, 128, 3)),
        paper_params_m=7.1,
    ),
    "m": YOLO9Variant(
        size="m", stem=(32, 64), p2_block="repncspelan4", p2=(128, 128, 64, 1), down="aconv",
        backbone_down=(240, 360, 480),
        backbone=((240, 240, 120, 1), (360, 360, 180, 1), (480, 480, 240, 1)),
        spp=(480, 240),
        neck_up=((360, 360, 180, 1), (240, 240, 120, 1)),
        neck_down=(184, 240),  # the yaml's 180, rounded up to a multiple of 8 by the reference
        neck_out=((360, 360, 180, 1), (480, 480, 240, 1)),
        paper_params_m=20.0,
    ),
    "c": YOLO9Variant(
        size="c", stem=(64, 128), p2_block="repncspelan4", p2=(256, 128, 64, 1), down="adown",
        backbone_down=(256, 512, 512),
        backbone=((512, 256, 128, 1), (512, 512, 256, 1), (512, 512, 256, 1)),
        spp=(512, 256),
        neck_up=((512, 512, 256, 1), (256, 256, 128, 1)),
        neck_down=(256, 512),
        neck_out=((512, 512, 256, 1), (512, 512, 256, 1)),
        paper_params_m=25.3,
    ),
}
