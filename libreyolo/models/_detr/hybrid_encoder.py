"""RT-DETR hybrid encoder: AIFI (intra-scale attention) + CCFF (cross-scale CNN fusion).

Per the RT-DETR paper and reference implementation:

* every input level is projected to ``hidden`` channels by a 1x1 conv + BN;
* AIFI: on the last (stride-32) level only, ``num_layers`` post-norm transformer encoder layers
  (``hidden`` wide, ``num_heads`` heads, FFN ``ffn`` wide, GELU) with a fixed 2-D sine-cosine
  position embedding added to queries and keys;
* CCFF: a top-down path (1x1 lateral conv, nearest 2x upsample, concat, RepC3 block) and a
  bottom-up path (3x3 stride-2 conv, concat, RepC3 block). RepC3 (``CSPRepLayer`` in the
  reference) is ``conv3(RepVGG^n(conv1 x) + conv2 x)`` with ``hidden * expansion`` inner width.

forward(feats): list of Tensor[B, C_i, H_i, W_i] (strides 8, 16, 32) -> list of
Tensor[B, hidden, H_i, W_i] (same strides). No host sync, no data-dependent shape.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .common import PosAttention, conv_norm, rep_vgg, sincos_2d


class AIFILayer(nn.Module):
    """One post-norm transformer encoder layer with positional q/k (AIFI).

    forward(x, pos): x (Tensor[B, N, D]), pos (Tensor[1, N, D]) -> Tensor[B, N, D].
    """

    def __init__(self, dim: int, *, num_heads: int, ffn: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.self_attn = PosAttention(dim, num_heads=num_heads, dropout=dropout)
        self.linear1 = nn.Linear(dim, ffn)
        self.linear2 = nn.Linear(ffn, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, pos: Tensor | None = None) -> Tensor:
        x = self.norm1(x + self.dropout(self.self_attn(x, pos)))
        y = self.linear2(self.dropout(F.gelu(self.linear1(x))))
        return self.norm2(x + self.dropout(y))


class RepC3(nn.Module):
    """CSP block with RepVGG bottlenecks. x (Tensor[B, c1, H, W]) -> Tensor[B, c2, H, W]."""

    def __init__(self, c1: int, c2: int, *, n: int = 3, expansion: float = 1.0) -> None:
        super().__init__()
        hidden = int(c2 * expansion)
        act = nn.SiLU()
        self.conv1 = conv_norm(c1, hidden, 1, 1, act=act)
        self.conv2 = conv_norm(c1, hidden, 1, 1, act=act)
        self.bottlenecks = nn.Sequential(*(rep_vgg(hidden, hidden, act=act) for _ in range(n)))
        self.conv3 = conv_norm(hidden, c2, 1, 1, act=act) if hidden != c2 else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.conv3(self.bottlenecks(self.conv1(x)) + self.conv2(x))


class HybridEncoder(nn.Module):
    """AIFI + CCFF over three levels (see module docs).

    Args:
        in_channels: channels of the backbone maps, finest first.
        hidden: model width (256).
        num_heads, ffn, num_layers: AIFI settings (8, 1024, 1).
        expansion: RepC3 inner-width ratio (0.5 for R18/R34, 1.0 for R50).
        depth: RepVGG blocks per RepC3 (3).
        encoder_idx: levels that get AIFI (the last).
    """

    def __init__(self, *, in_channels: Sequence[int], hidden: int = 256, num_heads: int = 8,
                 ffn: int = 1024, num_layers: int = 1, expansion: float = 1.0, depth: int = 3,
                 encoder_idx: Sequence[int] = (2,), dropout: float = 0.0,
                 pe_temperature: float = 10000.0) -> None:
        super().__init__()
        self.hidden = hidden
        self.encoder_idx = tuple(encoder_idx)
        self.pe_temperature = pe_temperature
        self.input_proj = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False), nn.BatchNorm2d(hidden)) for c in in_channels
        )
        self.encoder = nn.ModuleList(
            nn.ModuleList(AIFILayer(hidden, num_heads=num_heads, ffn=ffn, dropout=dropout) for _ in range(num_layers))
            for _ in self.encoder_idx
        )
        n = len(in_channels)
        act = nn.SiLU()
        self.lateral_convs = nn.ModuleList(conv_norm(hidden, hidden, 1, 1, act=act) for _ in range(n - 1))
        self.fpn_blocks = nn.ModuleList(RepC3(2 * hidden, hidden, n=depth, expansion=expansion) for _ in range(n - 1))
        self.downsample_convs = nn.ModuleList(conv_norm(hidden, hidden, 3, 2, act=act) for _ in range(n - 1))
        self.pan_blocks = nn.ModuleList(RepC3(2 * hidden, hidden, n=depth, expansion=expansion) for _ in range(n - 1))

    @staticmethod
    def merge_levels(a: Tensor, b: Tensor) -> Tensor:
        """How the FPN / PAN steps join two levels: channel concatenation (DEIMv2: a sum)."""
        return torch.cat([a, b], dim=1)

    def forward(self, feats: Sequence[Tensor]) -> list[Tensor]:
        proj = [p(f) for p, f in zip(self.input_proj, feats, strict=True)]
        for layers, idx in zip(self.encoder, self.encoder_idx, strict=True):
            b, c, h, w = proj[idx].shape
            x = proj[idx].flatten(2).transpose(1, 2)  # (B, h*w, C)
            pos = sincos_2d(h, w, c, temperature=self.pe_temperature, device=x.device, dtype=x.dtype)
            for layer in layers:
                x = layer(x, pos)
            proj[idx] = x.transpose(1, 2).reshape(b, c, h, w).contiguous()
        n = len(proj)
        # top-down: inner[0] is the finest level processed so far
        inner = [proj[-1]]
        for k, idx in enumerate(range(n - 1, 0, -1)):
            high = self.lateral_convs[k](inner[0])
            inner[0] = high
            up = F.interpolate(high, scale_factor=2.0, mode="nearest")
            inner.insert(0, self.fpn_blocks[k](self.merge_levels(up, proj[idx - 1])))
        outs = [inner[0]]
        for k in range(n - 1):
            down = self.downsample_convs[k](outs[-1])
            outs.append(self.pan_blocks[k](self.merge_levels(down, inner[k + 1])))
        return outs
