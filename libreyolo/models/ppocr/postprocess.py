"""PP-OCR eager steps: text boxes from the DB probability map, crops of the boxes for the
recogniser, CTC decoding (after PaddleOCR's DBPostProcess and CTCLabelDecode; our own code).

Box extraction: the map is thresholded at ``thresh`` (0.3), each connected contour's minimum-area
rectangle is scored by the mean probability inside it (kept over ``box_thresh``) and grown by the
DB unclip distance ``area * unclip / perimeter`` on every side (for a rectangle the polygon offset
is the rectangle with both sides ``+ 2 d``; PaddleOCR offsets with pyclipper, whose rounded corners
the minimum-area rectangle then drops again).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..._cv import cv2


def order_quad(pts: np.ndarray) -> np.ndarray:
    """Four points -> float32[4, 2] clockwise from the top-left (smallest x + y).

    Example:
        >>> order_quad(np.array([[10, 0], [10, 5], [0, 5], [0, 0]], np.float32)).tolist()
        [[0.0, 0.0], [10.0, 0.0], [10.0, 5.0], [0.0, 5.0]]
    """
    pts = np.asarray(pts, np.float32).reshape(4, 2)
    c = pts.mean(0)
    ang = np.arctan2(pts[:, 1] - c[1], pts[:, 0] - c[0])
    pts = pts[np.argsort(ang)]  # clockwise in image coordinates (y down)
    start = int(np.argmin(pts.sum(1)))
    return np.roll(pts, -start, axis=0)


def db_boxes(prob: np.ndarray, *, thresh: float = 0.3, box_thresh: float = 0.6, unclip: float = 1.5,
             max_candidates: int = 1000, min_size: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """prob (float32[H, W] in [0, 1]) -> (quads float32[n, 4, 2] in map pixels, scores float32[n]).

    Example:
        >>> p = np.zeros((32, 64), np.float32); p[10:20, 8:40] = 0.9
        >>> quads, scores = db_boxes(p)
        >>> len(quads), round(float(scores[0]), 2)
        (1, 0.9)
    """
    h, w = prob.shape
    mask = (prob > thresh).astype(np.uint8)
    contours, _ = cv2.findContours(mask, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    quads, scores = [], []
    for cnt in contours[:max_candidates]:
        (cx, cy), (rw, rh), ang = cv2.minAreaRect(cnt)
        if min(rw, rh) < min_size:
            continue
        box = cv2.boxPoints(((cx, cy), (rw, rh), ang))
        score = _box_score(prob, box)
        if score < box_thresh:
            continue
        d = rw * rh * unclip / (2 * (rw + rh))
        rw, rh = rw + 2 * d, rh + 2 * d
        if min(rw, rh) < min_size + 2:
            continue
        quad = order_quad(cv2.boxPoints(((cx, cy), (rw, rh), ang)))
        quad[:, 0] = quad[:, 0].clip(0, w)
        quad[:, 1] = quad[:, 1].clip(0, h)
        quads.append(quad)
        scores.append(score)
    if not quads:
        return np.zeros((0, 4, 2), np.float32), np.zeros(0, np.float32)
    order = np.lexsort((np.stack(quads)[:, 0, 0], np.round(np.stack(quads)[:, 0, 1] / 10)))  # reading order
    return np.stack(quads)[order].astype(np.float32), np.asarray(scores, np.float32)[order]


def _box_score(prob: np.ndarray, box: np.ndarray) -> float:
    h, w = prob.shape
    x0, x1 = int(np.clip(np.floor(box[:, 0].min()), 0, w - 1)), int(np.clip(np.ceil(box[:, 0].max()), 0, w - 1))
    y0, y1 = int(np.clip(np.floor(box[:, 1].min()), 0, h - 1)), int(np.clip(np.ceil(box[:, 1].max()), 0, h - 1))
    m = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
    cv2.fillPoly(m, [(box - [x0, y0]).astype(np.int32)], 1)
    region = prob[y0:y1 + 1, x0:x1 + 1]
    return float(region[m.astype(bool)].mean()) if m.any() else 0.0


def crop_grid(quads: Tensor, *, image_hw: tuple[int, int], out_hw: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """quads (Tensor[n, 4, 2], clockwise from top-left, image pixels) -> (``grid_sample`` grid
    Tensor[n, h, w, 2], keep Tensor[n, 1, 1, w] bool of the columns holding the text).

    Each crop keeps its aspect ratio at height ``h`` (a region taller than 1.5x its width is read
    rotated by 90 degrees, as PaddleOCR does), left-aligned; columns past its width are padding.
    """
    n = quads.shape[0]
    oh, ow = out_hw
    ih, iw = image_hw
    q = quads.float()
    wlen = (q[:, 1] - q[:, 0]).norm(dim=-1).clamp(min=1)
    hlen = (q[:, 3] - q[:, 0]).norm(dim=-1).clamp(min=1)
    tall = hlen >= 1.5 * wlen
    # a tall region: its left edge read top-to-bottom becomes the crop's top edge
    tl = torch.where(tall[:, None], q[:, 3], q[:, 0])
    tr = torch.where(tall[:, None], q[:, 0], q[:, 1])
    bl = torch.where(tall[:, None], q[:, 2], q[:, 3])
    length, height = torch.where(tall, hlen, wlen), torch.where(tall, wlen, hlen)
    cw = (oh * length / height).ceil().clamp(1, ow)  # the text's width in the crop
    u = (torch.arange(ow, dtype=torch.float32, device=q.device) + 0.5)[None, :] / cw[:, None]  # (n, w)
    v = (torch.arange(oh, dtype=torch.float32, device=q.device) + 0.5)[None, :] / oh  # (1, h)
    pts = (tl[:, None, None] + u[:, None, :, None] * (tr - tl)[:, None, None]
           + v[:, :, None, None] * (bl - tl)[:, None, None])  # (n, h, w, 2) image pixels
    grid = torch.stack([pts[..., 0] / iw * 2 - 1, pts[..., 1] / ih * 2 - 1], -1)
    keep = (u <= 1.0 + 0.5 / ow)[:, None, None, :]
    return grid.reshape(n, oh, ow, 2), keep


def crop_regions(images: Tensor, index: Tensor, quads: Tensor, out_hw: tuple[int, int]) -> Tensor:
    """images (Tensor[B, 3, H, W] in [0, 1]), the image of each region ``index`` (Tensor[n] int64)
    and its quad -> crops Tensor[n, 3, h, w] in [0, 1], padding mid-grey (0 after the recogniser's
    normalisation to [-1, 1])."""
    if quads.shape[0] == 0:
        return images.new_zeros(0, 3, *out_hw)
    grid, keep = crop_grid(quads.to(images.device), image_hw=tuple(images.shape[2:]), out_hw=out_hw)
    crops = F.grid_sample(images[index.to(images.device)].float(), grid, mode="bilinear", padding_mode="border",
                          align_corners=False)
    return torch.where(keep, crops, torch.full_like(crops, 0.5)).to(images.dtype)


def ctc_decode(probs: Tensor, chars: list[str]) -> tuple[list[str], list[float]]:
    """probs (Tensor[n, T, C + 1], index 0 blank) -> (strings, scores): greedy best path, repeats
    merged, blanks dropped; the score is the mean probability of the characters kept (0 for none).

    Example:
        >>> p = torch.zeros(1, 5, 3); p[0, [0, 1, 2, 3, 4], [1, 1, 0, 2, 1]] = 0.9
        >>> ctc_decode(p, ["a", "b"])
        (['aba'], [0.9])
    """
    if probs.shape[0] == 0:
        return [], []
    conf, idx = probs.float().max(-1)
    idx, conf = idx.cpu().numpy(), conf.cpu().numpy()
    texts, scores = [], []
    for ids, cs in zip(idx, conf, strict=True):
        keep = np.ones(len(ids), bool)
        keep[1:] = ids[1:] != ids[:-1]
        keep &= ids != 0
        texts.append("".join(chars[i - 1] if 0 < i <= len(chars) else "" for i in ids[keep]))
        scores.append(round(float(cs[keep].mean()), 6) if keep.any() else 0.0)
    return texts, scores
