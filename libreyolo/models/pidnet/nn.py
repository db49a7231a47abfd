"""PIDNet (Xu et al., CVPR 2023): a three-branch real-time semantic-segmentation network.

- **I branch** (integral, context): a ResNet-style trunk to 1/64 (``layer1``-``layer5``), a
  parallel aggregation pyramid pooling module (:class:`PAPPM`) on the deepest map.
- **P branch** (proportional, detail): stays at 1/8 (``layer3_``-``layer5_``); twice it takes
  context from the I branch through a pixel-attention-guided fusion (:class:`Pag`).
- **D branch** (derivative, boundary): also at 1/8 (``layer3_d``-``layer5_d``), fed with the
  I branch's differences (``diff3``, ``diff4``); its sigmoid guides the final boundary-attention
  fusion of P and I (:class:`LightBag`, the Light-Bag of PIDNet-S).
- **Heads**: ``final_layer`` on the fused map (the output); in training two auxiliary heads,
  ``seghead_p`` (semantic, on the P branch after ``pag3``) and ``seghead_d`` (boundary, one
  channel, on the D branch after ``layer4_d``). In eval mode the auxiliary heads do not run.

=====  ==  ==  ======  ==========  ===========  ==========================================
size   m   n   planes  ppm planes  head planes  params @19 classes, eval (published 7.6 M)
=====  ==  ==  ======  ==========  ===========  ==========================================
s      2   3   32      96          128          7,625,715 (7,720,935 with the aux heads)
=====  ==  ==  ======  ==========  ===========  ==========================================

Contract: Tensor[B, 3, H, W] float RGB in [0, 1] (H, W multiples of 8, the task pads to 32; standardised here with
the ImageNet mean / std) -> eval: logits Tensor[B, nc, H / 8, W / 8]; train: the tuple
``(aux logits [B, nc, H/8, W/8], logits [B, nc, H/8, W/8], boundary logits [B, 1, H/8, W/8])``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.classify import IMAGENET_MEAN, IMAGENET_STD

# size -> (m, n, planes, ppm_planes, head_planes)
SPECS: dict[str, tuple[int, int, int, int, int]] = {"s": (2, 3, 32, 96, 128)}
BN_MOMENTUM = 0.1


def _conv_bn(c1: int, c2: int, k: int = 1, s: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c1, c2, k, s, k // 2, bias=False), nn.BatchNorm2d(c2, momentum=BN_MOMENTUM))


def _up(x: Tensor, size: tuple[int, int] | torch.Size) -> Tensor:
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN with a residual; ``last`` leaves out the final ReLU (the branch applies it)."""

    expansion = 1

    def __init__(self, c1: int, c2: int, s: int = 1, downsample: nn.Module | None = None, last: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c1, c2, 3, s, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c2, momentum=BN_MOMENTUM)
        self.conv2 = nn.Conv2d(c2, c2, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c2, momentum=BN_MOMENTUM)
        self.downsample, self.last = downsample, last

    def forward(self, x: Tensor) -> Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        y = y + (self.downsample(x) if self.downsample is not None else x)
        return y if self.last else F.relu(y)


class Bottleneck(nn.Module):
    """1x1 -> 3x3 (stride) -> 1x1 to ``2 * c2`` channels, with a residual."""

    expansion = 2

    def __init__(self, c1: int, c2: int, s: int = 1, downsample: nn.Module | None = None, last: bool = True) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c1, c2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c2, momentum=BN_MOMENTUM)
        self.conv2 = nn.Conv2d(c2, c2, 3, s, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c2, momentum=BN_MOMENTUM)
        self.conv3 = nn.Conv2d(c2, c2 * 2, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c2 * 2, momentum=BN_MOMENTUM)
        self.downsample, self.last = downsample, last

    def forward(self, x: Tensor) -> Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn3(self.conv3(F.relu(self.bn2(self.conv2(y)))))
        y = y + (self.downsample(x) if self.downsample is not None else x)
        return y if self.last else F.relu(y)


def make_layer(block: type[BasicBlock] | type[Bottleneck], c1: int, c2: int, n: int, s: int = 1) -> nn.Sequential:
    """``n`` blocks, the first with stride ``s`` (and a 1x1 conv-BN shortcut when the shape changes),
    the last without its final ReLU; the first Bottleneck of a layer leaves it out too (the
    network follows every layer by its own ReLU or by a fusion)."""
    out = c2 * block.expansion
    down = _conv_bn(c1, out, 1, s) if s != 1 or c1 != out else None
    blocks: list[nn.Module] = [block(c1, c2, s, down, last=(n == 1 or block is Bottleneck))]
    blocks += [block(out, c2, 1, None, last=(i == n - 1)) for i in range(1, n)]
    return nn.Sequential(*blocks)


class Pag(nn.Module):
    """Pixel-attention-guided fusion: ``sigma = sigmoid(<f_x(p), up(f_y(i))>)`` per pixel, then
    ``(1 - sigma) * p + sigma * up(i)`` (p: detail Tensor[B, C, h, w]; i: context, coarser)."""

    def __init__(self, c: int, mid: int) -> None:
        super().__init__()
        self.f_x, self.f_y = _conv_bn(c, mid), _conv_bn(c, mid)

    def forward(self, p: Tensor, i: Tensor) -> Tensor:
        size = p.shape[2:]
        sim = torch.sigmoid((self.f_x(p) * _up(self.f_y(i), size)).sum(1, keepdim=True))
        return (1 - sim) * p + sim * _up(i, size)


def _bn_relu_conv(c1: int, c2: int, k: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.BatchNorm2d(c1, momentum=BN_MOMENTUM), nn.ReLU(), nn.Conv2d(c1, c2, k, 1, k // 2, groups=groups,
                                                                          bias=False)]


class PAPPM(nn.Module):
    """Parallel aggregation PPM: average pools (5/2, 9/4, 17/8, global) of the input, each
    BN-ReLU-1x1 to ``mid`` and added to the unpooled branch, processed together by one grouped
    3x3 (groups 4), concatenated with the unpooled branch, compressed to ``c2``, plus a 1x1 shortcut."""

    def __init__(self, c1: int, mid: int, c2: int) -> None:
        super().__init__()
        pools: list[nn.Module] = [nn.AvgPool2d(5, 2, 2), nn.AvgPool2d(9, 4, 4), nn.AvgPool2d(17, 8, 8),
                                  nn.AdaptiveAvgPool2d(1)]
        self.scale0 = nn.Sequential(*_bn_relu_conv(c1, mid))
        self.scales = nn.ModuleList(nn.Sequential(p, *_bn_relu_conv(c1, mid)) for p in pools)
        self.process = nn.Sequential(*_bn_relu_conv(mid * 4, mid * 4, 3, groups=4))
        self.compression = nn.Sequential(*_bn_relu_conv(mid * 5, c2))
        self.shortcut = nn.Sequential(*_bn_relu_conv(c1, c2))

    def forward(self, x: Tensor) -> Tensor:
        x0 = self.scale0(x)
        pyramid = [_up(s(x), x.shape[2:]) + x0 for s in self.scales]
        return self.compression(torch.cat([x0, self.process(torch.cat(pyramid, 1))], 1)) + self.shortcut(x)


class LightBag(nn.Module):
    """Light boundary-attention-guided fusion: with ``s = sigmoid(d)``,
    ``conv_p((1 - s) * i + p) + conv_i(i + s * p)``."""

    def __init__(self, c1: int, c2: int) -> None:
        super().__init__()
        self.conv_p, self.conv_i = _conv_bn(c1, c2), _conv_bn(c1, c2)

    def forward(self, p: Tensor, i: Tensor, d: Tensor) -> Tensor:
        s = torch.sigmoid(d)
        return self.conv_p((1 - s) * i + p) + self.conv_i(i + s * p)


class SegHead(nn.Module):
    """BN-ReLU-3x3 conv to ``mid``, BN-ReLU-1x1 conv (with bias) to ``c2`` outputs."""

    def __init__(self, c1: int, mid: int, c2: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(c1, momentum=BN_MOMENTUM)
        self.conv1 = nn.Conv2d(c1, mid, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid, momentum=BN_MOMENTUM)
        self.conv2 = nn.Conv2d(mid, c2, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(F.relu(self.bn2(self.conv1(F.relu(self.bn1(x))))))


class PIDNetNet(nn.Module):
    """The three-branch network (module docstring).

    Example:
        >>> net = build_pidnet(size="s", nc=3).eval()
        >>> tuple(net(torch.rand(1, 3, 64, 128)).shape)
        (1, 3, 8, 16)
    """

    def __init__(self, m: int, n: int, planes: int, ppm: int, head: int, nc: int) -> None:
        super().__init__()
        c = planes
        self.conv1 = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1), nn.BatchNorm2d(c, momentum=BN_MOMENTUM), nn.ReLU(),
                                   nn.Conv2d(c, c, 3, 2, 1), nn.BatchNorm2d(c, momentum=BN_MOMENTUM), nn.ReLU())
        self.layer1 = make_layer(BasicBlock, c, c, m)
        self.layer2 = make_layer(BasicBlock, c, c * 2, m, 2)
        self.layer3 = make_layer(BasicBlock, c * 2, c * 4, n, 2)
        self.layer4 = make_layer(BasicBlock, c * 4, c * 8, n, 2)
        self.layer5 = make_layer(Bottleneck, c * 8, c * 8, 2, 2)
        self.compression3, self.compression4 = _conv_bn(c * 4, c * 2), _conv_bn(c * 8, c * 2)
        self.pag3, self.pag4 = Pag(c * 2, c), Pag(c * 2, c)
        self.layer3_ = make_layer(BasicBlock, c * 2, c * 2, m)
        self.layer4_ = make_layer(BasicBlock, c * 2, c * 2, m)
        self.layer5_ = make_layer(Bottleneck, c * 2, c * 2, 1)
        self.layer3_d = BasicBlock(c * 2, c, 1, _conv_bn(c * 2, c), last=True)
        self.layer4_d = make_layer(Bottleneck, c, c, 1)
        self.diff3, self.diff4 = _conv_bn(c * 4, c, 3), _conv_bn(c * 8, c * 2, 3)
        self.spp = PAPPM(c * 16, ppm, c * 4)
        self.dfm = LightBag(c * 4, c * 4)
        self.layer5_d = make_layer(Bottleneck, c * 2, c * 2, 1)
        self.seghead_p = SegHead(c * 2, head, nc)
        self.seghead_d = SegHead(c * 2, c, 1)
        self.final_layer = SegHead(c * 4, head, nc)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor, Tensor]:
        x = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        x = F.relu(self.layer2(F.relu(self.layer1(self.conv1(x)))))  # 1/8
        size = x.shape[2:]
        p, d = self.layer3_(x), self.layer3_d(x)
        x = F.relu(self.layer3(x))  # 1/16
        p = self.pag3(p, self.compression3(x))
        d = d + _up(self.diff3(x), size)
        aux_p = p
        x = F.relu(self.layer4(x))  # 1/32
        p, d = self.layer4_(F.relu(p)), self.layer4_d(F.relu(d))
        p = self.pag4(p, self.compression4(x))
        d = d + _up(self.diff4(x), size)
        aux_d = d
        p, d = self.layer5_(F.relu(p)), self.layer5_d(F.relu(d))
        i = _up(self.spp(self.layer5(x)), size)  # 1/64 context, brought to 1/8
        out = self.final_layer(self.dfm(p, i, d))
        if not self.training:
            return out
        return self.seghead_p(aux_p), out, self.seghead_d(aux_d)


def build_pidnet(*, size: str, nc: int) -> PIDNetNet:
    """A PIDNet of ``size`` (s) with ``nc`` classes, randomly initialised (He-normal convolutions by
    fan-out, BatchNorm 1 / 0; the three heads' last 1x1 convolutions normal with std 0.01 and bias
    0, so that the first logits are small).

    Example:
        >>> net = build_pidnet(size="s", nc=19)
        >>> sum(p.numel() for p in net.parameters())
        7720935
    """
    if size not in SPECS:
        raise ConfigError(f"unknown PIDNet size {size!r}; sizes: {', '.join(SPECS)}")
    net = PIDNetNet(*SPECS[size], nc=nc)
    for mod in net.modules():
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)
    for head in (net.seghead_p, net.seghead_d, net.final_layer):
        nn.init.normal_(head.conv2.weight, std=0.01)
    return net
