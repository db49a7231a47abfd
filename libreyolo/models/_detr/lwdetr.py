"""The LW-DETR decoder side shared by LW-DETR (Chen et al., arXiv:2406.03459) and RF-DETR
(Robinson et al., arXiv:2511.09554): the C2f projector, two-stage query selection with Group DETR,
the shallow deformable decoder with "lite" reference refinement, and the network base.

* **projector** (:class:`Projector`): the backbone's ``k`` maps (one stride, P4) concatenated,
  a C2f block (1x1 conv to ``2 h``, split, ``n`` blocks of two 3x3 convs, 1x1 conv of all pieces
  to the model width) and a channels-first LayerNorm (eps 1e-6). LW-DETR's convolutions are
  BatchNorm + SiLU, RF-DETR's channels-first LayerNorm (eps 1e-5) + SiLU. A multi-level projector
  (:class:`MultiScaleProjector`, LW-DETR large / xlarge: P3 and P5) runs one such projector per
  level, each first resampling every backbone map (``scales``: 2.0 a 2x2 stride-2 transposed
  convolution to half the width, preceded by a 1x1 conv + norm + ReLU halving widths over 512;
  0.5 a 3x3 stride-2 conv + norm + ReLU; 1.0 nothing);
* **two-stage selection**: every memory token is a proposal (cell centre, side ``0.05 * 2**level``;
  tokens outside ``(0.01, 0.99)`` are zeroed and scored ``-inf``); per query group a linear +
  LayerNorm, a class head and a box-delta head (``bbox_reparam``: ``cxcy + d_xy * wh``,
  ``wh * exp(d_wh)``, no sigmoid); the top ``num_queries`` tokens by best class score give (detached)
  boxes that refine the learned reference boxes; the content queries are learned (``query_feat``);
* **decoder**: ``dec_layers`` post-norm layers (self-attention with the query position, deformable
  cross-attention with ``ca_heads`` heads and ``points`` points per level around the reference box,
  FFN 2048 ReLU); the query position is an MLP of the reference box's sine embedding, computed once
  (``lite_refpoint_refine``: the reference boxes are not refined between layers); each layer's
  output (after a shared LayerNorm) gives class logits and ``refine(reference, bbox_embed(h))``;
* **Group DETR** in training: ``groups`` (13) independent query groups, each with its own proposal
  heads and learned queries, attending only within their group; the criterion matches each group
  one-to-one (the groups are folded into the batch dimension of :class:`DecoderTrainOutput`). Eval
  uses group 0 only.

Every deformable attention is :class:`~libreyolo.layers.msda.MSDeformAttn` (``ms_deform_attn`` slot,
SPEC K-8); the self-attention is :class:`~libreyolo.models._detr.common.PosAttention` with its
``fused_attn`` flag (SPEC K-9).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.msda import MSDeformAttn
from .common import MLP, PosAttention
from .decoder import DecoderTrainOutput
from .deformable import FFN, DeformableNetBase
from .losses import split_targets


@dataclass(frozen=True, kw_only=True)
class LWDecoderConfig:
    """Decoder side of one size (LW-DETR / RF-DETR defaults)."""

    hidden: int = 256
    sa_heads: int = 8
    ca_heads: int = 16
    dec_layers: int = 3
    points: int = 2
    ffn: int = 2048
    num_queries: int = 300
    groups: int = 13
    num_levels: int = 1
    dropout: float = 0.0
    c2f_blocks: int = 3
    expansion: float = 0.5
    scales: tuple[float, ...] = (1.0,)  # projector levels: 2.0 P3, 1.0 P4, 0.5 P5 (one per ``num_levels``)


def refine_boxes(ref: Tensor, delta: Tensor) -> Tensor:
    """``bbox_reparam``: (cx, cy, w, h) ``ref`` moved by ``delta``: ``cxcy + d_xy * wh``, ``wh * exp(d_wh)``.

    Example:
        >>> refine_boxes(torch.tensor([0.5, 0.5, 0.2, 0.4]), torch.tensor([1.0, 0.0, 0.0, 0.0])).tolist()
        [0.699999988079071, 0.5, 0.20000000298023224, 0.4000000059604645]
    """
    return torch.cat((delta[..., :2] * ref[..., 2:] + ref[..., :2], delta[..., 2:].exp() * ref[..., 2:]), -1)


class ChannelsFirstLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of (B, C, H, W)."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNorm(nn.Module):
    """Conv (no bias) -> BatchNorm (``norm="bn"``) or channels-first LayerNorm (``"ln"``) -> SiLU
    (``relu=True``: ReLU, the resampling convolutions)."""

    def __init__(self, c_in: int, c_out: int, k: int, *, norm: str, stride: int = 1, relu: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, stride, padding=k // 2, bias=False)
        self.norm = nn.BatchNorm2d(c_out) if norm == "bn" else ChannelsFirstLayerNorm(c_out, eps=1e-5)
        self.act = nn.ReLU() if relu else nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.norm(self.conv(x)))


class C2fBlock(nn.Module):
    """Two 3x3 :class:`ConvNorm` (no residual)."""

    def __init__(self, c: int, *, norm: str) -> None:
        super().__init__()
        self.conv1, self.conv2 = ConvNorm(c, c, 3, norm=norm), ConvNorm(c, c, 3, norm=norm)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(self.conv1(x))


def sampling(c: int, scale: float, *, norm: str) -> tuple[nn.Sequential, int]:
    """One backbone map's resampling for a projector level and its output width (module docs).

    Example:
        >>> [(len(seq), c) for seq, c in (sampling(768, 2.0, norm="bn"), sampling(384, 2.0, norm="bn"),
        ...                                sampling(384, 0.5, norm="bn"), sampling(384, 1.0, norm="bn"))]
        [(2, 192), (1, 192), (1, 384), (0, 384)]
    """
    if scale == 1.0:
        return nn.Sequential(), c
    if scale == 0.5:
        return nn.Sequential(ConvNorm(c, c, 3, norm=norm, stride=2, relu=True)), c
    if scale == 2.0:
        if c > 512:  # the reference halves wide maps first
            return nn.Sequential(ConvNorm(c, c // 2, 1, norm=norm, relu=True), nn.ConvTranspose2d(c // 2, c // 4, 2, 2)), c // 4
        return nn.Sequential(nn.ConvTranspose2d(c, c // 2, 2, 2)), c // 2
    raise ConfigError(f"projector scale {scale} is not one of 0.5, 1.0, 2.0")


class Projector(nn.Module):
    """The backbone's maps (widths ``dims``, same stride) -> [Tensor[B, hidden, h / scale, w / scale]]
    (module docs); ``scale`` 1.0 (no resampling) is the single-level projector.

    Example:
        >>> proj = Projector((8, 8), LWDecoderConfig(hidden=16, c2f_blocks=1), norm="bn", scale=2.0)
        >>> [tuple(m.shape) for m in proj([torch.rand(1, 8, 4, 4), torch.rand(1, 8, 4, 4)])]
        [(1, 16, 8, 8)]
    """

    def __init__(self, dims: Sequence[int], cfg: LWDecoderConfig, *, norm: str, scale: float = 1.0) -> None:
        super().__init__()
        d = cfg.hidden
        self.hid = int(d * cfg.expansion)
        pairs = [sampling(c, scale, norm=norm) for c in dims]
        self.sampling = nn.ModuleList(p[0] for p in pairs)  # no parameters at scale 1.0
        self.conv1 = ConvNorm(sum(p[1] for p in pairs), 2 * self.hid, 1, norm=norm)
        self.blocks = nn.ModuleList(C2fBlock(self.hid, norm=norm) for _ in range(cfg.c2f_blocks))
        self.conv2 = ConvNorm((2 + cfg.c2f_blocks) * self.hid, d, 1, norm=norm)
        self.norm = ChannelsFirstLayerNorm(d, eps=1e-6)

    def forward(self, feats: Sequence[Tensor]) -> list[Tensor]:
        x = torch.cat([s(f) for s, f in zip(self.sampling, feats, strict=True)], 1)
        parts = list(self.conv1(x).split(self.hid, 1))
        y = parts[-1]
        for block in self.blocks:
            y = block(y)
            parts.append(y)
        return [self.norm(self.conv2(torch.cat(parts, 1)))]


class MultiScaleProjector(nn.Module):
    """One :class:`Projector` per ``cfg.scales`` entry (``levels.i``) over the same backbone maps ->
    one map per level, finest first (the decoder's level order).

    Example:
        >>> proj = MultiScaleProjector((8, 8), LWDecoderConfig(hidden=16, c2f_blocks=1, scales=(2.0, 0.5)), norm="bn")
        >>> [tuple(m.shape) for m in proj([torch.rand(1, 8, 4, 4), torch.rand(1, 8, 4, 4)])]
        [(1, 16, 8, 8), (1, 16, 2, 2)]
    """

    def __init__(self, dims: Sequence[int], cfg: LWDecoderConfig, *, norm: str) -> None:
        super().__init__()
        self.levels = nn.ModuleList(Projector(dims, cfg, norm=norm, scale=s) for s in cfg.scales)

    def forward(self, feats: Sequence[Tensor]) -> list[Tensor]:
        return [level(feats)[0] for level in self.levels]


def build_projector(dims: Sequence[int], cfg: LWDecoderConfig, *, norm: str) -> nn.Module:
    """:class:`Projector` for one level (its keys ``encoder.conv1`` ...), else :class:`MultiScaleProjector`.

    Example:
        >>> type(build_projector((8,), LWDecoderConfig(hidden=16), norm="ln")).__name__
        'Projector'
    """
    if len(cfg.scales) != cfg.num_levels:
        raise ConfigError(f"{len(cfg.scales)} projector scales for {cfg.num_levels} decoder levels")
    if len(cfg.scales) == 1:
        return Projector(dims, cfg, norm=norm, scale=cfg.scales[0])
    return MultiScaleProjector(dims, cfg, norm=norm)


class LWDecoderLayer(nn.Module):
    """Grouped self-attention, deformable cross-attention, FFN; post-norm."""

    def __init__(self, cfg: LWDecoderConfig) -> None:
        super().__init__()
        d = cfg.hidden
        self.self_attn = PosAttention(d, num_heads=cfg.sa_heads, dropout=0.0)
        self.cross_attn = MSDeformAttn(embed_dim=d, num_heads=cfg.ca_heads, num_levels=cfg.num_levels,
                                       num_points=cfg.points)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.ffn = FFN(d, cfg.ffn, dropout=cfg.dropout)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, tgt: Tensor, pos: Tensor, ref: Tensor, memory: Tensor, shapes: Sequence[tuple[int, int]],
                groups: int = 1) -> Tensor:
        b, n, d = tgt.shape
        sa = self.self_attn(tgt.reshape(b * groups, n // groups, d), pos.reshape(b * groups, n // groups, d))
        tgt = self.norm1(tgt + self.dropout(sa.reshape(b, n, d)))
        tgt = self.norm2(tgt + self.dropout(self.cross_attn(tgt + pos, ref, memory, shapes)))
        return self.norm3(tgt + self.dropout(self.ffn(tgt)))


def token_proposals(shapes: Sequence[tuple[int, int]], *, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Per-token proposal boxes Tensor[1, S, 4] (cx, cy, w, h; invalid ones zero) and validity Tensor[1, S, 1]."""
    boxes = []
    for lvl, (h, w) in enumerate(shapes):
        gy, gx = torch.meshgrid(torch.arange(h, dtype=dtype, device=device), torch.arange(w, dtype=dtype, device=device),
                                indexing="ij")
        xy = torch.stack(((gx.reshape(-1) + 0.5) / w, (gy.reshape(-1) + 0.5) / h), -1)
        boxes.append(torch.cat((xy, torch.full_like(xy, 0.05 * 2.0**lvl)), -1))
    props = torch.cat(boxes, 0)[None]
    valid = ((props > 0.01) & (props < 0.99)).all(-1, keepdim=True)
    return props.masked_fill(~valid, 0.0), valid


class LWDecoder(nn.Module):
    """Two-stage Group-DETR query selection, decoder layers and heads (module docs).

    forward(feats, dn=None): the projector's maps -> eval: (logits Tensor[B, Q, nc], boxes Tensor[B,
    Q, 4] normalised cxcywh), Q = min(num_queries, tokens); train: :class:`DecoderTrainOutput`
    with the groups folded into the batch (``G * B``, group-major). ``dn`` is unused (no denoising).

    Example:
        >>> dec = LWDecoder(nc=3, cfg=LWDecoderConfig(hidden=32, sa_heads=2, ca_heads=2, ffn=32, num_queries=5,
        ...                                            groups=2)).eval()
        >>> logits, boxes = dec([torch.rand(1, 32, 4, 4)])
        >>> tuple(logits.shape), tuple(boxes.shape)
        ((1, 5, 3), (1, 5, 4))
        >>> tuple(dec.train()([torch.rand(1, 32, 4, 4)]).logits.shape)  # layers, groups x batch, queries, classes
        (3, 2, 5, 3)
    """

    def __init__(self, *, nc: int, cfg: LWDecoderConfig) -> None:
        super().__init__()
        d, g, q = cfg.hidden, cfg.groups, cfg.num_queries
        self.nc, self.hidden, self.num_queries, self.groups = nc, d, q, g
        self.enc_output = nn.ModuleList(nn.Linear(d, d) for _ in range(g))
        self.enc_output_norm = nn.ModuleList(nn.LayerNorm(d) for _ in range(g))
        self.enc_out_class_embed = nn.ModuleList(nn.Linear(d, nc) for _ in range(g))
        self.enc_out_bbox_embed = nn.ModuleList(MLP(d, d, 4, num_layers=3) for _ in range(g))
        self.reference_point_embed = nn.Embedding(q * g, 4)
        self.query_feat = nn.Embedding(q * g, d)
        self.layers = nn.ModuleList(LWDecoderLayer(cfg) for _ in range(cfg.dec_layers))
        self.norm = nn.LayerNorm(d)
        self.ref_point_head = MLP(2 * d, d, d, num_layers=2)
        self.class_embed = nn.Linear(d, nc)
        self.bbox_embed = MLP(d, d, 4, num_layers=3)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        prior = -math.log(99.0)  # prior probability 0.01
        nn.init.zeros_(self.reference_point_embed.weight)
        for head in [self.class_embed, *self.enc_out_class_embed]:
            nn.init.constant_(head.bias, prior)
        for mlp in [self.bbox_embed, *self.enc_out_bbox_embed]:
            nn.init.zeros_(mlp.layers[-1].weight)
            nn.init.zeros_(mlp.layers[-1].bias)

    def make_denoising(self, *args: object, **kwargs: object) -> None:
        return None  # LW-DETR / RF-DETR train without denoising queries

    def num_selected(self, feats: Sequence[Tensor]) -> int:
        return min(self.num_queries, sum(int(f.shape[-2]) * int(f.shape[-1]) for f in feats))

    def forward(self, feats: Sequence[Tensor], dn: object = None) -> tuple[Tensor, Tensor] | DecoderTrainOutput:
        from ..dino_detr.nn import box_sine_embedding

        shapes = [(int(f.shape[-2]), int(f.shape[-1])) for f in feats]
        memory = torch.cat([f.flatten(2).transpose(1, 2) for f in feats], 1)  # (B, S, D)
        b, s, d = memory.shape
        k = min(self.num_queries, s)
        groups = self.groups if self.training else 1
        props, valid = token_proposals(shapes, device=memory.device, dtype=memory.dtype)
        masked = memory.masked_fill(~valid, 0.0)
        refs, tgts, enc_logits, enc_boxes = [], [], [], []
        ref_w = self.reference_point_embed.weight.view(self.groups, self.num_queries, 4)
        tgt_w = self.query_feat.weight.view(self.groups, self.num_queries, d)
        for g in range(groups):
            oq = self.enc_output_norm[g](self.enc_output[g](masked))
            cls = self.enc_out_class_embed[g](oq).masked_fill(~valid, float("-inf"))
            coord = refine_boxes(props, self.enc_out_bbox_embed[g](oq))
            top = cls.max(-1).values.topk(k, dim=1).indices
            top_coord = coord.gather(1, top[..., None].expand(b, k, 4))
            refs.append(refine_boxes(top_coord.detach(), ref_w[g, :k][None]))
            tgts.append(tgt_w[g, :k][None].expand(b, k, d))
            if self.training:
                enc_logits.append(self.enc_out_class_embed[g](oq.gather(1, top[..., None].expand(b, k, d))))
                enc_boxes.append(top_coord)
        ref, tgt = torch.cat(refs, 1), torch.cat(tgts, 1)
        n = ref.shape[1]
        pos = self.ref_point_head(box_sine_embedding(ref, d // 2))
        ref_in = ref[:, :, None].expand(b, n, len(shapes), 4)
        logits, boxes = [], []
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            tgt = layer(tgt, pos, ref_in, memory, shapes, groups)
            if self.training or i == last:
                hs = self.norm(tgt)
                logits.append(self.class_embed(hs))
                boxes.append(refine_boxes(ref, self.bbox_embed(hs)))
        if not self.training:
            return logits[-1], boxes[-1]

        def fold(t: Tensor) -> Tensor:  # (..., B, G*k, C) -> (..., G*B, k, C), group-major
            lead = t.shape[:-3]
            t = t.reshape(*lead, b, groups, k, t.shape[-1]).transpose(-4, -3)
            return t.reshape(*lead, groups * b, k, t.shape[-1])

        return DecoderTrainOutput(logits=fold(torch.stack(logits)), boxes=fold(torch.stack(boxes)),
                                  enc_logits=fold(torch.cat(enc_logits, 1)), enc_boxes=fold(torch.cat(enc_boxes, 1)),
                                  dn_logits=None, dn_boxes=None, dn=None)


class LWNetBase(DeformableNetBase):
    """Backbone (a ViT's maps) + :class:`Projector` (``encoder``) + :class:`LWDecoder`; the forward,
    ``encode`` / ``trunk`` / ``decode`` of :class:`DeformableNetBase` (``strides`` = the patch)."""


class GroupTrainLoss:
    """``criterion(maps, batch) -> (loss, items)``: the decoder in train mode with every query group,
    each group matched and scored against the same targets (focal 1, L1 5, GIoU 2; boxes normalised by
    ``G x`` the box count, as the reference's Group DETR criterion). ``loss = items.sum() * B``."""

    def __init__(self, net: nn.Module) -> None:
        from ..dino_detr.loss import DINO_LOSS, DINOCriterion

        self.net = net
        self.criterion = DINOCriterion(nc=int(net.nc), cfg=DINO_LOSS)
        self.hyp: dict[str, float] = {}

    def __call__(self, preds: Sequence[Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        feats = list(preds)
        decoder = self.net.decoder
        if not decoder.training:
            raise ConfigError("the DETR criterion needs the network in train mode (net.train()): in eval mode "
                              "the network returns final detections, not encoder maps")
        bsz = int(feats[0].shape[0])
        labels, boxes = split_targets(batch, batch_size=bsz, device=feats[0].device)
        dtype = feats[0].dtype
        if dtype in (torch.float16, torch.bfloat16):
            with torch.autocast(feats[0].device.type, dtype):
                out = decoder(feats)
        else:
            out = decoder(feats)
        g = decoder.groups
        total, items = self.criterion(out, labels * g, boxes * g)
        return total * bsz, items


__all__ = ["LWDecoderConfig", "Projector", "MultiScaleProjector", "build_projector", "LWDecoder", "LWNetBase", "GroupTrainLoss", "refine_boxes",
           "ChannelsFirstLayerNorm"]
