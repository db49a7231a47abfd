"""Small blocks shared by the DETR-style encoder-decoder detectors (RT-DETR lineage).

* :func:`conv_norm`: Conv2d (no bias) + BatchNorm2d (PyTorch default ``eps=1e-5``,
  ``momentum=0.1``, as the reference ResNet-vd / hybrid encoder use) + activation, built on
  :class:`~libreyolo.layers.conv.ConvBNAct` so that ``fuse_modules`` folds it.
* :func:`rep_vgg`: the 3x3 + 1x1 re-parameterisable block (:class:`RepConvN`) with the same
  BatchNorm settings.
* :class:`MLP`: a stack of Linear layers with ReLU (or ``act``) between them (box heads, query position).
* :class:`PosAttention`: multi-head attention whose queries and keys carry a positional
  embedding and whose values do not (``q = k = x + pos``, ``v = x``), parameters laid out as
  ``torch.nn.MultiheadAttention`` (``in_proj_weight``, ``in_proj_bias``, ``out_proj``) so that
  reference checkpoints map one to one. It follows the fused-attention policy (SPEC K-9) with
  a ``fused_attn`` flag, off by default.
* :func:`inverse_sigmoid`, :func:`sincos_2d`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...kernels.attention import use_sdpa
from ...layers.attention import attention_equation
from ...layers.conv import ConvBNAct, RepConvN

BN_EPS = 1e-5
BN_MOMENTUM = 0.1


def _reset_bn(module: nn.Module) -> nn.Module:
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps, m.momentum = BN_EPS, BN_MOMENTUM
    return module


def conv_norm(c1: int, c2: int, k: int = 1, s: int = 1, *, act: nn.Module | None = None) -> ConvBNAct:
    """Conv(k, s, 'same' padding, no bias) + BN + ``act`` (identity when None).

    x (Tensor[B, c1, H, W]) -> Tensor[B, c2, H/s, W/s].
    """
    return _reset_bn(ConvBNAct(c1, c2, k, s, act=act if act is not None else False))


def rep_vgg(c1: int, c2: int, *, act: nn.Module | None = None) -> RepConvN:
    """``act(BN(conv3x3 x) + BN(conv1x1 x))`` (RepVGG without identity), fusable to one 3x3."""
    return _reset_bn(RepConvN(c1, c2, act=act if act is not None else nn.SiLU()))


def inverse_sigmoid(x: Tensor, eps: float = 1e-5) -> Tensor:
    """logit(x) with x clamped to [0, 1] and both terms to ``eps`` (as the reference)."""
    x = x.clamp(min=0.0, max=1.0)
    return torch.log(x.clamp(min=eps) / (1.0 - x).clamp(min=eps))


def sincos_2d(h: int, w: int, dim: int, *, temperature: float = 10000.0,
              device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """Fixed 2-D sine-cosine position embedding, Tensor[1, h*w, dim] (reference layout).

    As the reference: the grid is built as ``meshgrid(arange(w), arange(h), indexing="ij")`` and
    flattened, and channels are ``[sin(x), cos(x), sin(y), cos(y)]`` with ``dim / 4`` frequencies
    each. Built from Python ints with ``arange``: no host sync, safe under CUDA-graph capture.
    """
    if dim % 4:
        raise ConfigError(f"sincos_2d needs an embedding width divisible by 4, got {dim}")
    gw, gh = torch.meshgrid(torch.arange(w, dtype=torch.float32, device=device),
                            torch.arange(h, dtype=torch.float32, device=device), indexing="ij")
    pos_dim = dim // 4
    omega = torch.arange(pos_dim, dtype=torch.float32, device=device) / pos_dim
    omega = 1.0 / (temperature**omega)
    out_w = gw.flatten()[:, None] * omega[None]  # (h*w, dim/4)
    out_h = gh.flatten()[:, None] * omega[None]
    emb = torch.cat([out_w.sin(), out_w.cos(), out_h.sin(), out_h.cos()], dim=1)
    return emb[None].to(dtype)  # (1, h*w, dim)


ACTIVATIONS = {"relu": F.relu, "silu": F.silu, "gelu": F.gelu}


def activation(name: str):
    """The elementwise function of ``name`` (relu, silu, gelu)."""
    if name not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {name!r}; known: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class MLP(nn.Module):
    """``num_layers`` Linear layers, ``act`` (ReLU by default; DEIM configs: SiLU) between them.
    x (Tensor[..., c_in]) -> Tensor[..., c_out]."""

    def __init__(self, c_in: int, hidden: int, c_out: int, *, num_layers: int, act: str = "relu") -> None:
        super().__init__()
        dims = [c_in] + [hidden] * (num_layers - 1) + [c_out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.act_name = act
        self._act = activation(act)

    def forward(self, x: Tensor) -> Tensor:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < last:
                x = self._act(x)
        return x


class PosAttention(nn.Module):
    """Multi-head attention with positional queries/keys: ``attn(q=k=x+pos, v=x)``.

    forward(x, pos=None, attn_mask=None): x (Tensor[B, N, D]); pos (Tensor broadcastable to
    [B, N, D]); attn_mask (Tensor[N, N] bool, True = may NOT attend, as
    ``nn.MultiheadAttention``) -> Tensor[B, N, D].

    Example:
        >>> m = PosAttention(64, num_heads=4)
        >>> tuple(m(torch.rand(2, 5, 64)).shape)
        (2, 5, 64)
    """

    def __init__(self, dim: int, *, num_heads: int = 8, dropout: float = 0.0,
                 fused_attn: bool = False) -> None:
        super().__init__()
        if dim % num_heads:
            raise ConfigError(f"attention width {dim} is not divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim**-0.5
        self.dropout = dropout
        self.fused_attn = bool(fused_attn)
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: Tensor, pos: Tensor | None = None, attn_mask: Tensor | None = None) -> Tensor:
        b, n, d = x.shape
        qk_in = x if pos is None else x + pos
        w_qk, w_v = self.in_proj_weight.split((2 * d, d))
        b_qk, b_v = self.in_proj_bias.split((2 * d, d))
        q, k = F.linear(qk_in, w_qk, b_qk).view(b, n, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        v = F.linear(x, w_v, b_v).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, C)
        bias = None
        if attn_mask is not None:
            bias = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device)
            bias = bias.masked_fill(attn_mask, float("-inf"))
        drop = self.dropout if self.training else 0.0
        if use_sdpa(self.fused_attn):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=drop, scale=self.scale)
        else:
            out = attention_equation(q, k, v, scale=self.scale, bias=bias, dropout_p=drop)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, d))
