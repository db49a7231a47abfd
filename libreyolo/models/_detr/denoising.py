"""Contrastive denoising (CDN) query groups for DETR training (DINO; RT-DETR's settings).

Each ground-truth box yields a positive query (label flipped with probability
``label_noise / 2``, box jittered by less than half its size, times ``box_noise``) and a negative
query (jittered by between one and two half-sizes), repeated in ``groups`` groups; the decoder
learns to reconstruct positives and reject negatives. An attention mask keeps the matching
queries from seeing any denoising query and each group from seeing the others.

Group count: ``groups = max(num_denoising // max_gt, 1)``, as the reference. Memory cap (a
documented deviation): with one group the reference makes ``2 * max_gt`` queries, so a batch
whose busiest image has thousands of boxes makes a decoder self-attention of that many tokens.
Here at most :data:`MAX_DN_GT` (default: ``num_denoising``) boxes per image get denoising
queries (the first ones; their order is the loader's), so the denoising part never has more
than ``2 * max(num_denoising, MAX_DN_GT)`` tokens. Matching is not capped.

Runs eagerly (reads box counts on the host); never inside a CUDA graph.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...ops.boxes import xywh_to_xyxy, xyxy_to_xywh
from .common import inverse_sigmoid

logger = logging.getLogger(__name__)

MAX_DN_GT: int | None = None  # None: cap at num_denoising
_warned_cap = False


@dataclass(frozen=True, kw_only=True)
class DenoisingGroup:
    """Denoising queries for one batch.

    query (Tensor[B, T, D]): label embeddings of the noised classes (T = 2 * max_gt * groups).
    ref_unact (Tensor[B, T, 4]): inverse-sigmoid of the noised cxcywh boxes.
    attn_mask (Tensor[T + Q, T + Q], bool): True = may not attend.
    groups: number of groups. max_gt: boxes per group half (after the cap).
    positive_idx: per image, Tensor[n_i * groups] int64 query indices of the positives.
    gt_idx: per image, Tensor[n_i * groups] int64 index of the GT each positive reconstructs.
    """

    query: Tensor
    ref_unact: Tensor
    attn_mask: Tensor
    groups: int
    max_gt: int
    positive_idx: list[Tensor]
    gt_idx: list[Tensor]

    @property
    def num_queries(self) -> int:
        return int(self.query.shape[1])


def build_denoising_group(
    labels: list[Tensor], boxes: list[Tensor], *, nc: int, num_queries: int,
    class_embed: nn.Embedding, num_denoising: int = 100, label_noise: float = 0.5,
    box_noise: float = 1.0, max_gt_cap: int | None = None,
) -> DenoisingGroup | None:
    """Build the CDN queries for a batch, or None when there is nothing to denoise.

    labels: per image Tensor[n_i] int64; boxes: per image Tensor[n_i, 4] normalised cxcywh.
    ``num_queries`` is the number of matching queries that follow (for the mask). Returns None
    when ``num_denoising <= 0`` or no image has a box (images without boxes still train: they
    simply have no denoising queries).
    """
    global _warned_cap
    if num_denoising <= 0:
        return None
    cap = max_gt_cap or MAX_DN_GT or num_denoising
    counts = [int(t.shape[0]) for t in labels]
    max_gt = max(counts, default=0)
    if max_gt == 0:
        return None
    if max_gt > cap:
        if not _warned_cap:
            logger.warning("denoising: an image has %d boxes; only the first %d per image get denoising "
                           "queries (memory cap)", max_gt, cap)
            _warned_cap = True
        counts = [min(n, cap) for n in counts]
        max_gt = cap
    device = class_embed.weight.device
    groups = max(num_denoising // max_gt, 1)
    bs = len(counts)
    cls = torch.full((bs, max_gt), nc, dtype=torch.int64, device=device)
    box = torch.zeros((bs, max_gt, 4), device=device)
    pad = torch.zeros((bs, max_gt), dtype=torch.bool, device=device)
    for i, n in enumerate(counts):
        if n:
            cls[i, :n] = labels[i][:n].to(device)
            box[i, :n] = boxes[i][:n].to(device=device, dtype=torch.float32)
            pad[i, :n] = True
    # layout per group: [positives (max_gt) | negatives (max_gt)]
    cls = cls.repeat(1, 2 * groups)
    box = box.repeat(1, 2 * groups, 1)
    pad = pad.repeat(1, 2 * groups)
    neg = torch.zeros((bs, 2 * max_gt, 1), device=device)
    neg[:, max_gt:] = 1.0
    neg = neg.repeat(1, groups, 1)
    total = 2 * max_gt * groups
    positive_idx, gt_idx = [], []
    pos_slots = torch.arange(max_gt, device=device)
    for n in counts:
        starts = torch.arange(groups, device=device) * 2 * max_gt
        positive_idx.append((starts[:, None] + pos_slots[None, :n]).flatten())
        gt_idx.append(torch.arange(n, device=device).repeat(groups))
    if label_noise > 0:
        flip = torch.rand(cls.shape, device=device) < label_noise * 0.5
        new = torch.randint_like(cls, 0, nc)
        cls = torch.where(flip & pad, new, cls)
    if box_noise > 0:
        xyxy = xywh_to_xyxy(box)
        diff = (box[..., 2:] * 0.5).repeat(1, 1, 2) * box_noise
        sign = torch.randint_like(box, 0, 2) * 2.0 - 1.0
        part = torch.rand_like(box)
        part = (part + 1.0) * neg + part * (1.0 - neg)
        xyxy = (xyxy + part * sign * diff).clamp(0.0, 1.0)
        box = xyxy_to_xywh(xyxy)
    ref_unact = inverse_sigmoid(box)
    query = class_embed(cls)  # padding slots use the padding index nc (a zero, untrained row)
    size = total + num_queries
    mask = torch.zeros((size, size), dtype=torch.bool, device=device)
    mask[total:, :total] = True  # matching queries never see denoising queries
    step = 2 * max_gt
    for g in range(groups):
        mask[g * step:(g + 1) * step, :g * step] = True
        mask[g * step:(g + 1) * step, (g + 1) * step:total] = True
    return DenoisingGroup(query=query, ref_unact=ref_unact, attn_mask=mask, groups=groups, max_gt=max_gt,
                          positive_idx=positive_idx, gt_idx=gt_idx)
