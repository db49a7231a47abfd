"""D-FINE training criterion: VFL + L1 + GIoU + FGL + DDF over every output group (GO-LSD).

Per the D-FINE paper / reference criterion (weights vfl 1, l1 5, giou 2, fgl 0.15, ddf 1.5;
VFL alpha 0.75, gamma 2; matcher costs class 2, L1 5, GIoU 2 with focal alpha 0.25, gamma 2):

* Hungarian matching per output: the last decoder layer, every earlier layer, layer 0's initial
  prediction ("pre") and the selected encoder tokens. The **union** matching (GO-LSD) gives
  every query that any of these matched its most frequent ground truth; box (L1, GIoU) and
  localisation (FGL, DDF) losses use the union, classification uses each output's own matching.
* Classification: VFL (IoU-valued BCE target, ``alpha * p^gamma`` on negatives) or, for DEIM,
  MAL (:func:`libreyolo.models._detr.deim_losses.mal_loss`), selected by ``DFineLossConfig.cls``.
* FGL (fine-grained localisation): each matched edge distribution against its ground-truth
  offset, cross-entropy on the two bins around it weighted by the interpolation weights, and
  by the matched IoU.
* DDF (decoupled distillation focal): every layer but the last distils the last layer's
  distribution (KL at temperature 5, ``T^2`` scaled), weighted per query by the teacher's
  confidence (its matched IoU for matched queries); matched and unmatched queries are averaged
  separately and mixed by ``sqrt(count * 8 / B)`` weights, as the reference.
* Denoising groups: every layer and the pre output with the fixed denoising matching, box
  terms normalised by ``num_boxes * groups``.

Normalisation by the batch's box count (union count for box/local terms), at least 1.
Eager by design (matching runs on the host).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from ...ops.boxes import bbox_giou, xywh_to_xyxy
from .dfine_decoder import FDRTrainOutput
from .fdr import box_to_distance
from .hungarian import HungarianMatcher
from .losses import DETRTrainLoss, Pairs


@dataclass(frozen=True, kw_only=True)
class DFineLossConfig:
    """Weights and settings (D-FINE reference defaults; DEIM: ``cls="mal", gamma=1.5``)."""

    cls: Literal["vfl", "mal"] = "vfl"
    w_cls: float = 1.0
    l1: float = 5.0
    giou: float = 2.0
    fgl: float = 0.15
    ddf: float = 1.5
    alpha: float = 0.75
    gamma: float = 2.0
    mal_alpha: float | None = None
    ddf_temperature: float = 5.0
    cost_class: float = 2.0
    cost_bbox: float = 5.0
    cost_giou: float = 2.0
    matcher_alpha: float = 0.25
    matcher_gamma: float = 2.0


def union_matching(matchings: Sequence[Pairs]) -> Pairs:
    """GO-LSD union: per image, every query matched in any of ``matchings`` gets the ground truth
    it was matched to most often (ties: the smaller ground-truth index). -> per image (pred_idx,
    gt_idx) int64, queries ascending."""
    out: Pairs = []
    for per_image in zip(*matchings, strict=True):
        q = torch.cat([p for p, _ in per_image])
        g = torch.cat([t for _, t in per_image])
        device = q.device
        counts: dict[tuple[int, int], int] = {}
        for a, b in zip(q.tolist(), g.tolist(), strict=True):
            counts[(a, b)] = counts.get((a, b), 0) + 1
        best: dict[int, tuple[int, int]] = {}
        for (a, b), c in counts.items():
            cur = best.get(a)
            if cur is None or c > cur[0] or (c == cur[0] and b < cur[1]):
                best[a] = (c, b)
        rows = sorted(best)
        out.append((torch.tensor(rows, dtype=torch.int64, device=device),
                    torch.tensor([best[r][1] for r in rows], dtype=torch.int64, device=device)))
    return out


def _gather(pairs: Pairs, labels: list[Tensor], boxes: list[Tensor], device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    b_idx = torch.cat([torch.full_like(p, i) for i, (p, _) in enumerate(pairs)]).to(device)
    src = torch.cat([p for p, _ in pairs]).to(device)
    lab = torch.cat([labels[i].to(device)[g] for i, (_, g) in enumerate(pairs)])
    box = torch.cat([boxes[i].to(device=device, dtype=torch.float32)[g] for i, (_, g) in enumerate(pairs)])
    return b_idx, src, lab, box


@dataclass(kw_only=True)
class DFineCriterion:
    """``criterion(out, labels, boxes) -> (total, items)``: out (:class:`FDRTrainOutput`); per image
    labels (Tensor[n_i] int64) and boxes (Tensor[n_i, 4] normalised cxcywh). items (Tensor[5],
    detached): weighted cls, l1, giou, fgl, ddf summed over groups; total = items.sum() with grad."""

    nc: int
    reg_max: int = 32
    reg_scale: float = 4.0
    up: float = 0.5
    cfg: DFineLossConfig = field(default_factory=DFineLossConfig)

    def __post_init__(self) -> None:
        c = self.cfg
        self.matcher = HungarianMatcher(cost_class=c.cost_class, cost_bbox=c.cost_bbox, cost_giou=c.cost_giou,
                                        alpha=c.matcher_alpha, gamma=c.matcher_gamma)

    # ------------------------------------------------------------------ terms
    def cls_loss(self, logits: Tensor, pred_boxes: Tensor, labels: list[Tensor], boxes: list[Tensor],
                 pairs: Pairs, num_boxes: float) -> Tensor:
        """VFL or MAL of one output: logits (Tensor[B, Q, nc]), pred_boxes (Tensor[B, Q, 4])."""
        from .deim_losses import mal_loss

        c = self.cfg
        logits = logits.float()
        b_idx, src, lab, tgt = _gather(pairs, labels, boxes, logits.device)
        onehot = torch.zeros_like(logits)
        iou_map = torch.zeros_like(logits)
        if src.numel():
            iou, _ = bbox_giou(xywh_to_xyxy(pred_boxes.float()[b_idx, src]), xywh_to_xyxy(tgt))
            onehot[b_idx, src, lab] = 1.0
            iou_map[b_idx, src, lab] = iou.detach().clamp(min=0)
        if c.cls == "mal":
            return mal_loss(logits, onehot, iou_map, gamma=c.gamma, alpha=c.mal_alpha) / num_boxes
        p = logits.sigmoid().detach()
        weight = c.alpha * p.pow(c.gamma) * (1.0 - onehot) + iou_map
        return F.binary_cross_entropy_with_logits(logits, iou_map, weight=weight, reduction="sum") / num_boxes

    @staticmethod
    def box_loss(pred_boxes: Tensor, labels: list[Tensor], boxes: list[Tensor], pairs: Pairs,
                 num_boxes: float) -> tuple[Tensor, Tensor]:
        """(L1 sum, 1 - GIoU sum) / num_boxes over the matched pairs."""
        pred_boxes = pred_boxes.float()
        b_idx, src, _, tgt = _gather(pairs, labels, boxes, pred_boxes.device)
        if not src.numel():
            zero = pred_boxes.sum() * 0.0
            return zero, zero
        matched = pred_boxes[b_idx, src]
        _, giou = bbox_giou(xywh_to_xyxy(matched), xywh_to_xyxy(tgt))
        return (matched - tgt).abs().sum() / num_boxes, (1.0 - giou).sum() / num_boxes

    def local_loss(self, corners: Tensor, refs: Tensor, pred_boxes: Tensor, labels: list[Tensor],
                   boxes: list[Tensor], pairs: Pairs, num_boxes: float, *, teacher: tuple[Tensor, Tensor] | None,
                   state: dict[str, object], is_dn: bool) -> tuple[Tensor, Tensor]:
        """(FGL, DDF) of one decoder layer. corners (Tensor[B, Q, 4 * (R + 1)]), refs (Tensor[B, Q,
        4]); teacher: the last layer's (corners, logits) or None (then DDF is 0). ``state`` carries
        the per-call caches (FGL targets, DDF mixing weights) as the reference criterion does."""
        n = self.reg_max + 1
        corners = corners.float()
        b, q = corners.shape[:2]
        b_idx, src, _, tgt = _gather(pairs, labels, boxes, corners.device)
        zero = corners.sum() * 0.0
        if src.numel():
            iou, _ = bbox_giou(xywh_to_xyxy(pred_boxes.float()[b_idx, src]), xywh_to_xyxy(tgt))
            iou = iou.detach().clamp(min=0)
            key = "fgl_dn" if is_dn else "fgl"
            if key not in state:
                state[key] = box_to_distance(refs.float()[b_idx, src].detach(), xywh_to_xyxy(tgt),
                                             reg_max=self.reg_max, up=self.up, reg_scale=self.reg_scale)
            idx, w_right, w_left = state[key]  # type: ignore[misc]
            pred = corners[b_idx, src].reshape(-1, n)
            left = idx.long()
            ce = (F.cross_entropy(pred, left, reduction="none") * w_left
                  + F.cross_entropy(pred, left + 1, reduction="none") * w_right)
            fgl = (ce * iou.repeat_interleave(4)).sum() / num_boxes
        else:
            iou = corners.new_zeros(0)
            fgl = zero
        if teacher is None:
            return fgl, zero
        t_corners, t_logits = teacher
        t_corners = t_corners.float().detach()
        if torch.equal(corners, t_corners):
            return fgl, zero
        weight = t_logits.float().detach().sigmoid().max(-1).values  # (B, Q)
        mask = torch.zeros((b, q), dtype=torch.bool, device=corners.device)
        if src.numel():
            mask[b_idx, src] = True
            weight = weight.index_put((b_idx, src), iou.to(weight.dtype))
        weight = weight[..., None].expand(b, q, 4).reshape(-1)
        mask = mask[..., None].expand(b, q, 4).reshape(-1)
        t = self.cfg.ddf_temperature
        kl = F.kl_div(F.log_softmax(corners.reshape(-1, n) / t, dim=1), F.softmax(t_corners.reshape(-1, n) / t, dim=1),
                      reduction="none").sum(-1)
        per_edge = weight * (t * t) * kl
        if not is_dn or "ddf_mix" not in state:
            scale = 8.0 / b
            state["ddf_mix"] = (float(mask.sum()) * scale) ** 0.5, (float((~mask).sum()) * scale) ** 0.5
        n_pos, n_neg = state["ddf_mix"]  # type: ignore[misc]
        l_pos = per_edge[mask].mean() if bool(mask.any()) else zero
        l_neg = per_edge[~mask].mean() if bool((~mask).any()) else zero
        ddf = (l_pos * n_pos + l_neg * n_neg) / max(n_pos + n_neg, 1e-12)
        return fgl, ddf

    # ------------------------------------------------------------------ total
    def __call__(self, out: FDRTrainOutput, labels: Sequence[Tensor], boxes: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        c = self.cfg
        labels, boxes = list(labels), list(boxes)
        num_boxes = float(max(sum(int(t.numel()) for t in labels), 1))
        n_layers = int(out.logits.shape[0])
        layer_pairs = [self.matcher(out.logits[i], out.boxes[i], labels, boxes) for i in range(n_layers)]
        pre_pairs = self.matcher(out.pre_logits, out.pre_boxes, labels, boxes)
        enc_pairs = self.matcher(out.enc_logits, out.enc_boxes, labels, boxes)
        go = union_matching([layer_pairs[-1], *layer_pairs[:-1], pre_pairs, enc_pairs])
        num_go = float(max(sum(int(p.numel()) for p, _ in go), 1))
        state: dict[str, object] = {}
        terms: list[Tensor] = []

        def add(cls: Tensor, l1: Tensor, giou: Tensor, fgl: Tensor, ddf: Tensor) -> None:
            terms.append(torch.stack([c.w_cls * cls, c.l1 * l1, c.giou * giou, c.fgl * fgl, c.ddf * ddf]))

        zero = out.logits.float().sum() * 0.0
        teacher = (out.corners[-1], out.logits[-1])
        for i in reversed(range(n_layers)):  # last layer first: it fixes the caches, as the reference
            cls = self.cls_loss(out.logits[i], out.boxes[i], labels, boxes, layer_pairs[i], num_boxes)
            l1, giou = self.box_loss(out.boxes[i], labels, boxes, go, num_go)
            fgl, ddf = self.local_loss(out.corners[i], out.refs[i], out.boxes[i], labels, boxes, go, num_go,
                                       teacher=teacher if i < n_layers - 1 else None, state=state, is_dn=False)
            add(cls, l1, giou, fgl, ddf)
        for lg, bx, pairs in ((out.pre_logits, out.pre_boxes, pre_pairs), (out.enc_logits, out.enc_boxes, enc_pairs)):
            add(self.cls_loss(lg, bx, labels, boxes, pairs, num_boxes), *self.box_loss(bx, labels, boxes, go, num_go),
                zero, zero)
        if out.dn is not None and out.dn_logits is not None:
            assert out.dn_boxes is not None and out.dn_corners is not None and out.dn_refs is not None
            assert out.dn_pre_logits is not None and out.dn_pre_boxes is not None
            dn_pairs = list(zip(out.dn.positive_idx, out.dn.gt_idx, strict=True))
            dn_num = num_boxes * out.dn.groups
            dn_teacher = (out.dn_corners[-1], out.dn_logits[-1])
            for i in range(n_layers):
                cls = self.cls_loss(out.dn_logits[i], out.dn_boxes[i], labels, boxes, dn_pairs, dn_num)
                l1, giou = self.box_loss(out.dn_boxes[i], labels, boxes, dn_pairs, dn_num)
                fgl, ddf = self.local_loss(out.dn_corners[i], out.dn_refs[i], out.dn_boxes[i], labels, boxes, dn_pairs,
                                           dn_num, teacher=dn_teacher, state=state, is_dn=True)
                add(cls, l1, giou, fgl, ddf)
            add(self.cls_loss(out.dn_pre_logits, out.dn_pre_boxes, labels, boxes, dn_pairs, dn_num),
                *self.box_loss(out.dn_pre_boxes, labels, boxes, dn_pairs, dn_num), zero, zero)
        items = torch.nan_to_num(torch.stack(terms), nan=0.0).sum(0)  # (5,)
        return items.sum(), items.detach()


class DFineTrainLoss(DETRTrainLoss):
    """Training criterion for :class:`~libreyolo.models._detr.dfine_net.DFineDetector`: builds the
    denoising queries, runs the decoder eagerly, scores with :class:`DFineCriterion`.
    ``criterion(preds, batch) -> (loss, items)``; ``items`` Tensor[5] detached (weighted cls, l1,
    giou, fgl, ddf), ``loss = items.sum() * B`` (same scaling contract as the RT-DETR criterion)."""

    def __init__(self, net: torch.nn.Module, *, cfg: DFineLossConfig | None = None,
                 max_dn_gt: int | None = None) -> None:
        self.net = net
        dec = net.decoder
        self.criterion = DFineCriterion(nc=int(net.nc), reg_max=int(dec.reg_max), reg_scale=float(dec.reg_scale),
                                        up=float(dec.up), cfg=cfg or DFineLossConfig())
        self.max_dn_gt = max_dn_gt
        self.hyp: dict[str, float] = {}


# DEIM's criterion settings (``configs/base/deim.yml``: MAL 1 with gamma 1.5, L1 5, GIoU 2, FGL 0.15,
# DDF 1.5, no MAL alpha); shared by the deim, rtdetrv4 and deimv2 families.
DEIM_LOSS = DFineLossConfig(cls="mal", w_cls=1.0, l1=5.0, giou=2.0, fgl=0.15, ddf=1.5, alpha=0.75, gamma=1.5,
                            mal_alpha=None)


def build_deim_criterion(net: object) -> DFineTrainLoss:
    """:class:`DFineTrainLoss` with :data:`DEIM_LOSS` for ``net``."""
    return DFineTrainLoss(net, cfg=DEIM_LOSS)  # type: ignore[arg-type]
