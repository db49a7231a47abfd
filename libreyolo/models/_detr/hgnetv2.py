"""HGNetv2 backbone (PP-HGNetV2), as used by the D-FINE / DEIM detectors.

Structure (the D-FINE reference, ``B0`` table below; ``B2`` (D-FINE / RT-DETRv4 M) and DEIMv2's
three-stage ``Atto`` / ``Femto`` / ``Pico`` only change the table):

* stem: 3x3 s2 conv -> two-branch block (a 2x2 conv pair on a right/bottom zero-padded map
  beside a 2x2 stride-1 max-pool, concatenated) -> 3x3 s2 conv -> 1x1 conv (stride 4 overall);
* four stages; each optionally starts with a depthwise 3x3 s2 conv (no activation) and stacks
  HG blocks. An HG block runs ``layer_num`` convs in sequence (plain k x k, or "light": 1x1 without
  activation then depthwise k x k), concatenates the input and every intermediate map, and
  aggregates with a 1x1 squeeze (to ``out/2``) then a 1x1 excitation (to ``out``); every block but
  the first of a stage adds its input (residual).
* every conv is Conv (no bias) + BatchNorm + ReLU, optionally followed by a learnable affine
  ``scale * x + bias`` (``use_lab``, on in D-FINE) when it has an activation.

forward(x): Tensor[B, 3, H, W] -> list of the stages in ``return_idx`` (Tensor[B, C_i, H/s_i,
W/s_i], strides 4, 8, 16, 32 for stages 0..3). No host sync, no data-dependent shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import ConvBNAct


@dataclass(frozen=True, kw_only=True)
class HGStageSpec:
    """One stage: in/mid/out channels, blocks, downsample, light convs, kernel, convs per block."""

    c_in: int
    c_mid: int
    c_out: int
    blocks: int
    downsample: bool
    light: bool
    kernel: int
    layers: int


# name -> (stem channels (in, mid, out), stages)
HGNETV2_ARCH: dict[str, tuple[tuple[int, int, int], tuple[HGStageSpec, ...]]] = {
    "B0": ((3, 16, 16), (
        HGStageSpec(c_in=16, c_mid=16, c_out=64, blocks=1, downsample=False, light=False, kernel=3, layers=3),
        HGStageSpec(c_in=64, c_mid=32, c_out=256, blocks=1, downsample=True, light=False, kernel=3, layers=3),
        HGStageSpec(c_in=256, c_mid=64, c_out=512, blocks=2, downsample=True, light=True, kernel=5, layers=3),
        HGStageSpec(c_in=512, c_mid=128, c_out=1024, blocks=1, downsample=True, light=True, kernel=5, layers=3),
    )),
    "B2": ((3, 24, 32), (
        HGStageSpec(c_in=32, c_mid=32, c_out=96, blocks=1, downsample=False, light=False, kernel=3, layers=4),
        HGStageSpec(c_in=96, c_mid=64, c_out=384, blocks=1, downsample=True, light=False, kernel=3, layers=4),
        HGStageSpec(c_in=384, c_mid=128, c_out=768, blocks=3, downsample=True, light=True, kernel=5, layers=4),
        HGStageSpec(c_in=768, c_mid=256, c_out=1536, blocks=1, downsample=True, light=True, kernel=5, layers=4),
    )),
    # DEIMv2's three-stage nets (B0's first two stages, a narrower last stage)
    "Atto": ((3, 16, 16), (
        HGStageSpec(c_in=16, c_mid=16, c_out=64, blocks=1, downsample=False, light=False, kernel=3, layers=3),
        HGStageSpec(c_in=64, c_mid=32, c_out=256, blocks=1, downsample=True, light=False, kernel=3, layers=3),
        HGStageSpec(c_in=256, c_mid=64, c_out=256, blocks=1, downsample=True, light=True, kernel=3, layers=3),
    )),
    "Femto": ((3, 16, 16), (
        HGStageSpec(c_in=16, c_mid=16, c_out=64, blocks=1, downsample=False, light=False, kernel=3, layers=3),
        HGStageSpec(c_in=64, c_mid=32, c_out=256, blocks=1, downsample=True, light=False, kernel=3, layers=3),
        HGStageSpec(c_in=256, c_mid=64, c_out=512, blocks=1, downsample=True, light=True, kernel=5, layers=3),
    )),
    "Pico": ((3, 16, 16), (
        HGStageSpec(c_in=16, c_mid=16, c_out=64, blocks=1, downsample=False, light=False, kernel=3, layers=3),
        HGStageSpec(c_in=64, c_mid=32, c_out=256, blocks=1, downsample=True, light=False, kernel=3, layers=3),
        HGStageSpec(c_in=256, c_mid=64, c_out=512, blocks=2, downsample=True, light=True, kernel=5, layers=3),
    )),
}


class LearnableAffine(nn.Module):
    """``scale * x + bias`` with two learned scalars (initialised to 1 and 0)."""

    def __init__(self, scale: float = 1.0, bias: float = 0.0) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor([scale]))
        self.bias = nn.Parameter(torch.tensor([bias]))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * x + self.bias


class HGConv(nn.Module):
    """Conv(k, s, padding (k-1)//2, groups g) + BN + ReLU (+ learnable affine when ``lab``);
    ``act=False``: Conv + BN only. x (Tensor[B, c1, H, W]) -> Tensor[B, c2, H', W']."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, *, g: int = 1, act: bool = True,
                 lab: bool = False) -> None:
        super().__init__()
        self.conv = ConvBNAct(c1, c2, k, s, (k - 1) // 2, g=g, act=nn.ReLU() if act else False)
        self.lab = LearnableAffine() if (act and lab) else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.lab(self.conv(x))


class HGStem(nn.Module):
    """Stride-4 stem (see module docs). x (Tensor[B, c_in, H, W]) -> Tensor[B, c_out, H/4, W/4]."""

    def __init__(self, c_in: int, c_mid: int, c_out: int, *, lab: bool) -> None:
        super().__init__()
        self.stem1 = HGConv(c_in, c_mid, 3, 2, lab=lab)
        self.stem2a = HGConv(c_mid, c_mid // 2, 2, 1, lab=lab)
        self.stem2b = HGConv(c_mid // 2, c_mid, 2, 1, lab=lab)
        self.stem3 = HGConv(c_mid * 2, c_mid, 3, 2, lab=lab)
        self.stem4 = HGConv(c_mid, c_out, 1, 1, lab=lab)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=1, ceil_mode=True)

    def forward(self, x: Tensor) -> Tensor:
        x = F.pad(self.stem1(x), (0, 1, 0, 1))
        x2 = self.stem2b(F.pad(self.stem2a(x), (0, 1, 0, 1)))
        x1 = self.pool(x)
        return self.stem4(self.stem3(torch.cat([x1, x2], 1)))


class HGBlock(nn.Module):
    """Dense chain of ``layers`` convs + squeeze/excitation 1x1 aggregation (+ residual)."""

    def __init__(self, c_in: int, c_mid: int, c_out: int, *, layers: int, kernel: int, residual: bool,
                 light: bool, lab: bool) -> None:
        super().__init__()
        self.residual = residual
        mods = []
        for i in range(layers):
            c = c_in if i == 0 else c_mid
            if light:
                mods.append(nn.Sequential(HGConv(c, c_mid, 1, act=False, lab=lab),
                                          HGConv(c_mid, c_mid, kernel, g=c_mid, lab=lab)))
            else:
                mods.append(HGConv(c, c_mid, kernel, lab=lab))
        self.layers = nn.ModuleList(mods)
        total = c_in + layers * c_mid
        self.aggregation = nn.Sequential(HGConv(total, c_out // 2, 1, lab=lab), HGConv(c_out // 2, c_out, 1, lab=lab))

    def forward(self, x: Tensor) -> Tensor:
        outs = [x]
        y = x
        for layer in self.layers:
            y = layer(y)
            outs.append(y)
        y = self.aggregation(torch.cat(outs, 1))
        return y + x if self.residual else y


class HGStage(nn.Module):
    """Optional depthwise stride-2 conv (no activation), then ``blocks`` HG blocks."""

    def __init__(self, spec: HGStageSpec, *, lab: bool) -> None:
        super().__init__()
        s = spec
        self.downsample = (HGConv(s.c_in, s.c_in, 3, 2, g=s.c_in, act=False, lab=lab)
                           if s.downsample else nn.Identity())
        self.blocks = nn.Sequential(*(
            HGBlock(s.c_in if i == 0 else s.c_out, s.c_mid, s.c_out, layers=s.layers, kernel=s.kernel,
                    residual=i > 0, light=s.light, lab=lab)
            for i in range(s.blocks)))

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.downsample(x))


class HGNetv2(nn.Module):
    """HGNetv2 feature extractor (see module docs).

    Args:
        name: architecture table key (``"B0"``, ``"B2"``, ``"Atto"``, ``"Femto"``, ``"Pico"``).
        return_idx: stages whose outputs are returned (0..3, strides 4, 8, 16, 32).
        use_lab: learnable affine after every activated conv (D-FINE: on).

    Attributes ``out_channels`` / ``out_strides``: of the returned stages, in order.

    Example:
        >>> net = HGNetv2(name="B0", return_idx=(2, 3))
        >>> [tuple(f.shape) for f in net(torch.rand(1, 3, 64, 64))]
        [(1, 512, 4, 4), (1, 1024, 2, 2)]
    """

    def __init__(self, *, name: str = "B0", return_idx: Sequence[int] = (1, 2, 3), use_lab: bool = True) -> None:
        super().__init__()
        if name not in HGNETV2_ARCH:
            raise ConfigError(f"HGNetv2 has no architecture {name!r}; known: {', '.join(HGNETV2_ARCH)}")
        stem, stages = HGNETV2_ARCH[name]
        self.return_idx = tuple(int(i) for i in return_idx)
        if not self.return_idx or any(i < 0 or i >= len(stages) for i in self.return_idx):
            raise ConfigError(f"return_idx={tuple(return_idx)} must name stages 0..{len(stages) - 1}")
        self.stem = HGStem(*stem, lab=use_lab)
        self.stages = nn.ModuleList(HGStage(s, lab=use_lab) for s in stages)
        self.out_channels = tuple(stages[i].c_out for i in self.return_idx)
        self.out_strides = tuple(4 * 2 ** i for i in self.return_idx)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.stem(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in self.return_idx:
                outs.append(x)
        return outs
