"""MobileNetV4-Conv-Small (Qin et al., 2024, table 11): conv stem, two conv stages, UIB stages.

Layer table (input 224 px; ``k_start``/``k_mid`` of the UIB blocks, 0 = no depthwise conv):

====================  ======  =====  ========  =======  ======  =======
block                 c_out   s      k_start   k_mid    expand  repeats
====================  ======  =====  ========  =======  ======  =======
conv 3x3 (stem)       32      2
conv 3x3 / conv 1x1   32/32   2/1
conv 3x3 / conv 1x1   96/64   2/1
UIB ExtraDW           96      2      5         5        3       1
UIB IR                96      1      0         3        2       4
UIB ConvNext          96      1      3         0        4       1
UIB ExtraDW           128     2      3         3        6       1
UIB ExtraDW           128     1      5         5        4       1
UIB IR                128     1      0         5        4       1
UIB IR                128     1      0         5        3       1
UIB IR                128     1      0         3        4       2
conv 1x1              960     1
global pool, conv 1x1 (+BN, ReLU) 1280, linear nc
====================  ======  =====  ========  =======  ======  =======

3.77 M parameters at 1000 classes (published: 3.8 M). Contract: Tensor[B, 3, H, W] float in [0, 1]
-> logits Tensor[B, nc] in train and eval mode.
"""

from __future__ import annotations

from torch import Tensor, nn

from ...layers.classify import ImageClassifier
from .uib import ConvBNAct, UniversalInvertedBottleneck

# (c_out, stride, k_start, k_mid, expand, repeats)
_UIB_SMALL: tuple[tuple[int, int, int, int, float, int], ...] = (
    (96, 2, 5, 5, 3.0, 1), (96, 1, 0, 3, 2.0, 4), (96, 1, 3, 0, 4.0, 1),
    (128, 2, 3, 3, 6.0, 1), (128, 1, 5, 5, 4.0, 1), (128, 1, 0, 5, 4.0, 1), (128, 1, 0, 5, 3.0, 1),
    (128, 1, 0, 3, 4.0, 2),
)


class MobileNetV4ConvSmall(nn.Module):
    def __init__(self, *, nc: int, dropout: float = 0.0) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            ConvBNAct(3, 32, 3, 2),  # stem
            ConvBNAct(32, 32, 3, 2), ConvBNAct(32, 32, 1),
            ConvBNAct(32, 96, 3, 2), ConvBNAct(96, 64, 1),
        ]
        c = 64
        for c_out, s, k0, k1, e, n in _UIB_SMALL:
            for i in range(n):
                layers.append(UniversalInvertedBottleneck(c, c_out, k_start=k0, k_mid=k1, stride=s if i == 0 else 1,
                                                          expand=e))
                c = c_out
        layers.append(ConvBNAct(c, 960, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = ConvBNAct(960, 1280, 1)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(1280, nc)

    def forward(self, x: Tensor) -> Tensor:
        y = self.head(self.pool(self.features(x))).flatten(1)
        return self.classifier(self.dropout(y))


def build_mobilenetv4(*, size: str, nc: int) -> nn.Module:
    if size != "conv_small":
        raise ValueError(f"unknown MobileNetV4 size {size!r}")
    return ImageClassifier(MobileNetV4ConvSmall(nc=nc))
