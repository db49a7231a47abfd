"""The Vision Transformer (Dosovitskiy et al., 2021) as a classification body, with the options
the DINOv2 backbone (Oquab et al., 2024) adds: LayerScale and a class-token + patch-mean head.

Tensor[B, 3, H, W] (standardised) -> logits Tensor[B, nc]:

1. patch embedding: a ``patch x patch`` convolution with stride ``patch`` -> (B, D, H/p, W/p),
   flattened to (B, N, D) tokens, N = (H/p) * (W/p);
2. a learned class token is prepended and a learned position embedding (1, 1 + N0, D) is added,
   its grid part resampled bicubically when the input grid differs from the trained one
   (:func:`resample_pos_embed`);
3. ``depth`` pre-norm blocks: ``x + attn(norm1(x))``, ``x + mlp(norm2(x))`` (LayerNorm eps 1e-6,
   MLP ``D -> ratio*D -> D`` with exact GELU), stochastic depth on both residual branches in
   training; with ``ViTSpec.layer_scale`` each branch is first scaled per channel by a learned
   vector (:class:`LayerScale`, initialised to that value);
4. final LayerNorm, then the head's input: the class token's features (``pool="token"``) or the
   class token concatenated with the mean of the patch tokens (``pool="token_mean"``, 2D wide, the
   DINOv2 linear-evaluation layout), and a linear head.

Attention is :class:`libreyolo.layers.attention.Attention`, so the fused-attention policy (SPEC
K-9) governs it: with ``fused_attn`` on, eager and ``torch.compile`` run SDPA, while CUDA-graph
capture, ``torch.jit.trace`` and export run the explicit equation. The forward has no
data-dependent control flow (only the static input shape decides whether the position
embedding is resampled).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import StochasticDepth

from ...errors import ConfigError
from ...layers.attention import Attention
from ...layers.classify import ImageClassifier
from ...layers.init import trunc_normal_linears
from ...layers.mlp import Mlp

LN_EPS = 1e-6
POOLS = {"token": 1, "token_mean": 2}  # head input: the class token / the class token + the patch-token mean


@dataclass(frozen=True)
class ViTSpec:
    """One size: width ``dim``, ``depth`` blocks, ``heads``, MLP ``mlp_ratio``, ``patch`` px,
    trained ``img_size`` (the position-embedding grid is ``img_size // patch`` square), the
    stochastic-depth rate of the last block (linear from 0 over depth), ``layer_scale`` (0: none,
    else the initial value of the per-channel branch scales) and ``pool`` (``"token"``: the class
    token into the head; ``"token_mean"``: the class token and the patch-token mean, concatenated)
    and ``registers``, the number of register tokens (Darcet et al., 2024: learned tokens after
    the class token, without a position embedding, left out of the head's input; 0: none);
    ``pos_antialias``: resample the position embedding with antialiasing (:func:`resample_pos_embed`)."""

    dim: int
    depth: int
    heads: int
    mlp_ratio: float = 4.0
    patch: int = 16
    img_size: int = 224
    drop_path: float = 0.1
    layer_scale: float = 0.0
    pool: str = "token"
    registers: int = 0
    pos_antialias: bool = False


@functools.lru_cache(maxsize=64)
def aa_bicubic_weights(n_in: int, n_out: int) -> tuple[tuple[float, ...], ...]:
    """The (n_out, n_in) matrix of a 1-D antialiased bicubic resize (``F.interpolate(...,
    mode="bicubic", antialias=True, align_corners=False)`` by size): output ``i`` is centred at
    ``s * (i + 0.5)`` in input pixels (``s = n_in / n_out``), its cubic kernel (Keys, a = -0.5)
    stretched by ``s`` when shrinking, the weights normalised to sum 1. Plain Python numbers, so
    a trace or an ONNX export records the product with it as constants (the antialiased resize
    itself has no ONNX operator). A 2-D resize is this matrix applied to rows, then to columns.

    Example:
        >>> [round(w, 4) for w in aa_bicubic_weights(4, 2)[0]]
        [0.4587, 0.4587, 0.1198, -0.0372]
    """
    def cubic(x: float) -> float:
        a, x = -0.5, abs(x)
        if x < 1.0:
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        return (((x - 5.0) * x + 8.0) * x - 4.0) * a if x < 2.0 else 0.0

    s = n_in / n_out
    support = 2.0 * s if s >= 1.0 else 2.0
    inv = 1.0 / s if s >= 1.0 else 1.0
    rows = []
    for i in range(n_out):
        center = s * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        w = [cubic((j - center + 0.5) * inv) for j in range(lo, hi)]
        total = sum(w)
        row = [0.0] * n_in
        for j, v in zip(range(lo, hi), w, strict=True):
            row[j] = v / total if total else v
        rows.append(tuple(row))
    return tuple(rows)


def resample_pos_embed(pos: Tensor, grid: tuple[int, int], *, trained: tuple[int, int], prefix: int = 1,
                       offset: float = 0.0, antialias: bool = False) -> Tensor:
    """Position embedding ``pos`` (1, prefix + th*tw, D), trained on the token grid ``trained`` =
    (th, tw), for the token grid ``grid`` = (gh, gw).

    The first ``prefix`` rows (the class token's) are kept; the grid part is resampled with
    bicubic interpolation (``align_corners=False``, no antialiasing, so that ONNX keeps a plain
    ``Resize``). For the trained grid ``pos`` itself is returned. Grids are static Python ints
    (the shape of the traced or captured input), never tensors. With ``offset`` > 0 the resampling
    is given as the scale factors ``(g + offset) / t`` instead of the output size (the DINOv2
    reference's form, whose source coordinates follow those factors; Depth Anything 3 uses 0.1).
    ``antialias`` filters before shrinking the grid (the DINOv2-with-registers reference resamples
    so; it changes nothing when the grid grows), by size only: it runs as two products with
    :func:`aa_bicubic_weights` matrices, which export as ``MatMul`` with constants.

    Example:
        >>> pos = torch.zeros(1, 1 + 14 * 14, 8)
        >>> tuple(resample_pos_embed(pos, (4, 6), trained=(14, 14)).shape)
        (1, 25, 8)
    """
    th, tw = trained
    if tuple(grid) == (th, tw):
        return pos
    head, body = pos[:, :prefix], pos[:, prefix:]
    d = body.shape[-1]
    body = body.reshape(1, th, tw, d).permute(0, 3, 1, 2).float()
    if antialias:
        if offset > 0:
            raise ConfigError("resample_pos_embed: antialias resamples by size; it takes no offset")
        rows = torch.tensor(aa_bicubic_weights(th, grid[0]), dtype=body.dtype, device=body.device)
        cols = torch.tensor(aa_bicubic_weights(tw, grid[1]), dtype=body.dtype, device=body.device)
        body = rows @ body @ cols.T  # (gh, th) @ (1, D, th, tw) @ (tw, gw)
    elif offset > 0:
        scale = ((grid[0] + offset) / th, (grid[1] + offset) / tw)
        body = F.interpolate(body, scale_factor=scale, mode="bicubic", align_corners=False)
    else:
        body = F.interpolate(body, size=tuple(grid), mode="bicubic", align_corners=False)
    body = body.permute(0, 2, 3, 1).reshape(1, grid[0] * grid[1], d).to(pos.dtype)
    return torch.cat([head, body], dim=1)


class PatchEmbed(nn.Module):
    """``patch x patch`` strided convolution: (B, 3, H, W) -> tokens (B, N, D) and the grid (gh, gw)."""

    def __init__(self, dim: int, patch: int, *, bias: bool = True) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=patch, stride=patch, bias=bias)

    def forward(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        y = self.proj(x)  # (B, D, gh, gw)
        grid = (int(y.shape[-2]), int(y.shape[-1]))
        return y.flatten(2).transpose(1, 2), grid


class LayerScale(nn.Module):
    """``x * gamma``: a learned per-channel scale (Touvron et al., 2021, CaiT) of a residual branch,
    (B, N, D) -> (B, N, D), ``gamma`` (D,) initialised to ``init``."""

    def __init__(self, dim: int, init: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class Block(nn.Module):
    """Pre-norm transformer block: ``x + dp(ls1(attn(norm1(x))))`` then ``x + dp(ls2(mlp(norm2(x))))``;
    ``ls1``/``ls2`` are :class:`LayerScale` when ``layer_scale`` > 0, else identities (no tensors).
    ``ln_eps`` and the MLP activation ``act`` (default exact GELU) are the towers' knobs (CLIP: 1e-5
    and QuickGELU; SigLIP: tanh GELU). ``qk_norm`` and the ``rope`` and ``attn_bias`` of ``forward`` are the attention's options
    (:class:`~libreyolo.layers.attention.Attention`; Depth Anything 3's later blocks use the first two,
    CLIP's text tower the additive causal mask)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, *, drop_path: float, fused_attn: bool,
                 layer_scale: float = 0.0, ln_eps: float = LN_EPS, act: nn.Module | None = None,
                 qk_norm: bool = False) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=ln_eps)
        self.attn = Attention(dim, num_heads=heads, qkv_bias=True, fused_attn=fused_attn, qk_norm=qk_norm)
        self.ls1 = LayerScale(dim, layer_scale) if layer_scale > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=ln_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act)
        self.ls2 = LayerScale(dim, layer_scale) if layer_scale > 0 else nn.Identity()
        self.drop_path = StochasticDepth(drop_path, "row") if drop_path > 0 else nn.Identity()

    def forward(self, x: Tensor, rope: Callable[[Tensor], Tensor] | None = None,
                attn_bias: Tensor | None = None) -> Tensor:
        x = x + self.drop_path(self.ls1(self.attn(self.norm1(x), attn_bias=attn_bias, rope=rope)))
        return x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))


class VisionTransformer(nn.Module):
    """The ViT classification body (module docstring); input already standardised.

    Example:
        >>> net = VisionTransformer(ViTSpec(dim=64, depth=2, heads=4, img_size=32), nc=5)
        >>> tuple(net(torch.rand(2, 3, 48, 32)).shape)
        (2, 5)
    """

    NO_WEIGHT_DECAY = ("cls_token", "pos_embed", "reg_token")  # exempt from weight decay (training.optim.param_groups)

    def __init__(self, spec: ViTSpec, *, nc: int, fused_attn: bool = True) -> None:
        super().__init__()
        if spec.img_size % spec.patch:
            raise ConfigError(f"ViT img_size={spec.img_size} is not a multiple of patch={spec.patch}")
        if spec.pool not in POOLS:
            raise ConfigError(f"ViT pool={spec.pool!r} is unknown; use one of {', '.join(POOLS)}")
        self.spec = spec
        g = spec.img_size // spec.patch
        self.grid = (g, g)  # the token grid the position embedding is trained on
        self.patch_embed = PatchEmbed(spec.dim, spec.patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, spec.dim))
        if spec.registers:
            self.reg_token = nn.Parameter(torch.zeros(1, spec.registers, spec.dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + g * g, spec.dim))
        rates = [spec.drop_path * i / max(spec.depth - 1, 1) for i in range(spec.depth)]  # linear from 0
        self.blocks = nn.Sequential(*(Block(spec.dim, spec.heads, spec.mlp_ratio, drop_path=r, fused_attn=fused_attn,
                                            layer_scale=spec.layer_scale) for r in rates))
        self.norm = nn.LayerNorm(spec.dim, eps=LN_EPS)
        self.head = nn.Linear(spec.dim * POOLS[spec.pool], nc)
        self._init_weights()

    def _init_weights(self) -> None:
        # truncated normal (std 0.02) for the embeddings and linear weights, zero biases, the
        # usual ViT initialisation; a 1e-6 class token as in the DeiT recipe
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        if self.spec.registers:
            nn.init.normal_(self.reg_token, std=1e-6)
        trunc_normal_linears(self)

    def tokens(self, x: Tensor) -> Tensor:
        """Standardised images -> (B, 1 + R + N, D) tokens after the final norm: the class token,
        the R = ``spec.registers`` register tokens, the N patch tokens."""
        t, grid = self.patch_embed(x)
        cls = self.cls_token.expand(t.shape[0], -1, -1)
        t = torch.cat([cls, t], dim=1) + resample_pos_embed(self.pos_embed, grid, trained=self.grid,
                                                            antialias=self.spec.pos_antialias)
        if self.spec.registers:  # after the position embedding: registers have none
            t = torch.cat([t[:, :1], self.reg_token.expand(t.shape[0], -1, -1), t[:, 1:]], dim=1)
        return self.norm(self.blocks(t))

    def features(self, x: Tensor) -> Tensor:
        """Standardised images -> the head's input (B, D) or (B, 2D) (``spec.pool``)."""
        t = self.tokens(x)
        if self.spec.pool == "token":
            return t[:, 0]
        return torch.cat([t[:, 0], t[:, 1 + self.spec.registers:].mean(dim=1)], dim=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


def build_vit_classifier(spec: ViTSpec, *, nc: int, fused_attn: bool = True) -> ImageClassifier:
    """[0, 1] RGB -> logits: ImageNet standardisation in front of :class:`VisionTransformer`.

    Example:
        >>> net = build_vit_classifier(ViTSpec(dim=32, depth=1, heads=2, img_size=32), nc=3)
        >>> tuple(net(torch.rand(1, 3, 32, 32)).shape)
        (1, 3)
    """
    return ImageClassifier(VisionTransformer(spec, nc=nc, fused_attn=fused_attn))
