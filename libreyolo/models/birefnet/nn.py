"""BiRefNet (Zheng et al., "Bilateral Reference for High-Resolution Dichotomous Image Segmentation",
CAAI AIR 2024): sizes lite (Swin-T backbone), l (Swin-L, the main release), tiny (a test size).

=====  ========  ==============  ===============  ======  ===================================
size   backbone  depths          heads            window  params (published)
=====  ========  ==============  ===============  ======  ===================================
lite   Swin-T    2, 2, 6, 2      3, 6, 12, 24     7       44.31 M (44.3 M, BiRefNet_lite)
l      Swin-L    2, 2, 18, 2     6, 12, 24, 48    12      220.18 M (220 M, BiRefNet)
=====  ========  ==============  ===============  ======  ===================================

Tensor[B, 3, H, W] in [0, 1] (H, W multiples of 32) -> eval: the matte logits Tensor[B, 1, H, W];
train: ``(maps, gdt_preds, gdt_labels)`` (below). Two parts, which are also the seam (SPEC G-9):

1. :class:`~.backbone.BiRefNetEncoder` (captured): ImageNet standardisation, the Swin backbone on
   the image and its half-size copy, levels concatenated, the context levels in front of x4;
2. :class:`BiRefNetDecoder` (eager: its ASPP blocks use ``torchvision.ops.deform_conv2d``, which
   replays wrongly from a CUDA graph): a squeeze block on x4, then four decoder blocks from coarse
   to fine. Each takes the previous output upsampled, plus a lateral 1x1 convolution of the
   backbone level (the localisation path), concatenated with a convolution of the **image cut
   into patches** of that level's size and stacked on the channels (the *inward* reference:
   ``b c (hg h) (wg w) -> b (c hg wg) h w``). On the three coarse outputs a gradient branch
   (3x3 conv, BN, ReLU) gates the features by a sigmoid attention map (the *outward* reference);
   in training it also predicts the image's gradient inside the object (``gdt_preds`` against
   ``gdt_labels`` = the 5x5 Laplacian of the grey image times the level's prediction) and the
   level predicts the matte (``maps``: three auxiliary maps then the final one, multi-scale
   supervision).

A decoder block (``BasicDecBlk``) is conv 3x3 -> BN -> ReLU -> ASPP-deformable -> conv 3x3 -> BN; the
ASPP-deformable block has a 1x1 deformable branch, deformable branches of kernel 1, 3 and 7, and
an image-pooling branch, concatenated, 1x1 conv -> BN -> ReLU -> dropout 0.5. Module names follow
the reference state dict (``decoder.decoder_block4.dec_att.aspp_deforms.1.atrous_conv.offset_conv``),
so :mod:`.convert` maps BiRefNet checkpoints with key renames only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.deform_conv import DeformableConv2d
from .backbone import SPECS, BiRefNetEncoder, BiRefNetSpec, _resize

__all__ = ["SPECS", "BiRefNetSpec", "BiRefNetNet", "build_birefnet"]


def patches(x: Tensor, ref: Tensor) -> Tensor:
    """The image cut into a grid of ``ref``-sized patches stacked on the channels:
    Tensor[B, C, g*h, g*w] -> Tensor[B, C*g*g, h, w] (channel index ``c * g*g + row * g + col``).

    Example:
        >>> x = torch.arange(16.0).view(1, 1, 4, 4)
        >>> patches(x, torch.zeros(1, 1, 2, 2))[0, :, 0, 0].tolist()  # the top-left pixel of each patch
        [0.0, 2.0, 8.0, 10.0]
    """
    b, c, hh, ww = (int(v) for v in x.shape)
    h, w = int(ref.shape[2]), int(ref.shape[3])
    gh, gw = hh // h, ww // w
    return x.view(b, c, gh, h, gw, w).permute(0, 1, 2, 4, 3, 5).reshape(b, c * gh * gw, h, w)


def laplacian5(gray: Tensor) -> Tensor:
    """The normalised 5x5 Laplacian (all ones, -24 at the centre, divided by 48) with reflected
    borders: Tensor[B, 1, H, W] -> Tensor[B, 1, H, W] (the gradient target of the training branch)."""
    k = torch.ones(1, 1, 5, 5, dtype=gray.dtype, device=gray.device)
    k[0, 0, 2, 2] = -24.0
    return F.conv2d(F.pad(gray, (2, 2, 2, 2), mode="reflect"), k / 48.0)


class ConvBlock(nn.Module):
    """``conv_out(conv1(x))`` (3x3, 3x3; BiRefNet's ``SimpleConvs``) on the image patches."""

    def __init__(self, cin: int, cout: int, inter: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, inter, 3, 1, 1)
        self.conv_out = nn.Conv2d(inter, cout, 3, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv_out(self.conv1(x))


class DeformBranch(nn.Module):
    """Deformable conv -> BN -> ReLU (``_ASPPModuleDeformable``)."""

    def __init__(self, cin: int, cout: int, k: int) -> None:
        super().__init__()
        self.atrous_conv = DeformableConv2d(cin, cout, kernel_size=k, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.relu(self.bn(self.atrous_conv(x)))


class ASPPDeformable(nn.Module):
    """1x1 deformable, deformable k = 1, 3, 7 and image pooling, concatenated -> 1x1 conv, BN, ReLU, dropout."""

    def __init__(self, c: int, width: int, kernels: tuple[int, ...] = (1, 3, 7)) -> None:
        super().__init__()
        self.aspp1 = DeformBranch(c, width, 1)
        self.aspp_deforms = nn.ModuleList(DeformBranch(c, width, k) for k in kernels)
        self.global_avg_pool = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Conv2d(c, width, 1, bias=False),
                                             nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.conv1 = nn.Conv2d(width * (2 + len(kernels)), c, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x: Tensor) -> Tensor:
        x1 = self.aspp1(x)
        pooled = self.global_avg_pool(x).expand(-1, -1, *x1.shape[2:])  # the 1x1 map, upsampled (a broadcast)
        y = torch.cat([x1, *(m(x) for m in self.aspp_deforms), pooled], dim=1)
        return self.dropout(self.relu(self.bn1(self.conv1(y))))


class DecBlock(nn.Module):
    """conv 3x3 -> BN -> ReLU -> ASPP-deformable -> conv 3x3 -> BN (``BasicDecBlk``)."""

    def __init__(self, cin: int, cout: int, spec: BiRefNetSpec) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(cin, spec.inter, 3, 1, 1)
        self.bn_in = nn.BatchNorm2d(spec.inter)
        self.relu_in = nn.ReLU(inplace=True)
        self.dec_att = ASPPDeformable(spec.inter, spec.aspp)
        self.conv_out = nn.Conv2d(spec.inter, cout, 3, 1, 1)
        self.bn_out = nn.BatchNorm2d(cout)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn_out(self.conv_out(self.dec_att(self.relu_in(self.bn_in(self.conv_in(x))))))


class BiRefNetDecoder(nn.Module):
    """(standardised image, x1, x2, x3, x4) -> the matte logits (eval) or the training triple (module docstring).

    ``ch``: the encoder's level channels, coarsest first (``[c4, c3, c2, c1]``, c4 without the context)."""

    def __init__(self, ch: list[int], spec: BiRefNetSpec) -> None:
        super().__init__()
        ipt_out = [c // 8 for c in ch]  # the patch branches' widths
        ipt_in = [3 * 4**k for k in (5, 4, 3, 2, 0)]  # 3 channels x (stride / 1)**2 patches: strides 32, 16, 8, 4, 1
        self.ipt_blk5 = ConvBlock(ipt_in[0], ipt_out[0], spec.ipt)
        self.ipt_blk4 = ConvBlock(ipt_in[1], ipt_out[0], spec.ipt)
        self.ipt_blk3 = ConvBlock(ipt_in[2], ipt_out[1], spec.ipt)
        self.ipt_blk2 = ConvBlock(ipt_in[3], ipt_out[2], spec.ipt)
        self.ipt_blk1 = ConvBlock(ipt_in[4], ipt_out[3], spec.ipt)
        out = [*ch[1:], ch[-1] // 2]
        cin = [c + ipt_out[max(0, i - 1)] for i, c in enumerate(ch)]
        self.decoder_block4 = DecBlock(cin[0], out[0], spec)
        self.decoder_block3 = DecBlock(cin[1], out[1], spec)
        self.decoder_block2 = DecBlock(cin[2], out[2], spec)
        self.decoder_block1 = DecBlock(cin[3], out[3], spec)
        self.conv_out1 = nn.Sequential(nn.Conv2d(out[3] + ipt_out[3], 1, 1, 1, 0))
        self.lateral_block4 = _Lateral(ch[1], out[0])
        self.lateral_block3 = _Lateral(ch[2], out[1])
        self.lateral_block2 = _Lateral(ch[3], out[2])
        for k in (4, 3, 2):  # multi-scale supervision and the gradient branch of the three coarse outputs
            c = out[4 - k]
            self.add_module(f"conv_ms_spvn_{k}", nn.Conv2d(c, 1, 1, 1, 0))
            self.add_module(f"gdt_convs_{k}", nn.Sequential(nn.Conv2d(c, spec.gdt, 3, 1, 1), nn.BatchNorm2d(spec.gdt),
                                                            nn.ReLU(inplace=True)))
            self.add_module(f"gdt_convs_pred_{k}", nn.Sequential(nn.Conv2d(spec.gdt, 1, 1, 1, 0)))
            self.add_module(f"gdt_convs_attn_{k}", nn.Sequential(nn.Conv2d(spec.gdt, 1, 1, 1, 0)))

    def _gate(self, k: int, p: Tensor, aux: dict[str, list[Tensor]] | None, gdt_gt: Tensor | None) -> Tensor:
        g = getattr(self, f"gdt_convs_{k}")(p)
        if aux is not None:  # training: the level's matte, the gradient prediction and its target
            m = getattr(self, f"conv_ms_spvn_{k}")(p)
            aux["maps"].append(m)
            aux["gdt_preds"].append(getattr(self, f"gdt_convs_pred_{k}")(g))
            aux["gdt_labels"].append(gdt_gt * _resize(m, gdt_gt.shape[2:]))
        return p * getattr(self, f"gdt_convs_attn_{k}")(g).sigmoid()

    def forward(self, feats: tuple[Tensor, ...]) -> Tensor | tuple[list[Tensor], list[Tensor], list[Tensor]]:
        x, x1, x2, x3, x4 = feats
        aux: dict[str, list[Tensor]] | None = None
        gdt_gt = None
        if self.training:
            aux = {"maps": [], "gdt_preds": [], "gdt_labels": []}
            gdt_gt = laplacian5(x.mean(dim=1, keepdim=True))
        x4 = torch.cat([x4, self.ipt_blk5(patches(x, x4))], dim=1)
        p4 = self._gate(4, self.decoder_block4(x4), aux, gdt_gt)
        p3 = _resize(p4, x3.shape[2:]) + self.lateral_block4(x3)
        p3 = torch.cat([p3, self.ipt_blk4(patches(x, p3))], dim=1)
        p3 = self._gate(3, self.decoder_block3(p3), aux, gdt_gt)
        p2 = _resize(p3, x2.shape[2:]) + self.lateral_block3(x2)
        p2 = torch.cat([p2, self.ipt_blk3(patches(x, p2))], dim=1)
        p2 = self._gate(2, self.decoder_block2(p2), aux, gdt_gt)
        p1 = _resize(p2, x1.shape[2:]) + self.lateral_block2(x1)
        p1 = torch.cat([p1, self.ipt_blk2(patches(x, p1))], dim=1)
        p1 = _resize(self.decoder_block1(p1), x.shape[2:])
        out = self.conv_out1(torch.cat([p1, self.ipt_blk1(x)], dim=1))  # (B, 1, H, W) logits
        if aux is None:
            return out
        return [*aux["maps"], out], aux["gdt_preds"], aux["gdt_labels"]


class _Lateral(nn.Module):
    """A 1x1 convolution (``BasicLatBlk``)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1, 1, 0)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class BiRefNetNet(nn.Module):
    """:meth:`encode` (the captured stage) then :meth:`decode` (the eager stage); ``forward`` chains them.

    Example:
        >>> net = build_birefnet(size="tiny").eval()
        >>> tuple(net(torch.rand(1, 3, 64, 64)).shape)
        (1, 1, 64, 64)
    """

    def __init__(self, spec: BiRefNetSpec, *, fused_attn: bool = False) -> None:
        super().__init__()
        self.spec = spec
        self.encoder = BiRefNetEncoder(spec, fused_attn=fused_attn)
        ch = [2 * c for c in reversed(self.encoder.bb.channels)]  # multi-scale input: channels doubled
        self.squeeze_module = nn.Sequential(DecBlock(ch[0] + sum(ch[1:]), ch[0], spec))
        self.decoder = BiRefNetDecoder(ch, spec)
        self.stride = 32

    def encode(self, x: Tensor) -> tuple[Tensor, ...]:
        """[0, 1] RGB Tensor[B, 3, H, W] -> (standardised image, x1, x2, x3, x4 with the context)."""
        return self.encoder(x)

    def decode(self, feats: tuple[Tensor, ...]) -> Tensor | tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """The encoder's tuple -> logits Tensor[B, 1, H, W] (eval) or the training triple."""
        x, x1, x2, x3, x4 = feats
        return self.decoder((x, x1, x2, x3, self.squeeze_module(x4)))

    def forward(self, x: Tensor) -> Tensor | tuple[list[Tensor], list[Tensor], list[Tensor]]:
        return self.decode(self.encode(x))


def build_birefnet(*, size: str, fused_attn: bool = False) -> BiRefNetNet:
    return BiRefNetNet(SPECS[size], fused_attn=fused_attn)
