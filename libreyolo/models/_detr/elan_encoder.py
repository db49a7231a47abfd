"""D-FINE hybrid encoder: RT-DETR's AIFI + a CCFF neck built from GELAN blocks.

Differences from :class:`~libreyolo.models._detr.hybrid_encoder.HybridEncoder` (per the D-FINE
reference): the fusion blocks are :class:`RepNCSPELAN` (an ELAN split whose two branches are
a RepVGG CSP block followed by a 3x3 conv), the bottom-up downsampling is :class:`SCDown`
(1x1 conv, then depthwise 3x3 stride 2; no activation), the lateral 1x1 convs have no
activation, and the widths follow ``expansion`` / ``depth_mult``:
``branch = round(expansion * hidden // 2)``, ``blocks = round(3 * depth_mult)``.
Works with any number of levels (D-FINE-N uses two: strides 16 and 32).

forward(feats): list of Tensor[B, C_i, H_i, W_i] -> list of Tensor[B, hidden, H_i, W_i].
No host sync, no data-dependent shape.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from .common import conv_norm
from .hybrid_encoder import AIFILayer, HybridEncoder, RepC3


class SCDown(nn.Module):
    """Spatial-channel decoupled downsampling: 1x1 conv + BN, then depthwise k x k stride-s conv
    + BN. x (Tensor[B, c1, H, W]) -> Tensor[B, c2, H/s, W/s]."""

    def __init__(self, c1: int, c2: int, k: int = 3, s: int = 2) -> None:
        super().__init__()
        self.cv1 = conv_norm(c1, c2, 1, 1)
        self.cv2 = _dw_conv_norm(c2, k, s)

    def forward(self, x: Tensor) -> Tensor:
        return self.cv2(self.cv1(x))


def _dw_conv_norm(c: int, k: int, s: int) -> nn.Module:
    m = conv_norm(c, c, 1, 1)  # for the BN settings; the conv is replaced by a depthwise one
    m.conv = nn.Conv2d(c, c, k, s, (k - 1) // 2, groups=c, bias=False)
    return m


class RepNCSPELAN(nn.Module):
    """GELAN block: 1x1 conv to ``c3`` split in two halves; the second half goes through two
    (RepVGG-CSP, 3x3 conv) stages of width ``c4``; concat of both halves and both stage outputs
    -> 1x1 conv to ``c2``. All convs SiLU. x (Tensor[B, c1, H, W]) -> Tensor[B, c2, H, W]."""

    def __init__(self, c1: int, c2: int, c3: int, c4: int, *, n: int = 3) -> None:
        super().__init__()
        act = nn.SiLU()
        self.half = c3 // 2
        self.cv1 = conv_norm(c1, c3, 1, 1, act=act)
        self.cv2 = nn.Sequential(RepC3(c3 // 2, c4, n=n, expansion=1.0), conv_norm(c4, c4, 3, 1, act=act))
        self.cv3 = nn.Sequential(RepC3(c4, c4, n=n, expansion=1.0), conv_norm(c4, c4, 3, 1, act=act))
        self.cv4 = conv_norm(c3 + 2 * c4, c2, 1, 1, act=act)

    def forward(self, x: Tensor) -> Tensor:
        y = list(self.cv1(x).split((self.half, self.half), 1))
        y.append(self.cv2(y[-1]))
        y.append(self.cv3(y[-1]))
        return self.cv4(torch.cat(y, 1))


class ELANHybridEncoder(nn.Module):
    """AIFI on ``encoder_idx`` + GELAN CCFF (see module docs).

    Args:
        in_channels: backbone channels, finest first. hidden: width.
        num_heads, ffn, num_layers: AIFI settings. expansion, depth_mult: neck width / depth.
        encoder_idx: levels that get AIFI (D-FINE: the last one).
    """

    def __init__(self, *, in_channels: Sequence[int], hidden: int = 256, num_heads: int = 8, ffn: int = 1024,
                 num_layers: int = 1, expansion: float = 1.0, depth_mult: float = 1.0,
                 encoder_idx: Sequence[int] | None = None, dropout: float = 0.0,
                 pe_temperature: float = 10000.0) -> None:
        super().__init__()
        n = len(in_channels)
        if n < 2:
            raise ConfigError(f"the hybrid encoder needs at least two levels, got in_channels={tuple(in_channels)}")
        self.hidden = hidden
        self.encoder_idx = tuple(encoder_idx) if encoder_idx is not None else (n - 1,)
        self.pe_temperature = pe_temperature
        self.input_proj = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False), nn.BatchNorm2d(hidden)) for c in in_channels)
        self.encoder = nn.ModuleList(
            nn.ModuleList(AIFILayer(hidden, num_heads=num_heads, ffn=ffn, dropout=dropout) for _ in range(num_layers))
            for _ in self.encoder_idx)
        c4, blocks = round(expansion * hidden // 2), round(3 * depth_mult)
        self.lateral_convs = nn.ModuleList(conv_norm(hidden, hidden, 1, 1) for _ in range(n - 1))
        self.fpn_blocks = nn.ModuleList(RepNCSPELAN(2 * hidden, hidden, 2 * hidden, c4, n=blocks) for _ in range(n - 1))
        self.downsample_convs = nn.ModuleList(SCDown(hidden, hidden, 3, 2) for _ in range(n - 1))
        self.pan_blocks = nn.ModuleList(RepNCSPELAN(2 * hidden, hidden, 2 * hidden, c4, n=blocks) for _ in range(n - 1))

    # Same FPN/PAN dataflow as RT-DETR's hybrid encoder; only the blocks differ.
    merge_levels = staticmethod(HybridEncoder.merge_levels)
    forward = HybridEncoder.forward
