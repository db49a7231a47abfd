"""RT-DETR transformer decoder: query selection + deformable decoder with box refinement.

Per the RT-DETR paper / reference implementation:

* the encoder maps are projected (1x1 conv + BN) and flattened into one memory of S tokens;
* query selection: every memory token gets a class score (``enc_score_head``) and a box
  (``enc_bbox_head`` + a per-level anchor of size ``0.05 * 2**level``); the top-``num_queries``
  tokens by best class score become the initial reference boxes and (detached) content queries;
* each decoder layer: self-attention (positional q/k from an MLP of the reference box), then
  multi-scale deformable cross-attention through the shared :class:`~libreyolo.layers.msda.MSDeformAttn`
  (so the ``ms_deform_attn`` kernel slot is consulted), then an FFN; post-norm;
* iterative box refinement: each layer's box head predicts a delta in logit space on top of
  the previous (detached) reference box;
* in training, denoising queries (:mod:`.denoising`) are prepended to the matching queries.

At inference ``forward`` has no host sync and no data-dependent shape (top-k with the fixed
``k = min(num_queries, S)``), so it is capturable in a CUDA graph.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.msda import MSDeformAttn
from .common import MLP, PosAttention, inverse_sigmoid
from .denoising import DenoisingGroup, build_denoising_group


@dataclass(frozen=True, kw_only=True)
class DecoderTrainOutput:
    """Training outputs of :class:`DETRDecoder` (all float, boxes normalised cxcywh).

    logits (Tensor[L, B, Q, nc]) and boxes (Tensor[L, B, Q, 4]): every decoder layer, last = final.
    enc_logits (Tensor[B, Q, nc]), enc_boxes (Tensor[B, Q, 4]): the selected encoder tokens.
    dn_logits / dn_boxes (Tensor[L, B, T, ...] or None): the denoising queries, with ``dn``.
    """

    logits: Tensor
    boxes: Tensor
    enc_logits: Tensor
    enc_boxes: Tensor
    dn_logits: Tensor | None
    dn_boxes: Tensor | None
    dn: DenoisingGroup | None


class DecoderLayer(nn.Module):
    """Self-attention -> deformable cross-attention -> FFN, each with a residual and LayerNorm."""

    def __init__(self, dim: int, *, num_heads: int, ffn: int, num_levels: int,
                 num_points: int | Sequence[int], method: Literal["default", "discrete"] = "default",
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.self_attn = PosAttention(dim, num_heads=num_heads, dropout=dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attn = MSDeformAttn(embed_dim=dim, num_heads=num_heads, num_levels=num_levels,
                                       num_points=num_points, method=method)
        self.norm2 = nn.LayerNorm(dim)
        self.linear1 = nn.Linear(dim, ffn)
        self.linear2 = nn.Linear(ffn, dim)
        self.norm3 = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tgt: Tensor, ref: Tensor, memory: Tensor, shapes: Sequence[tuple[int, int]],
                pos: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """tgt (Tensor[B, Q, D]); ref (Tensor[B, Q, L, 4]); memory (Tensor[B, S, D]); pos
        (Tensor[B, Q, D]); attn_mask (Tensor[Q, Q] bool) -> Tensor[B, Q, D]."""
        tgt = self.norm1(tgt + self.dropout(self.self_attn(tgt, pos, attn_mask)))
        tgt = self.norm2(tgt + self.dropout(self.cross_attn(tgt + pos, ref, memory, shapes)))
        y = self.linear2(self.dropout(F.relu(self.linear1(tgt))))
        return self.norm3(tgt + self.dropout(y))


def make_anchors(shapes: Sequence[tuple[int, int]], *, grid_size: float = 0.05, eps: float = 1e-2,
                 device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Per-token anchor boxes in logit space and their validity.

    Returns anchors (Tensor[1, S, 4], inverse-sigmoid cxcywh; +inf where invalid) and valid
    (Tensor[1, S, 1] bool: every coordinate inside (eps, 1 - eps)). Built from Python ints.
    """
    parts = []
    for lvl, (h, w) in enumerate(shapes):
        gy, gx = torch.meshgrid(torch.arange(h, device=device, dtype=torch.float32),
                                torch.arange(w, device=device, dtype=torch.float32), indexing="ij")
        xy = torch.stack([(gx + 0.5) / w, (gy + 0.5) / h], -1).reshape(h * w, 2)
        wh = torch.full_like(xy, grid_size * 2.0**lvl)
        parts.append(torch.cat([xy, wh], -1))
    anchors = torch.cat(parts, 0)[None]  # (1, S, 4)
    valid = ((anchors > eps) & (anchors < 1 - eps)).all(-1, keepdim=True)
    anchors = torch.log(anchors / (1 - anchors))
    anchors = anchors.masked_fill(~valid, float("inf"))
    return anchors.to(dtype), valid


class DETRDecoder(nn.Module):
    """Query selection + deformable decoder (see module docs).

    Args:
        nc: classes. hidden: width (256). num_queries: 300.
        feat_channels: channels of the input maps (finest first); num_levels = their count.
        num_points: sampling points per level (int, or one per level: RT-DETRv2's selective
            multi-scale sampling). method: ``"default"`` bilinear or ``"discrete"`` sampling.
        num_layers: decoder layers. eval_idx: the layer whose output is used at inference.
        num_denoising, label_noise, box_noise: denoising settings (training only).

    forward(feats, dn=None): feats (list of Tensor[B, C_i, H_i, W_i]). Eval mode: returns
    (logits Tensor[B, Q, nc], boxes Tensor[B, Q, 4] sigmoid cxcywh), Q = min(num_queries, S).
    Train mode: :class:`DecoderTrainOutput` (denoising queries come from ``dn``, built with
    :meth:`make_denoising`).
    """

    def __init__(self, *, nc: int, hidden: int = 256, num_queries: int = 300,
                 feat_channels: Sequence[int] = (256, 256, 256), num_points: int | Sequence[int] = 4,
                 method: Literal["default", "discrete"] = "default", num_heads: int = 8,
                 num_layers: int = 6, ffn: int = 1024, dropout: float = 0.0, eval_idx: int = -1,
                 num_denoising: int = 100, label_noise: float = 0.5, box_noise: float = 1.0,
                 anchor_eps: float = 1e-2) -> None:
        super().__init__()
        self.nc, self.hidden, self.num_queries = nc, hidden, num_queries
        self.num_levels = len(feat_channels)
        self.num_layers = num_layers
        self.eval_idx = eval_idx % num_layers
        self.num_denoising, self.label_noise, self.box_noise = num_denoising, label_noise, box_noise
        self.anchor_eps = anchor_eps
        self.method = method
        self.input_proj = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False), nn.BatchNorm2d(hidden)) for c in feat_channels
        )
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, num_heads=num_heads, ffn=ffn, num_levels=self.num_levels,
                         num_points=num_points, method=method, dropout=dropout)
            for _ in range(num_layers)
        )
        self.denoising_class_embed = (nn.Embedding(nc + 1, hidden, padding_idx=nc)
                                      if num_denoising > 0 else None)
        self.query_pos_head = MLP(4, 2 * hidden, hidden, num_layers=2)
        self.enc_output = nn.Sequential(nn.Linear(hidden, hidden), nn.LayerNorm(hidden))
        self.enc_score_head = nn.Linear(hidden, nc)
        self.enc_bbox_head = MLP(hidden, hidden, 4, num_layers=3)
        self.dec_score_head = nn.ModuleList(nn.Linear(hidden, nc) for _ in range(num_layers))
        self.dec_bbox_head = nn.ModuleList(MLP(hidden, hidden, 4, num_layers=3) for _ in range(num_layers))
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        prior = -math.log((1 - 0.01) / 0.01)  # class prior probability 0.01
        for head in [self.enc_score_head, *self.dec_score_head]:
            nn.init.constant_(head.bias, prior)
        for mlp in [self.enc_bbox_head, *self.dec_bbox_head]:
            nn.init.zeros_(mlp.layers[-1].weight)
            nn.init.zeros_(mlp.layers[-1].bias)
        nn.init.xavier_uniform_(self.enc_output[0].weight)
        for layer in self.query_pos_head.layers:
            nn.init.xavier_uniform_(layer.weight)
        for proj in self.input_proj:
            nn.init.xavier_uniform_(proj[0].weight)
        if self.denoising_class_embed is not None:
            with torch.no_grad():
                nn.init.normal_(self.denoising_class_embed.weight[:-1])
        if self.method == "discrete":  # as the reference: offsets are not learned with discrete sampling
            for layer in self.layers:
                layer.cross_attn.sampling_offsets.requires_grad_(False)

    # ------------------------------------------------------------------ training helpers
    def make_denoising(self, labels: list[Tensor], boxes: list[Tensor], *, num_queries: int,
                       max_gt_cap: int | None = None) -> DenoisingGroup | None:
        """Denoising queries for per-image ``labels`` (Tensor[n_i]) / ``boxes`` (Tensor[n_i, 4]
        normalised cxcywh); None when denoising is off or the batch has no box."""
        if self.denoising_class_embed is None:
            return None
        return build_denoising_group(labels, boxes, nc=self.nc, num_queries=num_queries,
                                     class_embed=self.denoising_class_embed, num_denoising=self.num_denoising,
                                     label_noise=self.label_noise, box_noise=self.box_noise,
                                     max_gt_cap=max_gt_cap)

    def num_selected(self, feats: Sequence[Tensor]) -> int:
        """Q = min(num_queries, S) for these maps (S = total tokens)."""
        return min(self.num_queries, sum(int(f.shape[-2]) * int(f.shape[-1]) for f in feats))

    # ------------------------------------------------------------------ forward
    def forward(self, feats: Sequence[Tensor], dn: DenoisingGroup | None = None) -> tuple[Tensor, Tensor] | DecoderTrainOutput:
        proj = [p(f) for p, f in zip(self.input_proj, feats, strict=True)]
        shapes = [(int(f.shape[-2]), int(f.shape[-1])) for f in proj]
        memory = torch.cat([f.flatten(2).transpose(1, 2) for f in proj], 1)  # (B, S, D)
        b, s, d = memory.shape
        k = min(self.num_queries, s)

        anchors, valid = make_anchors(shapes, eps=self.anchor_eps, device=memory.device, dtype=memory.dtype)
        out_memory = self.enc_output(valid.to(memory.dtype) * memory)  # (B, S, D)
        enc_logits = self.enc_score_head(out_memory)  # (B, S, nc)
        enc_coord_unact = self.enc_bbox_head(out_memory) + anchors  # (B, S, 4)
        topk = enc_logits.max(-1).values.topk(k, dim=1).indices  # (B, k)
        ref_unact = enc_coord_unact.gather(1, topk[..., None].expand(b, k, 4))
        target = out_memory.gather(1, topk[..., None].expand(b, k, d)).detach()
        attn_mask = None
        n_dn = 0
        if dn is not None:
            n_dn = dn.num_queries
            target = torch.cat([dn.query.to(target.dtype), target], 1)
            ref_unact = torch.cat([dn.ref_unact.to(ref_unact.dtype), ref_unact], 1)
            attn_mask = dn.attn_mask
        logits, boxes = self._decode(target, ref_unact.detach(), memory, shapes, attn_mask)
        if not self.training:
            return logits[-1], boxes[-1]
        enc_topk_logits = enc_logits.gather(1, topk[..., None].expand(b, k, self.nc))
        enc_topk_boxes = enc_coord_unact.gather(1, topk[..., None].expand(b, k, 4)).sigmoid()
        lg, bx = torch.stack(logits), torch.stack(boxes)  # (L, B, n_dn + k, ...)
        return DecoderTrainOutput(
            logits=lg[:, :, n_dn:], boxes=bx[:, :, n_dn:], enc_logits=enc_topk_logits, enc_boxes=enc_topk_boxes,
            dn_logits=lg[:, :, :n_dn] if dn is not None else None,
            dn_boxes=bx[:, :, :n_dn] if dn is not None else None, dn=dn,
        )

    def _decode(self, tgt: Tensor, ref_unact: Tensor, memory: Tensor, shapes: list[tuple[int, int]],
                attn_mask: Tensor | None) -> tuple[list[Tensor], list[Tensor]]:
        """Run the layers with iterative refinement. In training every layer's output is kept
        (layer i > 0 refines the *undetached* previous box, as the reference); in eval the loop
        stops at ``eval_idx``."""
        out_logits, out_boxes = [], []
        ref_detached = ref_unact.sigmoid()
        ref = ref_detached
        for i, layer in enumerate(self.layers):
            pos = self.query_pos_head(ref_detached)
            ref_in = ref_detached[:, :, None].expand(-1, -1, self.num_levels, -1)  # (B, Q, L, 4)
            tgt = layer(tgt, ref_in, memory, shapes, pos, attn_mask)
            delta = self.dec_bbox_head[i](tgt)
            inter = (delta + inverse_sigmoid(ref_detached)).sigmoid()
            if self.training:
                out_logits.append(self.dec_score_head[i](tgt))
                out_boxes.append(inter if i == 0 else (delta + inverse_sigmoid(ref)).sigmoid())
            elif i == self.eval_idx:
                out_logits.append(self.dec_score_head[i](tgt))
                out_boxes.append(inter)
                break
            ref = inter
            ref_detached = inter.detach() if self.training else inter
        return out_logits, out_boxes
