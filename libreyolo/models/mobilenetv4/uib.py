"""MobileNetV4 building blocks: conv-BN-act and the Universal Inverted Bottleneck (UIB).

The UIB (MobileNetV4 paper, section 3.1) generalises the inverted residual: an optional depthwise
convolution before the expansion (``dw_start``), a 1x1 expansion, an optional depthwise convolution
after it (``dw_mid``) and a 1x1 projection. The four instances used by the conv models:

============  ==========  ========
variant       dw_start    dw_mid
============  ==========  ========
ExtraDW       k x k       k x k
IR (MBConv)   none        k x k
ConvNext      k x k       none
FFN           none        none
============  ==========  ========

The stride sits on ``dw_mid`` when there is one, otherwise on ``dw_start``. Tensor contract:
Tensor[B, C_in, H, W] -> Tensor[B, C_out, H / s, W / s].
"""

from __future__ import annotations

from torch import Tensor, nn


def make_divisible(v: float, divisor: int = 8, *, min_value: int | None = None) -> int:
    """Round ``v`` to the nearest multiple of ``divisor``, never more than 10 % below ``v``."""
    min_value = min_value or divisor
    out = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if out < 0.9 * v:
        out += divisor
    return out


class ConvBNAct(nn.Sequential):
    """Conv2d (no bias, 'same' padding for odd kernels) + BatchNorm + optional ReLU."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1, *, groups: int = 1, act: bool = True) -> None:
        layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, k, s, k // 2, groups=groups, bias=False),
                                   nn.BatchNorm2d(c_out)]
        if act:
            layers.append(nn.ReLU(inplace=True))
        super().__init__(*layers)


class UniversalInvertedBottleneck(nn.Module):
    """UIB block (see the module docstring).

    Args:
        c_in, c_out: channels in and out.
        k_start: kernel of the depthwise conv before the expansion (0 = none).
        k_mid: kernel of the depthwise conv after the expansion (0 = none).
        stride: 1 or 2.
        expand: expansion ratio of the hidden width (rounded to a multiple of 8).
    """

    def __init__(self, c_in: int, c_out: int, *, k_start: int, k_mid: int, stride: int, expand: float) -> None:
        super().__init__()
        hidden = make_divisible(c_in * expand)
        s_start = stride if k_mid == 0 else 1
        self.dw_start = ConvBNAct(c_in, c_in, k_start, s_start, groups=c_in, act=False) if k_start else nn.Identity()
        self.expand = ConvBNAct(c_in, hidden, 1)
        self.dw_mid = ConvBNAct(hidden, hidden, k_mid, stride, groups=hidden) if k_mid else nn.Identity()
        self.project = ConvBNAct(hidden, c_out, 1, act=False)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: Tensor) -> Tensor:
        y = self.project(self.dw_mid(self.expand(self.dw_start(x))))
        return x + y if self.residual else y
