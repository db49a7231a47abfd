"""Contrastive image towers (CLIP, SigLIP) with a zero-shot head over stored class embeddings.

Tensor[B, 3, H, W] (standardised with the tower's own statistics) -> logits Tensor[B, nc]:

1. patch embedding (``patch x patch`` strided convolution; CLIP's has no bias) -> (B, N, D);
2. ``pool="cls"`` (CLIP): a learned class token is prepended; a learned position embedding is
   added (its grid part resampled bicubically for other input sizes, as in :mod:`.net`);
3. ``pre_norm`` (CLIP's ``ln_pre``): a LayerNorm before the blocks;
4. ``depth`` pre-norm blocks of :mod:`.net` (:class:`~.net.Block`) with the tower's LayerNorm eps
   and MLP activation (CLIP: QuickGELU ``x * sigmoid(1.702 x)``, eps 1e-5; SigLIP: tanh GELU,
   eps 1e-6);
5. the image embedding: CLIP takes the class token, LayerNorms it (``ln_post``) and projects it
   (no bias) to ``embed_dim``; SigLIP LayerNorms every token and pools them with a multi-head
   attention-pooling head (:class:`MAPHead`: one learned probe token attends to the tokens, then
   a residual MLP), width ``dim``, no projection;
6. :class:`ZeroShotHead`: ``scale * normalize(embedding) @ W.T + bias``; the rows of ``W`` are the
   L2-normalised class text embeddings (:meth:`ZeroShotHead.set_embeddings`).

Attention in the blocks is :class:`libreyolo.layers.attention.Attention` and the pooling head
calls the same primitive pair (SDPA or the explicit equation, SPEC K-9), so ``fused_attn``
governs both. No data-dependent control flow.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...kernels.attention import use_sdpa
from ...layers.attention import attention_equation
from ...layers.classify import ImageClassifier
from ...layers.init import trunc_normal_linears
from ...layers.mlp import Mlp
from .net import Block, PatchEmbed, resample_pos_embed

POOLS = ("cls", "map")
ACTS = ("quick_gelu", "gelu_tanh")


@dataclass(frozen=True)
class TowerSpec:
    """One tower: width ``dim``, ``depth`` blocks, ``heads``, MLP ``mlp_ratio``, ``patch`` px, trained
    ``img_size``; ``pool`` ``"cls"`` (class token, ``ln_pre``, ``ln_post`` and a bias-free projection
    to ``embed_dim``) or ``"map"`` (attention pooling, embedding width ``dim``); ``act`` the MLP
    activation, ``ln_eps`` the LayerNorm eps, ``mean``/``std`` the input statistics, and the head's
    default logit ``scale`` and ``bias``."""

    dim: int
    depth: int
    heads: int
    mlp_ratio: float = 4.0
    patch: int = 16
    img_size: int = 224
    pool: str = "cls"
    embed_dim: int = 512
    act: str = "quick_gelu"
    ln_eps: float = 1e-5
    mean: tuple[float, float, float] = (0.48145466, 0.4578275, 0.40821073)
    std: tuple[float, float, float] = (0.26862954, 0.26130258, 0.27577711)
    scale: float = 100.0
    bias: float = 0.0

    @property
    def out_dim(self) -> int:
        """Width of the image embedding."""
        return self.embed_dim if self.pool == "cls" else self.dim


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)``, CLIP's GELU approximation: Tensor[...] -> Tensor[...].

    Example:
        >>> round(float(QuickGELU()(torch.tensor(1.0))), 4)
        0.8458
    """

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(1.702 * x)


def _act(name: str) -> nn.Module:
    return QuickGELU() if name == "quick_gelu" else nn.GELU(approximate="tanh")


class MAPHead(nn.Module):
    """Multi-head attention pooling: tokens (B, N, D) -> one vector (B, D).

    A learned ``probe`` (1, 1, D) is the query; ``q`` projects it, ``kv`` the tokens (keys and
    values stacked), ``proj`` mixes the heads; then ``x + mlp(norm(x))``.

    Example:
        >>> tuple(MAPHead(16, 2, 32, ln_eps=1e-6, act=nn.GELU())(torch.rand(3, 5, 16)).shape)
        (3, 16)
    """

    def __init__(self, dim: int, heads: int, hidden: int, *, ln_eps: float, act: nn.Module,
                 fused_attn: bool = False) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.fused_attn = bool(fused_attn)
        self.probe = nn.Parameter(torch.zeros(1, 1, dim))
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=ln_eps)
        self.mlp = Mlp(dim, hidden, act)

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        q = self.q(self.probe).expand(b, -1, -1).view(b, 1, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        scale = self.head_dim ** -0.5
        if use_sdpa(self.fused_attn):
            o = F.scaled_dot_product_attention(q, k, v, scale=scale)
        else:
            o = attention_equation(q, k, v, scale=scale)
        o = self.proj(o.transpose(1, 2).reshape(b, 1, d))
        o = o + self.mlp(self.norm(o))
        return o[:, 0]


class ZeroShotHead(nn.Module):
    """``scale * normalize(e) @ weight.T + bias``: image embeddings (B, E) -> logits (B, nc).

    ``weight`` (nc, E) is a parameter (fine-tuning trains it); ``scale`` and ``bias`` are scalar
    buffers saved with the weights. A fresh head has random unit rows.

    Example:
        >>> head = ZeroShotHead(4, 2, scale=100.0)
        >>> head.set_embeddings(torch.tensor([[2.0, 0, 0, 0], [0, 3.0, 0, 0]]))
        >>> head(torch.tensor([[5.0, 0, 0, 0]])).tolist()
        [[100.0, 0.0]]
    """

    def __init__(self, dim: int, nc: int, *, scale: float = 100.0, bias: float = 0.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(F.normalize(torch.randn(nc, dim), dim=-1))
        self.register_buffer("scale", torch.tensor(float(scale)))
        self.register_buffer("bias", torch.tensor(float(bias)))

    @torch.no_grad()
    def set_embeddings(self, emb: Tensor, *, scale: float | None = None, bias: float | None = None) -> None:
        """Copy ``emb`` (nc, E), L2-normalised per row, into ``weight``; optionally new scale/bias."""
        if emb.ndim != 2 or tuple(emb.shape) != tuple(self.weight.shape):
            raise ConfigError(f"class embeddings of shape {tuple(emb.shape)} do not fit the head "
                              f"{tuple(self.weight.shape)}; pass a Tensor[nc, {self.weight.shape[1]}]")
        self.weight.copy_(F.normalize(emb.to(self.weight), dim=-1))
        if scale is not None:
            self.scale.fill_(float(scale))
        if bias is not None:
            self.bias.fill_(float(bias))

    def forward(self, e: Tensor) -> Tensor:
        w = self.weight.to(e.dtype)
        return self.scale.to(e.dtype) * (F.normalize(e, dim=-1) @ w.t()) + self.bias.to(e.dtype)


class ImageEncoder(nn.Module):
    """The contrastive image tower, steps 1-5 of the module docstring: standardised images
    (B, 3, H, W) -> image embeddings (B, ``spec.out_dim``), not normalised.

    Example:
        >>> enc = ImageEncoder(TowerSpec(dim=32, depth=1, heads=2, img_size=32, embed_dim=8))
        >>> tuple(enc(torch.rand(2, 3, 48, 32)).shape)
        (2, 8)
    """

    NO_WEIGHT_DECAY = ("cls_token", "pos_embed")  # exempt from weight decay (training.optim.param_groups)

    def __init__(self, spec: TowerSpec, *, fused_attn: bool = False) -> None:
        super().__init__()
        if spec.img_size % spec.patch:
            raise ConfigError(f"tower img_size={spec.img_size} is not a multiple of patch={spec.patch}")
        if spec.pool not in POOLS or spec.act not in ACTS:
            raise ConfigError(f"tower pool={spec.pool!r} / act={spec.act!r} unknown; pools {POOLS}, acts {ACTS}")
        self.spec = spec
        g = spec.img_size // spec.patch
        self.grid = (g, g)
        cls = spec.pool == "cls"
        self.prefix = 1 if cls else 0
        self.patch_embed = PatchEmbed(spec.dim, spec.patch, bias=not cls)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, spec.dim)) if cls else None
        self.pos_embed = nn.Parameter(torch.zeros(1, self.prefix + g * g, spec.dim))
        self.norm_pre = nn.LayerNorm(spec.dim, eps=spec.ln_eps) if cls else nn.Identity()
        self.blocks = nn.Sequential(*(Block(spec.dim, spec.heads, spec.mlp_ratio, drop_path=0.0, fused_attn=fused_attn,
                                            ln_eps=spec.ln_eps, act=_act(spec.act)) for _ in range(spec.depth)))
        self.norm = nn.LayerNorm(spec.dim, eps=spec.ln_eps)
        hidden = int(spec.dim * spec.mlp_ratio)
        self.proj = nn.Linear(spec.dim, spec.embed_dim, bias=False) if cls else None
        self.pool = None if cls else MAPHead(spec.dim, spec.heads, hidden, ln_eps=spec.ln_eps, act=_act(spec.act),
                                             fused_attn=fused_attn)
        self._init_weights()

    def _init_weights(self) -> None:
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        for p in (self.cls_token, self.pool.probe if self.pool is not None else None):
            if p is not None:
                nn.init.normal_(p, std=self.spec.dim ** -0.5)
        trunc_normal_linears(self)

    def forward(self, x: Tensor) -> Tensor:
        t, grid = self.patch_embed(x)
        if self.cls_token is not None:
            t = torch.cat([self.cls_token.expand(t.shape[0], -1, -1), t], dim=1)
        t = t + resample_pos_embed(self.pos_embed, grid, trained=self.grid, prefix=self.prefix)
        t = self.blocks(self.norm_pre(t))
        if self.proj is not None:
            return self.proj(self.norm(t[:, 0]))
        return self.pool(self.norm(t))


class ImageTower(nn.Module):
    """``head(encoder(x))``: the :class:`ImageEncoder` and its :class:`ZeroShotHead`. The encoder is
    one sub-module, so ``freeze="body.encoder"`` trains the head alone.

    Example:
        >>> t = ImageTower(TowerSpec(dim=32, depth=1, heads=2, img_size=32, embed_dim=8), nc=3)
        >>> tuple(t.embed(torch.rand(2, 3, 48, 32)).shape), tuple(t(torch.rand(2, 3, 32, 32)).shape)
        ((2, 8), (2, 3))
    """

    def __init__(self, spec: TowerSpec, *, nc: int, fused_attn: bool = False) -> None:
        super().__init__()
        self.spec = spec
        self.encoder = ImageEncoder(spec, fused_attn=fused_attn)
        self.head = ZeroShotHead(spec.out_dim, nc, scale=spec.scale, bias=spec.bias)

    def embed(self, x: Tensor) -> Tensor:
        """Standardised images -> image embeddings (B, ``spec.out_dim``), not normalised."""
        return self.encoder(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.encoder(x))


class TowerClassifier(ImageClassifier):
    """[0, 1] RGB -> logits: the tower's own standardisation in front of :class:`ImageTower`.

    Example:
        >>> net = TowerClassifier(ImageTower(TowerSpec(dim=32, depth=1, heads=2, img_size=32), nc=3))
        >>> tuple(net(torch.rand(1, 3, 32, 32)).shape), tuple(net.embed(torch.rand(1, 3, 32, 32)).shape)
        ((1, 3), (1, 512))
    """

    def __init__(self, body: ImageTower) -> None:
        super().__init__(body)
        self.mean.copy_(torch.tensor(body.spec.mean).view(1, 3, 1, 1))
        self.std.copy_(torch.tensor(body.spec.std).view(1, 3, 1, 1))

    def embed(self, x: Tensor) -> Tensor:
        """[0, 1] RGB (B, 3, H, W) -> image embeddings (B, E), not normalised."""
        return self.body.embed((x - self.mean.to(x.dtype)) / self.std.to(x.dtype))
