"""Fixed-size detection candidates and the eager selection after them.

The captured part of prediction ends in :func:`topk_candidates`: per image the ``k`` best
anchors (or queries) by score, a shape-static function of the head output, so it lives inside
the CUDA graph. :func:`select_detections` is the data-dependent rest (threshold to a variable
count, NMS, ``max_det``). It copies the candidates to the host once per batch and, for the small
sets a real ``conf`` leaves, runs NMS there; large sets (a low ``conf``) go through NMS on the
device.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .nms import non_max_suppression

# Above this many candidates over ``conf`` in one image, NMS runs on the device instead of the host.
HOST_NMS_MAX = 256


def topk_candidates(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """scores (Tensor[B, A], float) -> (top scores Tensor[B, k'], anchor indices Tensor[B, k'])
    with ``k' = min(k, A)``, by decreasing score (ties: lower index first is not guaranteed)."""
    return scores.topk(min(int(k), int(scores.shape[1])), dim=1, largest=True, sorted=True)


def pack_candidates(boxes: Tensor, scores: Tensor, labels: Tensor) -> Tensor:
    """boxes (Tensor[B, k, 4]) xyxy, scores (Tensor[B, k]), labels (Tensor[B, k], int) ->
    Tensor[B, k, 6] float32 (x1, y1, x2, y2, score, class id)."""
    return torch.cat((boxes.float(), scores.float()[..., None], labels.float()[..., None]), -1)


def select_detections(cands: Tensor, *, conf: float, iou: float, max_det: int, agnostic: bool,
                      nms: bool = True) -> list[Tensor]:
    """Candidates -> per image Tensor[n, 6] float32 on the CPU, by decreasing score, ``n <= max_det``.

    cands (Tensor[B, k, 6]): from a family's ``decode``, sorted by decreasing score per image.
    Keeps rows with score > ``conf``; with ``nms`` (dense heads) class-aware (or agnostic) NMS at
    ``iou``. One device-to-host copy for the whole batch (plus one per image whose candidate set
    exceeds :data:`HOST_NMS_MAX`, where NMS runs on the device).
    """
    # (B, k, 6) on the host, as a normal tensor (the rows are rescaled in place later): one copy
    host = cands.detach().to("cpu") if cands.device.type != "cpu" else cands.detach().clone()
    out = []
    for b in range(host.shape[0]):
        c = host[b]
        n = int((c[:, 4] > conf).sum())  # rows are sorted by score: the first n pass
        d = c[:n]
        if nms and n > 1:
            if n > HOST_NMS_MAX and cands.device.type != "cpu":
                dev = cands[b, :n]
                keep = non_max_suppression(dev[:, :4], dev[:, 4], dev[:, 5].long(), iou=iou, max_det=max_det,
                                           agnostic=agnostic).cpu()
            else:
                keep = non_max_suppression(d[:, :4], d[:, 4], d[:, 5].long(), iou=iou, max_det=max_det,
                                           agnostic=agnostic)
            d = d[keep]
        out.append(d[:max_det])
    return out
