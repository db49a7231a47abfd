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


def candidates_truncated(cands_host: Tensor, conf: float, *, k: int) -> bool:
    """True when the decode kept its full ``k`` candidates (there were more anchors) and some
    image's last (lowest) one still scores above ``conf``: the fixed-size top-k may then have cut
    off candidates that a dense head's eager postprocess (up to 30,000 anchors over ``conf``) keeps,
    so its NMS could come out differently (a very low ``conf``)."""
    if cands_host.shape[1] < k or not cands_host.shape[1]:
        return False  # fewer anchors than k: every anchor is a candidate
    if cands_host.device.type == "cpu":  # numpy: a few microseconds instead of a few torch calls
        return bool((cands_host.numpy()[:, -1, 4] > conf).any())
    return bool((cands_host[:, -1, 4] > conf).any())


def select_detections(cands: Tensor, *, conf: float, iou: float, max_det: int, agnostic: bool,
                      nms: bool = True, host: Tensor | None = None) -> list[Tensor]:
    """Candidates -> per image Tensor[n, 6] float32 on the CPU, by decreasing score, ``n <= max_det``.

    cands (Tensor[B, k, 6]): from a family's ``decode``, sorted by decreasing score per image.
    Keeps rows with score > ``conf``; with ``nms`` (dense heads) class-aware (or agnostic) NMS at
    ``iou``. One device-to-host copy for the whole batch (plus one per image whose candidate set
    exceeds :data:`HOST_NMS_MAX`, where NMS runs on the device). ``host``: that copy, when the
    caller already made it (:func:`to_host`). The thresholding runs in numpy on the host copy (the
    candidate sets are small: torch's per-call overhead would dominate); NMS is torchvision's.
    """
    if host is None:
        host = to_host(cands)
    arr = host.float().numpy()
    out = []
    for b in range(arr.shape[0]):
        c = arr[b]
        d = c[c[:, 4] > conf]  # a mask, not a count: NaN scores (ranked first by topk) drop out; a copy
        n = d.shape[0]
        if nms and n > 1:
            if n > HOST_NMS_MAX and cands.device.type != "cpu":
                dev = torch.from_numpy(d).to(cands.device)
                keep = non_max_suppression(dev[:, :4], dev[:, 4], dev[:, 5].long(), iou=iou, max_det=max_det,
                                           agnostic=agnostic).cpu()
            else:
                t = torch.from_numpy(d)
                keep = non_max_suppression(t[:, :4], t[:, 4], t[:, 5].long(), iou=iou, max_det=max_det,
                                           agnostic=agnostic)
            d = d[keep.numpy()]
        out.append(torch.from_numpy(d[:max_det]))
    return out


def to_host(cands: Tensor) -> Tensor:
    """The candidates on the host: one copy from a device; host candidates as they are (the
    selection copies the rows it keeps, so they are never modified)."""
    return cands.detach().to("cpu") if cands.device.type != "cpu" else cands.detach()
