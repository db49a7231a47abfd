"""Swin Transformer (Liu et al., 2021) as a classification body: sizes t (Swin-T), s (Swin-S).

=====  =====  ==============  ===============  ======  =====  ==============================
size   width  depths          heads            window  patch  params @1000 (published)
=====  =====  ==============  ===============  ======  =====  ==============================
t      96     2, 2, 6, 2      3, 6, 12, 24     7       4      28.29 M (28.3 M)
s      96     2, 2, 18, 2     3, 6, 12, 24     7       4      49.61 M (49.6 M)
=====  =====  ==============  ===============  ======  =====  ==============================

Tensor[B, 3, H, W] (standardised; H and W multiples of 32) -> logits Tensor[B, nc]. Tokens stay
channels-last, (B, h, w, C), through the whole body:

1. patch embedding: a 4x4 convolution with stride 4, then LayerNorm -> (B, H/4, W/4, C);
2. four stages; stage i > 0 starts with patch merging (each 2x2 group of tokens concatenated to
   4C channels, LayerNorm, a bias-free linear map to 2C), then ``depth`` pre-norm blocks of
   window attention and MLP. Odd blocks shift the windows by half a window (cyclic roll) and mask
   attention between tokens that were not neighbours before the roll;
3. final LayerNorm, mean over all tokens, a linear head.

Window attention is :class:`libreyolo.layers.attention.Attention` with a learned relative-position
bias table (:class:`RelativePositionBias`, through the layer's ``rel_pos_bias`` hook) and the shift
mask passed as ``attn_bias``; so the fused-attention policy (SPEC K-9) governs it, with
``fused_attn`` off by default. The block, the bias and the mask live in
:mod:`libreyolo.layers.window_attention` (SwinIR uses them too).

Input sizes: H and W must be multiples of 32 (the patch and three 2x merges), else a ConfigError.
A stage whose token grid is not a multiple of the window (7) is padded at the bottom/right up to
one, and the padded tokens are masked out as keys; a stage whose grid is no larger than the window
along an axis is not shifted along it (one window covers it). At 224 px (grids 56, 28, 14, 7) no
stage pads and the last one does not shift, which is timm's ``swin_*_window7_224`` exactly.
All of this is decided from static shapes: the forward has no data-dependent control flow.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.classify import ImageClassifier
from ...layers.init import trunc_normal_linears
from ...layers.window_attention import (  # noqa: F401 - re-exported: the blocks Swin is made of
    LN_EPS,
    MASK,
    PatchEmbed,
    PatchMerging,
    RelativePositionBias,
    SwinBlock,
    partition,
    relative_position_index,
    unpartition,
    window_mask,
)

STRIDE = 32


@dataclass(frozen=True)
class SwinSpec:
    """One size: patch-embedding width ``dim`` (doubled at each stage), blocks per stage
    ``depths``, heads per stage ``heads``, ``window`` (tokens per side), MLP ``mlp_ratio``, ``patch``
    px, and the stochastic-depth rate of the last block (linear from 0 over all blocks)."""

    dim: int = 96
    depths: tuple[int, ...] = (2, 2, 6, 2)
    heads: tuple[int, ...] = (3, 6, 12, 24)
    window: int = 7
    mlp_ratio: float = 4.0
    patch: int = 4
    drop_path: float = 0.2


SPECS: dict[str, SwinSpec] = {
    "t": SwinSpec(depths=(2, 2, 6, 2), drop_path=0.2),
    "s": SwinSpec(depths=(2, 2, 18, 2), drop_path=0.3),
}


class SwinStage(nn.Module):
    """Optional patch merging, then blocks alternating plain and shifted windows. The padding, shift
    and masks are worked out once per forward from the token grid (module docstring)."""

    def __init__(self, dim: int, depth: int, heads: int, window: int, mlp_ratio: float, *, merge: bool,
                 drop_paths: list[float], fused_attn: bool) -> None:
        super().__init__()
        self.window = window
        self.downsample = PatchMerging(dim // 2) if merge else nn.Identity()
        self.blocks = nn.ModuleList(SwinBlock(dim, heads, window, mlp_ratio, drop_path=r, fused_attn=fused_attn)
                                    for r in drop_paths)

    def forward(self, x: Tensor) -> Tensor:
        x = self.downsample(x)
        grid = (int(x.shape[1]), int(x.shape[2]))
        w = self.window
        padded = (-(-grid[0] // w) * w, -(-grid[1] // w) * w)
        shift = tuple(w // 2 if g > w else 0 for g in grid)
        kw = {"device": x.device, "dtype": x.dtype}
        masks = (window_mask(grid, padded, w, (0, 0), **kw), window_mask(grid, padded, w, shift, **kw))
        for i, block in enumerate(self.blocks):
            s = shift if i % 2 else (0, 0)
            x = block(x, padded=padded, shift=s, mask=masks[i % 2])
        return x


class SwinTransformer(nn.Module):
    """The Swin classification body (module docstring); input already standardised.

    Example:
        >>> spec = SwinSpec(dim=16, depths=(2, 2, 2, 2), heads=(1, 2, 4, 8))
        >>> net = SwinTransformer(spec, nc=5).eval()
        >>> tuple(net(torch.rand(2, 3, 64, 96)).shape)
        (2, 5)
    """

    def __init__(self, spec: SwinSpec, *, nc: int, fused_attn: bool = False) -> None:
        super().__init__()
        if len(spec.depths) != len(spec.heads):
            raise ConfigError(f"Swin depths {spec.depths} and heads {spec.heads} need one entry per stage")
        self.spec = spec
        self.stride = spec.patch * 2 ** (len(spec.depths) - 1)
        self.patch_embed = PatchEmbed(spec.dim, spec.patch)
        total = sum(spec.depths)
        rates = [spec.drop_path * i / max(total - 1, 1) for i in range(total)]  # linear from 0
        stages, first = [], 0
        for i, (depth, heads) in enumerate(zip(spec.depths, spec.heads, strict=True)):
            stages.append(SwinStage(spec.dim * 2**i, depth, heads, spec.window, spec.mlp_ratio, merge=i > 0,
                                    drop_paths=rates[first:first + depth], fused_attn=fused_attn))
            first += depth
        self.layers = nn.Sequential(*stages)
        self.width = spec.dim * 2 ** (len(spec.depths) - 1)
        self.norm = nn.LayerNorm(self.width, eps=LN_EPS)
        self.head = nn.Linear(self.width, nc)
        self._init_weights()

    def _init_weights(self) -> None:
        # truncated normal (std 0.02) linear weights, zero biases; converted weights replace them
        trunc_normal_linears(self)

    def check_input(self, x: Tensor) -> None:
        """Raise a one-line ConfigError unless H and W are multiples of the stride (32)."""
        h, w = int(x.shape[-2]), int(x.shape[-1])
        if h % self.stride or w % self.stride:
            near = [max(self.stride, round(v / self.stride) * self.stride) for v in (h, w)]
            raise ConfigError(f"Swin needs an input height and width that are multiples of {self.stride}, got "
                              f"{h}x{w}; use e.g. {near[0]}x{near[1]} (imgsz a multiple of {self.stride}; 224 is "
                              "the trained size)")

    def stages(self, x: Tensor) -> list[Tensor]:
        """Standardised images -> the four stage outputs (B, H/4/2**i, W/4/2**i, C*2**i), channels
        last, before the final norm (the feature pyramid when Swin serves as a backbone)."""
        self.check_input(x)
        outs, t = [], self.patch_embed(x)
        for stage in self.layers:
            t = stage(t)
            outs.append(t)
        return outs

    def forward(self, x: Tensor) -> Tensor:
        t = self.norm(self.stages(x)[-1])
        return self.head(t.mean(dim=(1, 2)))


def build_swin_classifier(spec: SwinSpec, *, nc: int, fused_attn: bool = False) -> ImageClassifier:
    """[0, 1] RGB -> logits: ImageNet standardisation in front of :class:`SwinTransformer`.

    Example:
        >>> net = build_swin_classifier(SwinSpec(dim=8, depths=(1, 1, 1, 1), heads=(1, 1, 2, 2)), nc=3)
        >>> tuple(net(torch.rand(1, 3, 32, 32)).shape)
        (1, 3)
    """
    return ImageClassifier(SwinTransformer(spec, nc=nc, fused_attn=fused_attn))
