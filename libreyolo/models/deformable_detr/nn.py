"""Deformable DETR network (Zhu et al., arXiv:2010.04159): the single-scale-query detector.

ResNet (frozen BatchNorm, stem and first stage frozen) -> strides 8/16/32 plus a stride-64 map
made by a 3x3 stride-2 convolution of the last stage, each projected to ``hidden`` with a
GroupNorm(32) -> a deformable encoder (multi-scale deformable self-attention over all levels, 4
points per level, FFN, post-norm) -> a decoder of 300 learned queries (``query_embed`` holds the
query position and the content vector), each layer: self-attention, multi-scale deformable
cross-attention around a reference point predicted from the query position, FFN. Plain variant
(``r50``): one class head and one box head shared by every decoder layer; ``r50refine``: the
paper's iterative bounding box refinement (per-layer heads, each layer's box is the next layer's
reference); ``r50twostage``: the paper's two-stage variant (with refinement): every encoder token
is scored as a proposal by an extra head pair and the 300 best become the queries. Both deformable attentions are :class:`~libreyolo.layers.msda.MSDeformAttn`,
so they go through the ``ms_deform_attn`` kernel slot (SPEC K-8).

Forward contract (mode dependent, as the other DETRs, SPEC G-9):

* eval: ``net(x)`` = ``net.decode(net.encode(x))`` -> ``(logits Tensor[B, Q, nc], boxes
  Tensor[B, Q, 4] xyxy network-input pixels)`` of the last decoder layer;
* train: ``net(x)`` = ``net.encode(x)``: the encoder output as one map per level
  (Tensor[B, hidden, h_l, w_l]); the criterion runs ``net.decoder`` eagerly and gets every
  layer's ``(logits [layers, B, Q, nc], boxes [layers, B, Q, 4] cxcywh)``, two-stage followed by
  the proposals' ``(logits [B, S, nc], boxes [B, S, 4])``.

Input: RGB in [0, 1], sides multiples of 32 (the stride-64 level is a padded stride-2 convolution, so
any such size works); the ImageNet
normalisation the reference expects happens inside the backbone module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from .._detr.common import MLP, inverse_sigmoid
from .._detr.deformable import (  # noqa: F401 - re-exported: this family's public names
    FFN,
    DecoderLayer,
    DeformableDETRConfig,
    DeformableEncoder,
    DeformableNetBase,
    EncoderLayer,
    FrozenResNet,
    sine_embedding,
)


class DeformableDecoder(nn.Module):
    """Learned queries, decoder layers and the class / box heads.

    Plain variant: one class head and one box head shared by every layer, every layer samples
    around the same 2-d reference point. ``box_refine`` (the paper's iterative bounding box
    refinement): one class head and one box head per layer; each layer's box (the box head's
    output added to the logit of its input reference, then a sigmoid) becomes the next layer's
    4-d reference box, detached.

    forward(maps): the encoder's maps -> eval: (logits Tensor[B, Q, nc], boxes Tensor[B, Q, 4]
    normalised cxcywh) of the last layer; train: every layer's, stacked (Tensor[layers, B, Q, nc],
    Tensor[layers, B, Q, 4]) for the auxiliary losses.
    """

    def __init__(self, *, nc: int, cfg: DeformableDETRConfig) -> None:
        super().__init__()
        d = cfg.hidden
        self.nc, self.hidden, self.num_queries = nc, d, cfg.num_queries
        self.two_stage = cfg.two_stage
        self.box_refine = cfg.box_refine or cfg.two_stage
        if self.two_stage:  # proposals from the encoder output, queries from the best of them
            self.enc_output, self.enc_output_norm = nn.Linear(d, d), nn.LayerNorm(d)
            self.pos_trans, self.pos_trans_norm = nn.Linear(2 * d, 2 * d), nn.LayerNorm(2 * d)
        else:
            self.query_embed = nn.Embedding(cfg.num_queries, 2 * d)  # (position | content) per query
            self.reference_points = nn.Linear(d, 2)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        if self.box_refine:  # one head pair per layer (two-stage: one more, for the proposals)
            n = cfg.dec_layers + int(self.two_stage)
            self.class_embed: nn.Module = nn.ModuleList(nn.Linear(d, nc) for _ in range(n))
            self.bbox_embed: nn.Module = nn.ModuleList(MLP(d, d, 4, num_layers=3) for _ in range(n))
        else:
            self.class_embed = nn.Linear(d, nc)
            self.bbox_embed = MLP(d, d, 4, num_layers=3)
        self.reset_parameters()

    def _heads(self, i: int) -> tuple[nn.Module, nn.Module]:
        if self.box_refine:
            return self.class_embed[i], self.bbox_embed[i]  # type: ignore[index]
        return self.class_embed, self.bbox_embed

    def reset_parameters(self) -> None:
        """As the reference: classifier bias at prior probability 0.01, the box heads' last layer
        zero, the first box head's size logits at -2 (initial boxes about 0.12 of the image)."""
        if not self.two_stage:
            nn.init.xavier_uniform_(self.reference_points.weight, gain=1.0)
            nn.init.zeros_(self.reference_points.bias)
        prior = -math.log((1 - 0.01) / 0.01)
        cls_heads = list(self.class_embed) if self.box_refine else [self.class_embed]
        box_heads = list(self.bbox_embed) if self.box_refine else [self.bbox_embed]
        for head in cls_heads:
            nn.init.constant_(head.bias, prior)
        for head in box_heads:
            nn.init.zeros_(head.layers[-1].weight)
            nn.init.zeros_(head.layers[-1].bias)
        with torch.no_grad():
            box_heads[0].layers[-1].bias[2:].fill_(-2.0)

    @staticmethod
    def proposals(shapes: Sequence[tuple[int, int]], *, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """Two-stage proposals, one per token: centre of its pixel, side ``0.05 * 2**level``.
        -> (logits Tensor[1, S, 4] (inverse sigmoid; ``inf`` where a coordinate is outside
        (0.01, 0.99)), valid Tensor[1, S, 1] bool). Python-int shapes only: no host sync."""
        out = []
        for level, (h, w) in enumerate(shapes):
            gy, gx = torch.meshgrid(torch.linspace(0, h - 1, h, dtype=dtype, device=device),
                                    torch.linspace(0, w - 1, w, dtype=dtype, device=device), indexing="ij")
            cx, cy = (gx.reshape(-1) + 0.5) / w, (gy.reshape(-1) + 0.5) / h
            side = torch.full_like(cx, 0.05 * 2.0**level)
            out.append(torch.stack((cx, cy, side, side), -1))
        props = torch.cat(out, 0)[None]
        valid = ((props > 0.01) & (props < 0.99)).all(-1, keepdim=True)
        logits = torch.log(props / (1 - props)).masked_fill(~valid, float("inf"))
        return logits, valid

    def proposal_embedding(self, coords: Tensor, *, temperature: float = 10000.0) -> Tensor:
        """Sine embedding of proposal box logits (B, Q, 4) -> (B, Q, 2 * hidden), in float32."""
        half = self.hidden // 2
        dim_t = torch.arange(half, dtype=torch.float32, device=coords.device)
        dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / half)
        p = coords.sigmoid().float() * (2 * math.pi)
        p = p[..., None] / dim_t  # (B, Q, 4, half)
        return torch.stack((p[..., 0::2].sin(), p[..., 1::2].cos()), dim=4).flatten(2).to(coords.dtype)

    def select_queries(self, memory: Tensor, shapes: Sequence[tuple[int, int]]
                       ) -> tuple[Tensor, Tensor, Tensor, tuple[Tensor, Tensor]]:
        """Two-stage: score every token as a proposal and keep the top ``num_queries`` (by the first
        class's logit, the reference's objectness) -> (pos, tgt, ref boxes, (proposal logits
        Tensor[B, S, nc], proposal boxes Tensor[B, S, 4])) for the encoder's loss."""
        b, s_len, d = memory.shape
        logits_p, valid = self.proposals(shapes, device=memory.device, dtype=memory.dtype)
        obj = self.enc_output_norm(self.enc_output(memory.masked_fill(~valid, 0.0)))
        enc_logits = self.class_embed[-1](obj)  # type: ignore[index]
        enc_coords = self.bbox_embed[-1](obj) + logits_p  # type: ignore[index]
        k = min(self.num_queries, s_len)
        idx = enc_logits[..., 0].topk(k, dim=1)[1]
        coords = enc_coords.gather(1, idx[..., None].expand(b, k, 4)).detach()
        pos, tgt = self.pos_trans_norm(self.pos_trans(self.proposal_embedding(coords))).split(d, dim=2)
        return pos, tgt, coords.sigmoid(), (enc_logits, enc_coords.sigmoid())

    def forward(self, feats: Sequence[Tensor]) -> tuple[Tensor, ...]:
        shapes = [(int(f.shape[-2]), int(f.shape[-1])) for f in feats]
        b = feats[0].shape[0]
        memory = torch.cat([f.flatten(2).transpose(1, 2) for f in feats], 1)
        enc_out = None
        if self.two_stage:
            pos, tgt, ref, enc_out = self.select_queries(memory, shapes)
        else:
            pos, tgt = self.query_embed.weight.split(self.hidden, dim=1)
            pos, tgt = pos[None].expand(b, -1, -1), tgt[None].expand(b, -1, -1)
            ref = self.reference_points(pos).sigmoid()  # (B, Q, 2); after a refining layer (B, Q, 4)
        last = len(self.layers) - 1
        outs = []
        for i, layer in enumerate(self.layers):
            ref_in = ref[:, :, None].expand(b, ref.shape[1], len(shapes), ref.shape[-1])  # valid ratio 1
            tgt = layer(tgt, pos, ref_in, memory, shapes)
            cls_head, box_head = self._heads(i)
            if not (self.training or self.box_refine or i == last):
                continue
            delta = box_head(tgt)
            ref_logit = inverse_sigmoid(ref)
            if ref.shape[-1] == 4:
                boxes = (delta + ref_logit).sigmoid()
            else:
                boxes = torch.cat((delta[..., :2] + ref_logit, delta[..., 2:]), -1).sigmoid()
            if self.training or i == last:
                outs.append((cls_head(tgt), boxes))
            if self.box_refine:
                ref = boxes.detach()
        if not self.training:
            return outs[-1]
        stacked = (torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs]))
        return stacked if enc_out is None else stacked + enc_out


class DeformableDETRNet(DeformableNetBase):
    """Backbone + deformable encoder + decoder (mode-dependent forward: module docs;
    ``encode`` / ``trunk`` / ``decode`` from :class:`DeformableNetBase`)."""

    def __init__(self, *, cfg: DeformableDETRConfig, nc: int) -> None:
        super().__init__()
        self.nc, self.cfg = nc, cfg
        self.backbone = FrozenResNet(depth=cfg.depth)
        self.encoder = DeformableEncoder(self.backbone.out_channels, cfg)
        self.decoder = DeformableDecoder(nc=nc, cfg=cfg)
        self.strides = tuple(8 * 2**i for i in range(cfg.num_levels))


VARIANTS: dict[str, DeformableDETRConfig] = {
    "r50": DeformableDETRConfig(),
    "r50refine": DeformableDETRConfig(box_refine=True),
    "r50twostage": DeformableDETRConfig(box_refine=True, two_stage=True),
}
"""Sizes: the paper's Deformable DETR with ResNet-50 (4 levels, 6 + 6 layers, 300 queries): plain,
with iterative bounding box refinement, and two-stage (with refinement, the paper's "++"); 40 M
parameters for each in the paper's Table 1."""
PAPER_PARAMS_M = {"r50": 40.0, "r50refine": 40.0, "r50twostage": 40.0}


def build_deformable_detr(*, size: str, nc: int) -> DeformableDETRNet:
    if size not in VARIANTS:
        raise ConfigError(f"deformable_detr has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return DeformableDETRNet(cfg=VARIANTS[size], nc=nc)
