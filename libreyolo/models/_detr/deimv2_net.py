"""DEIMv2 detector (HGNetv2 sizes): HGNetv2 -> lite (or, for n, hybrid) encoder -> DEIMv2 FDR decoder.

Per the DEIMv2 paper / reference configs (``configs/deimv2/deimv2_hgnetv2_{atto,femto}_coco.yml``),
on top of the D-FINE pieces of this package:

* **Lite encoder** (:class:`LiteEncoder`): one backbone map (stride 16) is projected (1x1 conv +
  BN), a second, stride-32 level is made from it by a 3x3 average pool (stride 2) and a 1x1 conv,
  that level gets a global-average "GAP fusion" (``conv(x + mean(x))``); one top-down and one
  bottom-up step fuse the two levels by **sums** through :class:`ELANBlock` (no attention encoder).
* **Hybrid encoder** (n, :class:`Deimv2HybridEncoder`): D-FINE's with the fusion blocks replaced
  by :class:`ELANBlock` on sums.
* **Decoder layers** (:class:`Deimv2DecoderLayer`): RMSNorm instead of LayerNorm, a SwiGLU FFN of
  width ``ffn // 2``, and for these sizes no gate (``use_gateway: False``: residual + RMSNorm after
  the cross-attention); one box head shared by every layer (``share_bbox_head``); the query
  position head is a three-layer MLP of width ``hidden``.
* Everything else (query selection, FDR edges, LQE, denoising, outputs) is
  :class:`~.dfine_decoder.DFineDecoder`'s; the detector's forward contract is
  :class:`~.dfine_net.DFineDetector`'s.

Activations: the reference sets ``activation: silu`` and ``mlp_act: silu`` (LQE, query-position and
box heads); ``transformers``' ``Deimv2`` builds those MLPs with ReLU (its ``query_pos_head`` follows
``decoder_activation_function``). ``Deimv2NetConfig`` holds both (defaults: the reference's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.msda import MSDeformAttn
from .common import MLP, PosAttention, conv_norm, rep_vgg
from .dfine_decoder import DFineDecoder, Gate
from .dfine_net import DFineDetector
from .elan_encoder import ELANHybridEncoder
from .hgnetv2 import HGNetv2


@dataclass(frozen=True, kw_only=True)
class Deimv2NetConfig:
    """Architecture of one DEIMv2 size (values in ``deimv2_variants``)."""

    backbone: str = "Atto"
    return_idx: tuple[int, ...] = (2,)
    encoder: str = "lite"  # "lite" (atto / femto / pico) or "hybrid" (n: AIFI + sum-fused ELAN CCFF)
    enc_ffn: int = 512  # hybrid: the AIFI FFN
    hidden: int = 64
    expansion: float = 0.34
    depth_mult: float = 0.5
    dec_layers: int = 3
    dec_ffn: int = 160
    num_points: tuple[int, ...] = (4, 2)
    num_heads: int = 8
    num_queries: int = 100
    num_denoising: int = 100
    label_noise: float = 0.5
    box_noise: float = 1.0
    reg_max: int = 32
    reg_scale: float = 4.0
    eval_idx: int = -1
    use_gateway: bool = False
    share_bbox_head: bool = True
    trailing_conv: bool = True
    lqe_act: str = "silu"  # reference ``activation``; transformers: relu
    mlp_act: str = "silu"  # reference ``mlp_act`` (box heads); transformers: relu
    query_pos_act: str = "silu"  # reference ``mlp_act``; transformers: ``decoder_activation_function``


class RMSNorm(nn.Module):
    """``weight * x / sqrt(mean(x^2) + eps)`` over the last dim, computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))`` with hidden width ``hidden``. x (Tensor[..., dim]) -> same."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden)
        self.up_proj = nn.Linear(dim, hidden)
        self.down_proj = nn.Linear(hidden, dim)
        for m in (self.gate_proj, self.up_proj, self.down_proj):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Deimv2DecoderLayer(nn.Module):
    """Self-attention + RMSNorm -> deformable cross-attention (no projections) + gate or residual
    RMSNorm -> SwiGLU FFN + RMSNorm."""

    def __init__(self, dim: int, *, num_heads: int, ffn: int, num_levels: int, num_points: int | Sequence[int],
                 use_gateway: bool, dropout: float = 0.0) -> None:
        super().__init__()
        self.self_attn = PosAttention(dim, num_heads=num_heads, dropout=dropout)
        self.norm1 = RMSNorm(dim)
        self.cross_attn = MSDeformAttn(embed_dim=dim, num_heads=num_heads, num_levels=num_levels,
                                       num_points=num_points, project=False)
        self.gateway: Gate | None = None
        self.norm2: RMSNorm | None = None
        if use_gateway:
            self.gateway = Gate(dim)
            self.gateway.norm = RMSNorm(dim)
        else:
            self.norm2 = RMSNorm(dim)
        self.mlp = SwiGLU(dim, ffn // 2)
        self.norm3 = RMSNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tgt: Tensor, ref: Tensor, memory: Tensor, shapes: Sequence[tuple[int, int]], pos: Tensor,
                attn_mask: Tensor | None = None) -> Tensor:
        """tgt (Tensor[B, Q, D]); ref (Tensor[B, Q, L, 4]); memory (Tensor[B, S, D]) -> Tensor[B, Q, D]."""
        tgt = self.norm1(tgt + self.dropout(self.self_attn(tgt, pos, attn_mask)))
        attn = self.dropout(self.cross_attn(tgt + pos, ref, memory, shapes))
        tgt = self.gateway(tgt, attn) if self.gateway is not None else self.norm2(tgt + attn)
        return self.norm3((tgt + self.dropout(self.mlp(tgt))).clamp(min=-65504, max=65504))


class Deimv2Decoder(DFineDecoder):
    """:class:`DFineDecoder` with DEIMv2's layers, query-position head and (optionally) one box head
    shared by all layers. Same forward and outputs."""

    def __init__(self, *, nc: int, cfg: Deimv2NetConfig, num_levels: int) -> None:
        c = cfg
        super().__init__(nc=nc, hidden=c.hidden, num_queries=c.num_queries, feat_channels=(c.hidden,) * num_levels,
                         num_points=c.num_points, num_heads=c.num_heads, num_layers=c.dec_layers, ffn=c.dec_ffn,
                         eval_idx=c.eval_idx, num_denoising=c.num_denoising, label_noise=c.label_noise,
                         box_noise=c.box_noise, reg_max=c.reg_max, reg_scale=c.reg_scale, act=c.lqe_act,
                         mlp_act=c.mlp_act)
        self.layers = nn.ModuleList(
            Deimv2DecoderLayer(c.hidden, num_heads=c.num_heads, ffn=c.dec_ffn, num_levels=num_levels,
                               num_points=c.num_points, use_gateway=c.use_gateway) for _ in range(c.dec_layers))
        self.query_pos_head = MLP(4, c.hidden, c.hidden, num_layers=3, act=c.query_pos_act)
        for layer in self.query_pos_head.layers:
            nn.init.xavier_uniform_(layer.weight)
        if c.share_bbox_head:
            self.dec_bbox_head = nn.ModuleList([self.dec_bbox_head[0]] * c.dec_layers)


class CSPRep(nn.Module):
    """1x1 conv to two halves; the second through ``n`` RepVGG blocks, added to the first; then a
    3x3 conv (``trailing``). SiLU. x (Tensor[B, c1, H, W]) -> Tensor[B, c2, H, W]."""

    def __init__(self, c1: int, c2: int, *, n: int, trailing: bool = True) -> None:
        super().__init__()
        act = nn.SiLU()
        self.conv1 = conv_norm(c1, 2 * c2, 1, 1, act=act)
        self.bottlenecks = nn.Sequential(*(rep_vgg(c2, c2, act=act) for _ in range(n)))
        self.conv2 = conv_norm(c2, c2, 3, 1, act=act) if trailing else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        res, y = self.conv1(x).chunk(2, 1)
        return self.conv2(res + self.bottlenecks(y))


class ELANBlock(nn.Module):
    """DEIMv2's fusion block: 1x1 conv to ``2 * c`` split in halves; the second half through two
    :class:`CSPRep` of width ``c4`` in sequence; concat (both halves, both outputs) -> 1x1 conv.
    x (Tensor[B, c, H, W]) -> Tensor[B, c, H, W]."""

    def __init__(self, c: int, c4: int, *, n: int, trailing: bool = True) -> None:
        super().__init__()
        act = nn.SiLU()
        self.conv1 = conv_norm(c, 2 * c, 1, 1, act=act)
        self.csp_rep1 = CSPRep(c, c4, n=n, trailing=trailing)
        self.csp_rep2 = CSPRep(c4, c4, n=n, trailing=trailing)
        self.conv2 = conv_norm(2 * c + 2 * c4, c, 1, 1, act=act)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.conv1(x).chunk(2, 1)
        c = self.csp_rep1(b)
        return self.conv2(torch.cat([a, b, c, self.csp_rep2(c)], 1))


class LiteEncoder(nn.Module):
    """DEIMv2's lite encoder (see module docs). feats: [Tensor[B, C, H, W]] (one stride-16 map) ->
    [Tensor[B, hidden, H, W], Tensor[B, hidden, H/2, W/2]]."""

    def __init__(self, *, in_channels: Sequence[int], hidden: int, expansion: float, depth_mult: float,
                 trailing: bool = True) -> None:
        super().__init__()
        act = nn.SiLU()
        self.input_proj = nn.ModuleList(conv_norm(c, hidden, 1, 1) for c in in_channels)
        self.down_pool1 = nn.AvgPool2d(kernel_size=3, stride=2, padding=1)
        self.down_conv1 = conv_norm(hidden, hidden, 1, 1, act=act)
        self.down_pool2 = nn.AvgPool2d(kernel_size=3, stride=2, padding=1)
        self.down_conv2 = conv_norm(hidden, hidden, 1, 1, act=act)
        self.bi_fusion_conv = conv_norm(hidden, hidden, 1, 1, act=act)
        c4, n = round(expansion * hidden // 2), round(3 * depth_mult)
        self.fpn_block = ELANBlock(hidden, c4, n=n, trailing=trailing)
        self.pan_block = ELANBlock(hidden, c4, n=n, trailing=trailing)

    def forward(self, feats: Sequence[Tensor]) -> list[Tensor]:
        proj = [p(f) for p, f in zip(self.input_proj, feats, strict=True)]
        low = self.down_conv1(self.down_pool1(proj[-1]))
        low = self.bi_fusion_conv(low + F.adaptive_avg_pool2d(low, 1))
        fine = self.fpn_block(proj[0] + F.interpolate(low, scale_factor=2.0, mode="nearest"))
        coarse = self.pan_block(low + self.down_conv2(self.down_pool2(fine)))
        return [fine, coarse]


class Deimv2HybridEncoder(ELANHybridEncoder):
    """DEIMv2-N's encoder: D-FINE's (input projections, AIFI on the last level, lateral 1x1 convs,
    SCDown), with :class:`ELANBlock` fusion blocks on **sums** of the two levels instead of
    concatenations."""

    def __init__(self, *, in_channels: Sequence[int], hidden: int, ffn: int, num_heads: int, expansion: float,
                 depth_mult: float, trailing: bool = True) -> None:
        super().__init__(in_channels=in_channels, hidden=hidden, num_heads=num_heads, ffn=ffn, expansion=expansion,
                         depth_mult=depth_mult)
        c4, n, levels = round(expansion * hidden // 2), round(3 * depth_mult), len(in_channels)
        self.fpn_blocks = nn.ModuleList(ELANBlock(hidden, c4, n=n, trailing=trailing) for _ in range(levels - 1))
        self.pan_blocks = nn.ModuleList(ELANBlock(hidden, c4, n=n, trailing=trailing) for _ in range(levels - 1))

    @staticmethod
    def merge_levels(a: Tensor, b: Tensor) -> Tensor:
        return a + b


class Deimv2Detector(DFineDetector):
    """Three-stage HGNetv2 + :class:`LiteEncoder` + :class:`Deimv2Decoder`, with
    :class:`~.dfine_net.DFineDetector`'s forward contract (``encode`` / ``decode`` / ``trunk``)."""

    def __init__(self, *, cfg: Deimv2NetConfig, nc: int) -> None:  # noqa: D107
        nn.Module.__init__(self)
        self.nc = nc
        self.cfg = cfg  # type: ignore[assignment]
        self.backbone = HGNetv2(name=cfg.backbone, return_idx=cfg.return_idx, use_lab=True)
        self.encoder: nn.Module
        if cfg.encoder == "lite":
            s = self.backbone.out_strides[-1]
            self.strides = (s, 2 * s)
            self.encoder = LiteEncoder(in_channels=self.backbone.out_channels, hidden=cfg.hidden,
                                       expansion=cfg.expansion, depth_mult=cfg.depth_mult, trailing=cfg.trailing_conv)
        else:
            self.strides = self.backbone.out_strides
            self.encoder = Deimv2HybridEncoder(in_channels=self.backbone.out_channels, hidden=cfg.hidden,
                                               ffn=cfg.enc_ffn, num_heads=cfg.num_heads, expansion=cfg.expansion,
                                               depth_mult=cfg.depth_mult, trailing=cfg.trailing_conv)
        self.decoder = Deimv2Decoder(nc=nc, cfg=cfg, num_levels=len(self.strides))
        # He init (fan-out) of the convolutions: with PyTorch's default init the activations of the
        # untrained net shrink ~10x per stage, and with no attention encoder to renormalise them
        # (D-FINE's AIFI does) every token reaches the decoder near-equal, so the top-k query
        # selection is decided by rounding. The reference starts from a pretrained backbone.
        for m in (*self.backbone.modules(), *self.encoder.modules()):
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


__all__ = ["Deimv2NetConfig", "Deimv2Detector", "Deimv2Decoder", "Deimv2HybridEncoder", "LiteEncoder", "RMSNorm", "SwiGLU"]
