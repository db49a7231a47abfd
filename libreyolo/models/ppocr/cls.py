"""PP-OCR text-line angle classifier: is a cropped text line upright (``0``) or upside down (``180``)?

PaddleOCR's ``ch_ppocr_mobile_v2.0_cls`` (its ``backbones/rec_mobilenet_v3.py`` + ``ClsHead``; the
table below was derived from the ONNX export's graph: every conv shape, stride, group, activation
and constant; our own code): a MobileNetV3-small trunk at scale 0.35 whose downsampling blocks halve the
height only (stride (2, 1)), a 1x1 conv + Hardswish, a 2x2 max pool, a global average pool and one
linear layer to the two classes. Every convolution is bias-free and followed by BatchNorm; the
squeeze-excitation gates are :class:`~.nn.SE` with PaddleOCR's hard sigmoid ``0.2 x + 0.5``.

Input contract: crops Tensor[N, 3, 48, W] RGB in [0, 1] (``W`` = 192 in PaddleOCR's pipeline: each
line resized to 48 px high, its aspect ratio kept, at most 192 wide, right-padded mid grey);
normalised inside as PaddleOCR does (BGR order, to [-1, 1]).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .nn import SE, ConvBN, make_divisible

# k, expanded channels, out channels, use_se, activation, stride: MobileNetV3-small before the scale
CLS_BLOCKS: tuple[tuple[int, int, int, bool, str, int | tuple[int, int]], ...] = (
    (3, 16, 16, True, "relu", (2, 1)),
    (3, 72, 24, False, "relu", (2, 1)),
    (3, 88, 24, False, "relu", 1),
    (5, 96, 40, True, "hardswish", (2, 1)),
    (5, 240, 40, True, "hardswish", 1),
    (5, 240, 40, True, "hardswish", 1),
    (5, 120, 48, True, "hardswish", 1),
    (5, 144, 48, True, "hardswish", 1),
    (5, 288, 96, True, "hardswish", (2, 1)),
    (5, 576, 96, True, "hardswish", 1),
    (5, 576, 96, True, "hardswish", 1),
)
CLS_SCALE = 0.35
CLS_HW = (48, 192)  # PaddleOCR's cls_image_shape (height, largest width)
ANGLES = (0, 180)  # class index -> degrees (PaddleOCR's label_list ['0', '180'])
ANGLE_THRESH = 0.9  # PaddleOCR's cls_thresh: a line is turned when '180' scores over it

_ACTS = {"relu": F.relu, "hardswish": F.hardswish}


class InvertedResidual(nn.Module):
    """1x1 expand -> act -> kxk depthwise (``stride``) -> act [-> SE] -> 1x1 project (no act);
    ``x +`` the result when the shape is kept."""

    def __init__(self, cin: int, exp: int, cout: int, k: int, stride: int | tuple[int, int], se: bool,
                 act: str) -> None:
        super().__init__()
        self.expand = ConvBN(cin, exp, 1)
        self.depthwise = ConvBN(exp, exp, k, stride, groups=exp)
        self.se = SE(exp, slope=0.2) if se else None
        self.linear = ConvBN(exp, cout, 1)
        self.act = _ACTS[act]
        self.residual = cin == cout and stride == 1

    def forward(self, x: Tensor) -> Tensor:
        y = self.act(self.depthwise(self.act(self.expand(x))))
        if self.se is not None:
            y = self.se(y)
        y = self.linear(y)
        return x + y if self.residual else y


class AngleClassifier(nn.Module):
    """Text-line crops Tensor[N, 3, 48, W] RGB in [0, 1] -> ``eval``: probabilities Tensor[N, 2]
    of 0 and 180 degrees (softmax); ``train``: the logits.

    Example:
        >>> import torch
        >>> AngleClassifier().eval()(torch.rand(2, 3, 48, 192)).shape
        torch.Size([2, 2])
    """

    def __init__(self, scale: float = CLS_SCALE) -> None:
        super().__init__()
        c = make_divisible(16 * scale, 8)
        self.conv1 = ConvBN(3, c, 3, 2)
        blocks = []
        for k, exp, out, se, act, s in CLS_BLOCKS:
            e, o = make_divisible(exp * scale, 8), make_divisible(out * scale, 8)
            blocks.append(InvertedResidual(c, e, o, k, s, se, act))
            c = o
        self.blocks = nn.Sequential(*blocks)
        self.conv_last = ConvBN(c, make_divisible(576 * scale, 8), 1)
        self.fc = nn.Linear(self.conv_last.bn.num_features, len(ANGLES))

    def logits(self, z: Tensor) -> Tensor:
        """An already normalised (BGR, [-1, 1]) batch -> logits Tensor[N, 2]."""
        x = self.blocks(F.hardswish(self.conv1(z)))
        x = F.max_pool2d(F.hardswish(self.conv_last(x)), 2, 2)  # (N, C, H/32, W/8)
        return self.fc(x.mean((2, 3)))

    def forward(self, x: Tensor) -> Tensor:
        out = self.logits(x.flip(1) * 2.0 - 1.0)
        return out if self.training else out.softmax(-1)
