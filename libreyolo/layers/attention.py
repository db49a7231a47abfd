"""Multi-head self-attention with a ``fused_attn`` flag (SPEC K-9).

``fused_attn=True`` runs ``torch.nn.functional.scaled_dot_product_attention`` when the policy of
:mod:`libreyolo.kernels.attention` allows it (eager and ``torch.compile``); otherwise, and always
under CUDA-graph capture, ``torch.jit.trace``, ONNX export and ``torch.export``, it runs the
explicit equation ``softmax(q k^T * scale + bias) v``. The flag defaults to off: a family turns
it on only after its outputs with SDPA were byte-identical to the equation.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError
from ..kernels.attention import use_sdpa


def attention_equation(
    q: Tensor, k: Tensor, v: Tensor, *, scale: float, bias: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:  # fmt: skip
    """The explicit attention equation.

    q, k, v (Tensor[B, H, N, C]); bias (additive, broadcastable to [B, H, N, N]) ->
    Tensor[B, H, N, C].
    """
    logits = (q * scale) @ k.transpose(-2, -1)  # (B, H, N, N)
    if bias is not None:
        logits = logits + bias
    attn = logits.softmax(dim=-1)
    if dropout_p > 0.0:
        attn = F.dropout(attn, p=dropout_p)
    return attn.to(v.dtype) @ v


class Attention(nn.Module):
    """Multi-head self-attention: qkv projection, heads, optional relative-position bias.

    Args:
        dim: channels ``D`` (divisible by ``num_heads``).
        num_heads: heads ``H``.
        qkv_bias: bias on the qkv projection.
        qk_scale: logit scale, default ``head_dim ** -0.5``.
        attn_drop, proj_drop: dropout probabilities (training only).
        fused_attn: use SDPA where the policy allows (see module docs).
        rel_pos_bias: optional hook, a module called with no arguments that returns an additive
            bias ``Tensor[H, N, N]`` (e.g. Swin's relative-position table lookup).
        qk_norm: a LayerNorm (eps 1e-5) over each head's channels on the queries and the keys
            (``q_norm`` / ``k_norm``), before any rotary embedding.

    forward(x, attn_bias=None, rope=None): x (Tensor[B, N, D]); attn_bias (additive float tensor
    broadcastable to [B, H, N, N], e.g. a shifted-window mask); rope (a function Tensor[B, H, N, C]
    -> same, a rotary position embedding applied to the queries and the keys) -> Tensor[B, N, D].

    Example:
        >>> m = Attention(dim=64, num_heads=4)
        >>> tuple(m(torch.rand(2, 10, 64)).shape)
        (2, 10, 64)
    """

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 8,
        qkv_bias: bool = True,
        qk_scale: float | None = None,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        fused_attn: bool = False,
        rel_pos_bias: nn.Module | None = None,
        qk_norm: bool = False,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ConfigError(
                f"Attention dim={dim} is not divisible by num_heads={num_heads}; pick a head "
                "count that divides the width"
            )
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = qk_scale if qk_scale is not None else self.head_dim**-0.5
        self.fused_attn = bool(fused_attn)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.rel_pos_bias = rel_pos_bias
        self.q_norm = nn.LayerNorm(self.head_dim) if qk_norm else None
        self.k_norm = nn.LayerNorm(self.head_dim) if qk_norm else None

    def forward(self, x: Tensor, attn_bias: Tensor | None = None,
                rope: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, H, N, C)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = rope(q), rope(k)
        bias = attn_bias
        if self.rel_pos_bias is not None:
            rel = self.rel_pos_bias().unsqueeze(0)  # (1, H, N, N)
            bias = rel if bias is None else bias + rel
        drop = self.attn_drop if self.training else 0.0
        if use_sdpa(self.fused_attn):
            if bias is not None:
                bias = bias.to(q.dtype)
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, dropout_p=drop, scale=self.scale
            )
        else:
            out = attention_equation(q, k, v, scale=self.scale, bias=bias, dropout_p=drop)
        out = out.transpose(1, 2).reshape(b, n, d)  # (B, N, D)
        return self.proj_drop(self.proj(out))
