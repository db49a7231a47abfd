"""The YOLO-NAS trunk: backbone (QARepVGG stem, four ``YoloNASStage`` stages, SPP) and the PAN
neck (two ``YoloNASUpStage``, two ``YoloNASDownStage``), without any head.

The trunk maps Tensor[B, 3, H, W] (H, W multiples of 32) to three feature maps (strides 8, 16,
32; widths :attr:`NASTrunk.out_channels`). Heads are built apart (detection: the ``yolonas``
family's ``nn.py``), so another task's head (pose, segmentation) can sit on the same trunk.
Everything is static: no host sync, no data-dependent branch (CUDA-graph capturable).

Submodule names follow the reference (super-gradients ``NStageBackbone`` /
``YoloNASPANNeckWithC2``): ``backbone.stem.conv``, ``backbone.stage<i>.{downsample, blocks}``,
``backbone.context_module``, ``neck.neck<i>``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...layers.conv import ConvBNAct, fuse_modules
from ...layers.spp import SPPBottleneck
from .blocks import NASCSPLayer, QARepVGGBlock, conv3x3_block, qarepvgg_block, relu
from .variants import NASVariant, NeckArgs, StageArgs

STRIDES: tuple[int, int, int] = (8, 16, 32)


class NASStem(nn.Module):
    """One stride-2 QARepVGG block without identity. x (Tensor[B, 3, H, W]) -> (Tensor[B, c, H/2, W/2])."""

    def __init__(self, c1: int, c2: int) -> None:
        super().__init__()
        self.conv = QARepVGGBlock(c1, c2, s=2, identity=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class NASStage(nn.Module):
    """Stride-2 QARepVGG downsample, then a CSP layer of QARepVGG bottlenecks.
    x (Tensor[B, c1, H, W]) -> (Tensor[B, out, H/2, W/2])."""

    def __init__(self, c1: int, args: StageArgs) -> None:
        super().__init__()
        out, n, hidden, concat = args
        self.downsample = QARepVGGBlock(c1, out, s=2, identity=False)
        self.blocks = NASCSPLayer(out, out, n, block=qarepvgg_block, hidden=hidden, concat_intermediates=concat)

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.downsample(x))


class NASUpStage(nn.Module):
    """Top-down PAN stage with a higher-resolution skip.

    (x Tensor[B, c_in, h, w], skip1 Tensor[B, c_s1, 2h, 2w], skip2 Tensor[B, c_s2, 4h, 4w]) ->
    (inter Tensor[B, out, h, w], y Tensor[B, out, 2h, 2w]): ``inter = conv(x)`` (the lateral map
    the down path reuses); ``y = blocks(reduce_after_concat(cat(upsample(inter), reduce_skip1(skip1),
    downsample(reduce_skip2(skip2)))))`` with a stride-2 transposed-conv upsample.
    """

    def __init__(self, c_in: int, c_skip1: int, c_skip2: int, args: NeckArgs) -> None:
        super().__init__()
        out, n, hidden = args
        self.reduce_skip1 = ConvBNAct(c_skip1, out, 1, act=relu())
        self.reduce_skip2 = ConvBNAct(c_skip2, out, 1, act=relu())
        self.conv = ConvBNAct(c_in, out, 1, act=relu())
        self.upsample = nn.ConvTranspose2d(out, out, kernel_size=2, stride=2)
        self.downsample = ConvBNAct(out, out, 3, 2, act=relu())
        self.reduce_after_concat = ConvBNAct(3 * out, out, 1, act=relu())
        self.blocks = NASCSPLayer(out, out, n, block=qarepvgg_block, hidden=hidden)
        self.out_channels = out

    def forward(self, x: Tensor, skip1: Tensor, skip2: Tensor) -> tuple[Tensor, Tensor]:
        inter = self.conv(x)
        y = torch.cat((self.upsample(inter), self.reduce_skip1(skip1), self.downsample(self.reduce_skip2(skip2))), 1)
        return inter, self.blocks(self.reduce_after_concat(y))


class NASDownStage(nn.Module):
    """Bottom-up PAN stage: ``blocks(cat(conv3x3_s2(x), skip))``, its CSP bottlenecks plain 3x3
    convs. (x Tensor[B, c_in, 2h, 2w], skip Tensor[B, c_skip, h, w]) -> Tensor[B, out, h, w]."""

    def __init__(self, c_in: int, c_skip: int, args: NeckArgs) -> None:
        super().__init__()
        out, n, hidden = args
        self.conv = ConvBNAct(c_in, out // 2, 3, 2, act=relu())
        self.blocks = NASCSPLayer(out // 2 + c_skip, out, n, block=conv3x3_block, hidden=hidden)
        self.out_channels = out

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        return self.blocks(torch.cat((self.conv(x), skip), 1))


class NASBackbone(nn.Module):
    """Stem, four stages and the SPP context module. x -> [c2 (stride 4), c3 (8), c4 (16),
    c5 (32, after SPP)]."""

    def __init__(self, v: NASVariant, *, in_ch: int = 3) -> None:
        super().__init__()
        self.stem = NASStem(in_ch, v.stem)
        c = v.stem
        for i, args in enumerate(v.stages, 1):
            setattr(self, f"stage{i}", NASStage(c, args))
            c = args[0]
        self.context_module = SPPBottleneck(c, v.spp, kernel_sizes=(5, 9, 13), act=relu())
        self.out_channels = (v.stages[0][0], v.stages[1][0], v.stages[2][0], v.spp)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.stem(x)
        c2 = self.stage1(x)
        c3 = self.stage2(c2)
        c4 = self.stage3(c3)
        return [c2, c3, c4, self.context_module(self.stage4(c4))]


class NASPANNeck(nn.Module):
    """[c2, c3, c4, c5] -> [p3 (stride 8), p4 (16), p5 (32)]."""

    def __init__(self, ch: tuple[int, int, int, int], v: NASVariant) -> None:
        super().__init__()
        c2, c3, c4, c5 = ch
        self.neck1 = NASUpStage(c5, c4, c3, v.up[0])
        self.neck2 = NASUpStage(self.neck1.out_channels, c3, c2, v.up[1])
        self.neck3 = NASDownStage(self.neck2.out_channels, self.neck2.out_channels, v.down[0])
        self.neck4 = NASDownStage(self.neck3.out_channels, self.neck1.out_channels, v.down[1])
        self.out_channels = (self.neck2.out_channels, self.neck3.out_channels, self.neck4.out_channels)

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        c2, c3, c4, c5 = feats
        inter1, x = self.neck1(c5, c4, c3)
        inter2, p3 = self.neck2(x, c3, c2)
        p4 = self.neck3(p3, inter2)
        p5 = self.neck4(p4, inter1)
        return [p3, p4, p5]


class NASTrunk(nn.Module):
    """Backbone + PAN neck. x (Tensor[B, 3, H, W], H and W multiples of 32) -> [p3, p4, p5],
    ``p_i`` Tensor[B, out_channels[i], H / s_i, W / s_i] for ``strides`` (8, 16, 32)."""

    def __init__(self, v: NASVariant, *, in_ch: int = 3) -> None:
        super().__init__()
        self.backbone = NASBackbone(v, in_ch=in_ch)
        self.neck = NASPANNeck(self.backbone.out_channels, v)
        self.out_channels = self.neck.out_channels
        self.strides = STRIDES

    def forward(self, x: Tensor) -> list[Tensor]:
        return self.neck(self.backbone(x))


def fuse_nas(module: nn.Module) -> int:
    """Merge every :class:`QARepVGGBlock` inside ``module`` to one conv, then fold the remaining
    Conv + BatchNorm pairs (:func:`libreyolo.layers.conv.fuse_modules`), in place. Returns how
    many modules were fused."""
    n = 0
    for m in list(module.modules()):
        if isinstance(m, QARepVGGBlock) and m.conv is None:
            m.fuse()
            n += 1
    return n + fuse_modules(module)
