"""D-FINE transformer decoder: RT-DETR query selection + FDR box heads + GO-LSD outputs.

Per the D-FINE paper / reference implementation, on top of the RT-DETR decoder
(:mod:`.detr_decoder`, whose anchors, denoising and query selection are reused):

* the deformable cross-attention samples the memory directly (no value / output projection)
  with per-level point counts, and its output is merged with a learned gate
  (``LayerNorm(g1 * x + g2 * attn)``, ``g = sigmoid(Linear(cat(x, attn)))``) instead of a
  residual sum;
* layer 0 predicts an initial box (``pre_bbox_head``, logit-space delta on the selected anchor);
  that box stays the reference of every layer's FDR head, which predicts ``4 * (reg_max + 1)``
  edge logits added to the previous layer's (:mod:`.fdr`); the next layer samples around the
  refined (detached) box;
* every layer's class logits get the LQE quality term from its distribution;
* training outputs keep every layer's edge logits and references (FGL / DDF losses, GO-LSD).

At inference the forward has no host sync and fixed shapes (top-k with ``k = min(Q, S)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...layers.msda import MSDeformAttn
from .common import MLP, PosAttention, activation, inverse_sigmoid
from .decoder import make_anchors
from .denoising import DenoisingGroup, build_denoising_group
from .fdr import LocalizationQuality, distance_to_box, distribution_integral, weighting_function


@dataclass(frozen=True, kw_only=True)
class FDRTrainOutput:
    """Training outputs of :class:`DFineDecoder` (boxes normalised cxcywh; L = decoder layers).

    logits (Tensor[L, B, Q, nc]), boxes (Tensor[L, B, Q, 4]), corners (Tensor[L, B, Q, 4 * (R + 1)]),
    refs (Tensor[L, B, Q, 4]: the initial box every FDR head refines); pre_logits (Tensor[B, Q, nc])
    and pre_boxes (Tensor[B, Q, 4]): layer 0's initial prediction; enc_logits / enc_boxes: the
    selected encoder tokens; ``dn_*``: the same for the denoising queries (None without ``dn``).
    """

    logits: Tensor
    boxes: Tensor
    corners: Tensor
    refs: Tensor
    pre_logits: Tensor
    pre_boxes: Tensor
    enc_logits: Tensor
    enc_boxes: Tensor
    dn_logits: Tensor | None
    dn_boxes: Tensor | None
    dn_corners: Tensor | None
    dn_refs: Tensor | None
    dn_pre_logits: Tensor | None
    dn_pre_boxes: Tensor | None
    dn: DenoisingGroup | None


class Gate(nn.Module):
    """``LayerNorm(g1 * x1 + g2 * x2)`` with ``(g1, g2) = sigmoid(Linear(cat(x1, x2)))``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gate = nn.Linear(2 * dim, 2 * dim)
        nn.init.constant_(self.gate.bias, 0.0)
        nn.init.xavier_uniform_(self.gate.weight)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        g1, g2 = torch.sigmoid(self.gate(torch.cat([x1, x2], -1))).chunk(2, -1)
        return self.norm(g1 * x1 + g2 * x2)


class FDRDecoderLayer(nn.Module):
    """Self-attention -> gated deformable cross-attention (no projections) -> FFN (``act``: ReLU
    in D-FINE, SiLU in DEIM's configs)."""

    def __init__(self, dim: int, *, num_heads: int, ffn: int, num_levels: int, num_points: int | Sequence[int],
                 dropout: float = 0.0, act: str = "relu") -> None:
        super().__init__()
        self._act = activation(act)
        self.self_attn = PosAttention(dim, num_heads=num_heads, dropout=dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attn = MSDeformAttn(embed_dim=dim, num_heads=num_heads, num_levels=num_levels,
                                       num_points=num_points, project=False)
        self.gateway = Gate(dim)
        self.linear1 = nn.Linear(dim, ffn)
        self.linear2 = nn.Linear(ffn, dim)
        self.norm3 = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        nn.init.xavier_uniform_(self.linear1.weight)
        nn.init.xavier_uniform_(self.linear2.weight)

    def forward(self, tgt: Tensor, ref: Tensor, memory: Tensor, shapes: Sequence[tuple[int, int]], pos: Tensor,
                attn_mask: Tensor | None = None) -> Tensor:
        """tgt (Tensor[B, Q, D]); ref (Tensor[B, Q, L, 4]); memory (Tensor[B, S, D]) -> Tensor[B, Q, D]."""
        tgt = self.norm1(tgt + self.dropout(self.self_attn(tgt, pos, attn_mask)))
        tgt = self.gateway(tgt, self.dropout(self.cross_attn(tgt + pos, ref, memory, shapes)))
        y = self.linear2(self.dropout(self._act(self.linear1(tgt))))
        return self.norm3((tgt + self.dropout(y)).clamp(min=-65504, max=65504))


class DFineDecoder(nn.Module):
    """Query selection + FDR decoder (see module docs).

    Args: nc, hidden, num_queries, feat_channels (maps, finest first; a 1x1 conv + BN projects
    a map only when its width differs from ``hidden``), num_points (per level), num_heads,
    num_layers, ffn, eval_idx, num_denoising / label_noise / box_noise, reg_max (32),
    reg_scale (4), up (0.5), act (the FFN and LQE activation) and mlp_act (query-position and box
    heads): ``"relu"`` in D-FINE, ``"silu"`` in DEIM / RT-DETRv4 (``activation`` / ``mlp_act`` of
    their ``DFINETransformer`` configs).

    forward(feats, dn=None). Eval: (logits Tensor[B, Q, nc], boxes Tensor[B, Q, 4] sigmoid-space
    cxcywh), Q = min(num_queries, S). Train: :class:`FDRTrainOutput`.
    """

    def __init__(self, *, nc: int, hidden: int = 256, num_queries: int = 300,
                 feat_channels: Sequence[int] = (256, 256, 256), num_points: int | Sequence[int] = (3, 6, 3),
                 num_heads: int = 8, num_layers: int = 6, ffn: int = 1024, dropout: float = 0.0,
                 eval_idx: int = -1, num_denoising: int = 100, label_noise: float = 0.5, box_noise: float = 1.0,
                 reg_max: int = 32, reg_scale: float = 4.0, up: float = 0.5, anchor_eps: float = 1e-2,
                 act: str = "relu", mlp_act: str = "relu") -> None:
        super().__init__()
        self.nc, self.hidden, self.num_queries = nc, hidden, num_queries
        self.num_levels = len(feat_channels)
        self.num_layers = num_layers
        self.eval_idx = eval_idx % num_layers
        self.num_denoising, self.label_noise, self.box_noise = num_denoising, label_noise, box_noise
        self.reg_max, self.reg_scale, self.up = reg_max, float(reg_scale), float(up)
        self.anchor_eps = anchor_eps
        self.register_buffer("project", weighting_function(reg_max, up, reg_scale), persistent=False)
        self.input_proj = nn.ModuleList(
            nn.Identity() if c == hidden else nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False), nn.BatchNorm2d(hidden))
            for c in feat_channels)
        self.layers = nn.ModuleList(
            FDRDecoderLayer(hidden, num_heads=num_heads, ffn=ffn, num_levels=self.num_levels,
                            num_points=num_points, dropout=dropout, act=act) for _ in range(num_layers))
        self.lqe_layers = nn.ModuleList(LocalizationQuality(reg_max=reg_max, act=act) for _ in range(num_layers))
        self.denoising_class_embed = (nn.Embedding(nc + 1, hidden, padding_idx=nc) if num_denoising > 0 else None)
        self.query_pos_head = MLP(4, 2 * hidden, hidden, num_layers=2, act=mlp_act)
        self.enc_output = nn.Sequential(nn.Linear(hidden, hidden), nn.LayerNorm(hidden))
        self.enc_score_head = nn.Linear(hidden, nc)
        self.enc_bbox_head = MLP(hidden, hidden, 4, num_layers=3, act=mlp_act)
        self.pre_bbox_head = MLP(hidden, hidden, 4, num_layers=3, act=mlp_act)
        self.dec_score_head = nn.ModuleList(nn.Linear(hidden, nc) for _ in range(num_layers))
        self.dec_bbox_head = nn.ModuleList(MLP(hidden, hidden, 4 * (reg_max + 1), num_layers=3, act=mlp_act)
                                           for _ in range(num_layers))
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        prior = -math.log((1 - 0.01) / 0.01)
        for head in [self.enc_score_head, *self.dec_score_head]:
            nn.init.constant_(head.bias, prior)
        for mlp in [self.enc_bbox_head, self.pre_bbox_head, *self.dec_bbox_head]:
            nn.init.zeros_(mlp.layers[-1].weight)
            nn.init.zeros_(mlp.layers[-1].bias)
        nn.init.xavier_uniform_(self.enc_output[0].weight)
        for layer in self.query_pos_head.layers:
            nn.init.xavier_uniform_(layer.weight)
        for proj in self.input_proj:
            if isinstance(proj, nn.Sequential):
                nn.init.xavier_uniform_(proj[0].weight)
        if self.denoising_class_embed is not None:
            with torch.no_grad():
                nn.init.normal_(self.denoising_class_embed.weight[:-1])

    def make_denoising(self, labels: list[Tensor], boxes: list[Tensor], *, num_queries: int,
                       max_gt_cap: int | None = None) -> DenoisingGroup | None:
        """Denoising queries (see :meth:`DETRDecoder.make_denoising <libreyolo.models._detr.decoder.DETRDecoder.make_denoising>`)."""
        if self.denoising_class_embed is None:
            return None
        return build_denoising_group(labels, boxes, nc=self.nc, num_queries=num_queries,
                                     class_embed=self.denoising_class_embed, num_denoising=self.num_denoising,
                                     label_noise=self.label_noise, box_noise=self.box_noise, max_gt_cap=max_gt_cap)

    def num_selected(self, feats: Sequence[Tensor]) -> int:
        """Q = min(num_queries, S) for these maps."""
        return min(self.num_queries, sum(int(f.shape[-2]) * int(f.shape[-1]) for f in feats))

    def forward(self, feats: Sequence[Tensor], dn: DenoisingGroup | None = None) -> tuple[Tensor, Tensor] | FDRTrainOutput:
        proj = [p(f) for p, f in zip(self.input_proj, feats, strict=True)]
        shapes = [(int(f.shape[-2]), int(f.shape[-1])) for f in proj]
        memory = torch.cat([f.flatten(2).transpose(1, 2) for f in proj], 1)  # (B, S, D)
        b, s, d = memory.shape
        k = min(self.num_queries, s)
        anchors, valid = make_anchors(shapes, eps=self.anchor_eps, device=memory.device, dtype=memory.dtype)
        out_memory = self.enc_output(valid.to(memory.dtype) * memory)
        enc_logits = self.enc_score_head(out_memory)
        enc_coord_unact = self.enc_bbox_head(out_memory) + anchors
        topk = enc_logits.max(-1).values.topk(k, dim=1).indices
        ref_unact = enc_coord_unact.gather(1, topk[..., None].expand(b, k, 4))
        target = out_memory.gather(1, topk[..., None].expand(b, k, d)).detach()
        attn_mask, n_dn = None, 0
        if dn is not None:
            n_dn = dn.num_queries
            target = torch.cat([dn.query.to(target.dtype), target], 1)
            ref_unact = torch.cat([dn.ref_unact.to(ref_unact.dtype), ref_unact], 1)
            attn_mask = dn.attn_mask
        res = self._decode(target, ref_unact.detach(), memory, shapes, attn_mask)
        if not self.training:
            return res[0][-1], res[1][-1]
        logits, boxes, corners, refs, pre_boxes, pre_logits = res
        lg, bx, cn, rf = (torch.stack(t) for t in (logits, boxes, corners, refs))
        enc_topk_logits = enc_logits.gather(1, topk[..., None].expand(b, k, self.nc))
        enc_topk_boxes = enc_coord_unact.gather(1, topk[..., None].expand(b, k, 4)).sigmoid()
        has_dn = dn is not None
        return FDRTrainOutput(
            logits=lg[:, :, n_dn:], boxes=bx[:, :, n_dn:], corners=cn[:, :, n_dn:], refs=rf[:, :, n_dn:],
            pre_logits=pre_logits[:, n_dn:], pre_boxes=pre_boxes[:, n_dn:],
            enc_logits=enc_topk_logits, enc_boxes=enc_topk_boxes,
            dn_logits=lg[:, :, :n_dn] if has_dn else None, dn_boxes=bx[:, :, :n_dn] if has_dn else None,
            dn_corners=cn[:, :, :n_dn] if has_dn else None, dn_refs=rf[:, :, :n_dn] if has_dn else None,
            dn_pre_logits=pre_logits[:, :n_dn] if has_dn else None,
            dn_pre_boxes=pre_boxes[:, :n_dn] if has_dn else None, dn=dn)

    def _decode(self, tgt: Tensor, ref_unact: Tensor, memory: Tensor, shapes: list[tuple[int, int]],
                attn_mask: Tensor | None) -> tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor], Tensor, Tensor]:
        """Layers with FDR. Returns per kept layer (logits, boxes, corners, refs) lists, then
        layer 0's (pre_boxes, pre_logits). Eval keeps only ``eval_idx`` and stops there."""
        out_logits: list[Tensor] = []
        out_boxes: list[Tensor] = []
        out_corners: list[Tensor] = []
        out_refs: list[Tensor] = []
        project = self.project.to(memory.dtype)
        ref_detached = ref_unact.sigmoid()
        out_detached: Tensor | float = 0.0
        prev_corners: Tensor | float = 0.0
        pre_boxes = pre_logits = ref_initial = ref_detached
        for i, layer in enumerate(self.layers):
            pos = self.query_pos_head(ref_detached).clamp(min=-10, max=10)
            ref_in = ref_detached[:, :, None].expand(-1, -1, self.num_levels, -1)  # (B, Q, L, 4)
            tgt = layer(tgt, ref_in, memory, shapes, pos, attn_mask)
            if i == 0:
                pre_boxes = (self.pre_bbox_head(tgt) + inverse_sigmoid(ref_detached)).sigmoid()
                pre_logits = self.dec_score_head[0](tgt)
                ref_initial = pre_boxes.detach()
            corners = self.dec_bbox_head[i](tgt + out_detached) + prev_corners
            box = distance_to_box(ref_initial, distribution_integral(corners, project), self.reg_scale)
            if self.training or i == self.eval_idx:
                out_logits.append(self.lqe_layers[i](self.dec_score_head[i](tgt), corners))
                out_boxes.append(box)
                out_corners.append(corners)
                out_refs.append(ref_initial)
                if not self.training:
                    break
            prev_corners = corners
            ref_detached = box.detach()
            out_detached = tgt.detach()
        return out_logits, out_boxes, out_corners, out_refs, pre_boxes, pre_logits
