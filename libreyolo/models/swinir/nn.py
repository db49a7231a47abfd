"""SwinIR (Liang et al., 2021), the lightweight super-resolution network: sizes light_x2, light_x4.

=========  =====  ==========  ==========  ======  =========  ===================================
size       scale  width       depths      heads   window     params (paper, no bias tables)
=========  =====  ==========  ==========  ======  =========  ===================================
light_x2   2      60          6, 6, 6, 6  6 x 4   8          910,152 (877,752: 878 K)
light_x4   4      60          6, 6, 6, 6  6 x 4   8          929,628 (897,228: 897 K)
=========  =====  ==========  ==========  ======  =========  ===================================

Tensor[B, 3, H, W] RGB in [0, 1], any H and W -> Tensor[B, 3, sH, sW] (not clamped):

1. the image is padded at the bottom/right up to a multiple of the window (8) by reflection
   (replication for a side of at most 4 px, where reflection is undefined), and the DIV2K RGB mean
   is subtracted (``img_range`` 1);
2. shallow features: a 3x3 conv to 60 channels, ``F``;
3. deep features: tokens (B, H, W, 60) through LayerNorm, then four residual Swin Transformer
   blocks (:class:`RSTB`: six :class:`~libreyolo.layers.window_attention.SwinBlock` s, MLP ratio 2,
   odd blocks shifted by 4 and masked, then a 3x3 conv, plus the RSTB's input), a final LayerNorm
   and a 3x3 conv, plus ``F``;
4. "pixelshuffledirect" upsampling: one 3x3 conv to ``3 s^2`` channels and a pixel shuffle; the
   mean is added back and the padding cropped away.

Every block of the reference shifts its odd blocks (it fixes the shift at construction for its
64 px training patches), whatever the input size; so does this network: the shift mask is built
each forward for the padded grid of the actual input (:func:`~libreyolo.layers.window_attention.window_mask`).
Sizes are read from the tensor shapes without ``int()``, so an ONNX export keeps H and W dynamic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.init import trunc_normal_linears
from ...layers.window_attention import LN_EPS, SwinBlock, window_mask

RGB_MEAN = (0.4488, 0.4371, 0.4040)  # the DIV2K mean the reference subtracts


@dataclass(frozen=True)
class SwinIRSpec:
    """One size: ``scale`` (output / input size), token width ``dim``, Swin blocks per RSTB
    ``depths``, heads per RSTB ``heads``, ``window`` (tokens per side), MLP ``mlp_ratio``,
    ``img_range`` (the reference's input multiplier) and the stochastic-depth rate of the last
    block (linear from 0 over all blocks, 0.1 as the reference)."""

    scale: int
    dim: int = 60
    depths: tuple[int, ...] = (6, 6, 6, 6)
    heads: tuple[int, ...] = (6, 6, 6, 6)
    window: int = 8
    mlp_ratio: float = 2.0
    img_range: float = 1.0
    drop_path: float = 0.1


SPECS: dict[str, SwinIRSpec] = {
    "light_x2": SwinIRSpec(scale=2),
    "light_x4": SwinIRSpec(scale=4),
}


class RSTB(nn.Module):
    """Residual Swin Transformer block: ``x + conv3x3(blocks(x))`` on (B, h, w, C) tokens, h and w
    multiples of the window; odd blocks shift by half a window and use ``mask``."""

    def __init__(self, dim: int, depth: int, heads: int, window: int, mlp_ratio: float, *,
                 drop_paths: list[float], fused_attn: bool) -> None:
        super().__init__()
        if len(drop_paths) != depth:
            raise ConfigError(f"RSTB of depth {depth} got {len(drop_paths)} drop-path rates")
        self.shift = window // 2
        self.blocks = nn.ModuleList(SwinBlock(dim, heads, window, mlp_ratio, drop_path=r, fused_attn=fused_attn)
                                    for r in drop_paths)
        self.conv = nn.Conv2d(dim, dim, 3, padding=1)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        y = x
        for i, block in enumerate(self.blocks):
            s = (self.shift, self.shift) if i % 2 else (0, 0)
            y = block(y, padded=None, shift=s, mask=mask if i % 2 else None)
        return x + self.conv(y.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


def pad_to_window(x: Tensor, window: int) -> Tensor:
    """Tensor[B, C, H, W] -> padded at the bottom/right to multiples of ``window``: by reflection
    (the reference's mode), by replication where a side is at most ``window // 2`` (reflection needs
    the pad shorter than the side; decided eagerly, a traced export keeps reflection).

    Example:
        >>> pad_to_window(torch.rand(1, 3, 9, 3), 8).shape
        torch.Size([1, 3, 16, 8])
    """
    h, w = x.shape[-2], x.shape[-1]
    ph, pw = (window - h % window) % window, (window - w % window) % window
    mode = "reflect"
    if not torch.jit.is_tracing() and min(int(h), int(w)) <= window // 2:
        mode = "replicate"
    return F.pad(x, (0, pw, 0, ph), mode=mode)


class SwinIR(nn.Module):
    """The lightweight SwinIR super-resolution network (module docstring).

    Example:
        >>> net = SwinIR(SwinIRSpec(scale=2, dim=12, depths=(2,), heads=(2,), window=4)).eval()
        >>> tuple(net(torch.rand(1, 3, 10, 7)).shape)
        (1, 3, 20, 14)
    """

    multiple = 1

    def __init__(self, spec: SwinIRSpec, *, fused_attn: bool = False) -> None:
        super().__init__()
        if len(spec.depths) != len(spec.heads):
            raise ConfigError(f"SwinIR depths {spec.depths} and heads {spec.heads} need one entry per RSTB")
        self.spec, self.scale, self.window = spec, spec.scale, spec.window
        self.register_buffer("mean", torch.tensor(RGB_MEAN).view(1, 3, 1, 1), persistent=False)
        d = spec.dim
        self.stem = nn.Conv2d(3, d, 3, padding=1)
        self.embed_norm = nn.LayerNorm(d, eps=LN_EPS)
        total = sum(spec.depths)
        rates = [spec.drop_path * i / max(total - 1, 1) for i in range(total)]  # linear from 0
        layers, first = [], 0
        for depth, heads in zip(spec.depths, spec.heads, strict=True):
            layers.append(RSTB(d, depth, heads, spec.window, spec.mlp_ratio, drop_paths=rates[first:first + depth],
                               fused_attn=fused_attn))
            first += depth
        self.layers = nn.ModuleList(layers)
        self.norm = nn.LayerNorm(d, eps=LN_EPS)
        self.body_conv = nn.Conv2d(d, d, 3, padding=1)
        self.upsample = nn.Conv2d(d, 3 * spec.scale**2, 3, padding=1)  # then a pixel shuffle
        self._init_weights()

    def _init_weights(self) -> None:
        # as the reference: truncated normal (std 0.02) linear weights, zero biases, LayerNorm 1 / 0;
        # the convolutions keep PyTorch's default
        trunc_normal_linears(self, layernorm=True)

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2], x.shape[-1]
        r = self.spec.img_range
        x = (pad_to_window(x, self.window) - self.mean) * r
        feat = self.stem(x)  # (B, D, Hp, Wp)
        t = self.embed_norm(feat.permute(0, 2, 3, 1))  # (B, Hp, Wp, D)
        s = self.window // 2
        mask = window_mask((t.shape[1], t.shape[2]), None, self.window, (s, s), device=t.device, dtype=t.dtype)
        for layer in self.layers:
            t = layer(t, mask)
        feat = self.body_conv(self.norm(t).permute(0, 3, 1, 2)) + feat
        y = F.pixel_shuffle(self.upsample(feat), self.scale) / r + self.mean  # (B, 3, s*Hp, s*Wp)
        return y[:, :, :h * self.scale, :w * self.scale]


def build_swinir(*, size: str, fused_attn: bool = False) -> SwinIR:
    """The SwinIR of ``size`` (:data:`SPECS`).

    Example:
        >>> build_swinir(size="light_x2")(torch.rand(1, 3, 12, 9)).shape
        torch.Size([1, 3, 24, 18])
    """
    if size not in SPECS:
        raise ConfigError(f"swinir has no size {size!r}; sizes: {', '.join(SPECS)}")
    return SwinIR(SPECS[size], fused_attn=fused_attn)
