"""The one set of box ops (``libreyolo/ops/boxes.py``) against frozen copies of the formulas it
replaced (issue 21 item 5): equal bit for bit (compared as integers, so -0.0, NaN payloads and
the last bit all count) in float32, float16 and bfloat16, on random and degenerate boxes (zero
area, inverted, identical, touching, disjoint, below-eps areas, large coordinates), in the forward
pass and in the gradients.

The frozen copies live only here. Replaced:

* ``xyxy_to_xywh`` / ``xywh_to_xyxy`` (``ops/boxes``) and the inline conversion of RTMDet's
  ``build_targets`` -> torchvision ``box_convert``;
* ``box_iou`` (``ops/boxes``), DETR ``generalized_box_iou`` and ``aligned_giou``
  (``models/_detr/common.py``) -> ``box_iou``, ``generalized_box_iou``, ``bbox_giou`` on one
  intersection/union helper;
* ``iou_matrix`` (``tasks/detect/metrics.py``) and the trackers' numpy ``box_iou`` ->
  ``box_iou_np``.

The last tests pin why the other IoU variants were NOT merged: their numbers differ.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.ops as tvo

from libreyolo.ops.boxes import (
    bbox_giou,
    box_iou,
    box_iou_np,
    generalized_box_iou,
    xywh_to_xyxy,
    xyxy_to_xywh,
)
from libreyolo.trackers.matching import box_iou as tracker_box_iou

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# CUDA runs the same comparisons on the GPU (elementwise kernels, same formulas): tests/gpu-style skip
DEVICES = ("cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                               reason="needs a CUDA GPU (none present)")))
_INT = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
        torch.float64: torch.int64}


# ---- frozen copies of the old formulas -------------------------------------------------------

def old_xyxy_to_xywh(boxes):
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1), dim=-1)


def old_xywh_to_xyxy(boxes):
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), dim=-1)


def old_box_iou(a, b, eps=1e-7):
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).clamp(min=0).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(-1)
    return inter / (area_a[:, None] + area_b[None, :] - inter + eps)


def old_generalized_box_iou(a, b, eps=1e-7):
    area_a = (a[:, 2:] - a[:, :2]).clamp(min=0).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(-1)
    inter = (torch.minimum(a[:, None, 2:], b[None, :, 2:]) - torch.maximum(a[:, None, :2], b[None, :, :2])).clamp(min=0).prod(-1)
    union = area_a[:, None] + area_b[None, :] - inter
    iou = inter / (union + eps)
    hull = (torch.maximum(a[:, None, 2:], b[None, :, 2:]) - torch.minimum(a[:, None, :2], b[None, :, :2])).clamp(min=0).prod(-1)
    return iou - (hull - union) / (hull + eps)


def old_aligned_giou(a, b, eps=1e-7):
    area_a = (a[:, 2:] - a[:, :2]).clamp(min=0).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(-1)
    inter = (torch.minimum(a[:, 2:], b[:, 2:]) - torch.maximum(a[:, :2], b[:, :2])).clamp(min=0).prod(-1)
    union = area_a + area_b - inter
    iou = inter / (union + eps)
    hull = (torch.maximum(a[:, 2:], b[:, 2:]) - torch.minimum(a[:, :2], b[:, :2])).clamp(min=0).prod(-1)
    return iou, iou - (hull - union) / (hull + eps)


def old_rtmdet_targets(boxes, w, h):
    cx, cy, bw, bh = (boxes * torch.tensor([w, h, w, h], dtype=torch.float32)).unbind(-1)
    return torch.stack((cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2), -1)


def old_iou_matrix(a, b):
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area_a = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(-1)
    area_b = np.clip(b[:, 2:] - b[:, :2], 0, None).prod(-1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def old_tracker_box_iou(a, b):
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(axis=2)
    area_a = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(axis=1)
    area_b = np.clip(b[:, 2:] - b[:, :2], 0, None).prod(axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


# ---- inputs and comparison -------------------------------------------------------------------

def _boxes(n: int, seed: int) -> torch.Tensor:
    """n >= 12 xyxy float32 boxes; the first rows are the degenerate cases."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 600
    wh = torch.rand(n, 2, generator=g) * 200
    b = torch.cat((xy, xy + wh), 1)
    b[0, 2] = b[0, 0]  # zero width
    b[1, 2:] = b[1, :2]  # a point
    b[2] = b[2, [2, 3, 0, 1]]  # inverted
    b[3, 2:] = b[3, :2] + 1e-4  # area 1e-8, below eps
    b[4] += 5000  # far from everything
    b[5] = torch.tensor([0.0, 0.0, 0.0, 0.0])  # all zero
    b[6] = torch.tensor([1e4, 2e4, 1.5e4, 2.5e4])  # large coordinates
    b[7] = torch.tensor([-50.0, -20.0, 10.0, 30.0])  # negative coordinates
    return b


def _pair(n: int, m: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = _boxes(n, seed), _boxes(m, seed + 1)
    b[8] = a[9]  # identical
    b[9] = a[9] + torch.tensor([1.0, 0.0, 1.0, 0.0]) * (a[9, 2] - a[9, 0])  # touching a[9] on an edge
    b[10] = a[10] + 0.5  # overlapping shift
    b[11] = a[11]  # identical again
    return a, b


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(_INT[t.dtype])


def _one_nan(t: torch.Tensor) -> torch.Tensor:
    return torch.where(t.isnan(), torch.full_like(t, float("nan")), t)


def assert_bitwise(new, old, *, nan_payload: bool = True) -> None:
    """Equal as integers. ``nan_payload=False``: NaNs must sit at the same places, but their
    sign bit may differ (see :func:`test_box_iou_bitwise`)."""
    new = new if isinstance(new, tuple) else (new,)
    old = old if isinstance(old, tuple) else (old,)
    assert len(new) == len(old)
    for x, y in zip(new, old, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        if not nan_payload:
            assert torch.equal(x.isnan(), y.isnan())
            x, y = _one_nan(x), _one_nan(y)
        assert torch.equal(_bits(x), _bits(y)), (x - y).abs().max()


def _grads(fn, *inputs, seed: int = 0):
    """Forward outputs and the input gradients for a random upstream gradient."""
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    g = torch.Generator().manual_seed(seed)
    loss = sum((o * torch.randn(o.shape, generator=g).to(o.device, o.dtype)).sum() for o in outs)
    loss.backward()
    return tuple(o.detach() for o in outs), tuple(x.grad for x in leaves)


def _same_with_grads(new_fn, old_fn, *inputs, grad_nan_payload: bool = True) -> None:
    out_n, grad_n = _grads(new_fn, *inputs)
    out_o, grad_o = _grads(old_fn, *inputs)
    assert_bitwise(out_n, out_o)
    assert_bitwise(grad_n, grad_o, nan_payload=grad_nan_payload)


# ---- the consolidated functions equal the old ones -------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("device", DEVICES)
def test_conversions_bitwise(dtype, seed, device) -> None:
    b = _boxes(64, seed).to(device, dtype)
    _same_with_grads(xyxy_to_xywh, old_xyxy_to_xywh, b)
    _same_with_grads(xywh_to_xyxy, old_xywh_to_xyxy, b)
    batched = b.view(4, 16, 4)  # [..., 4]
    assert_bitwise(xywh_to_xyxy(batched), old_xywh_to_xyxy(batched))
    assert_bitwise(xyxy_to_xywh(batched), old_xyxy_to_xywh(batched))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("device", DEVICES)
def test_box_iou_bitwise(dtype, seed, device) -> None:
    """Forward bit for bit. Gradients too, except the sign bit of NaN gradients (float16 areas
    that overflow to inf): the old formula built the intersection before the areas, so autograd
    sums a box's two gradient contributions in the other order, and NaN + NaN keeps the first
    operand's sign. Every finite gradient is equal (x + y == y + x). The one call site, YOLOv7's
    ``ota_assign``, runs under ``no_grad``."""
    a, b = (t.to(device, dtype) for t in _pair(40, 30, seed))
    loose = dict(grad_nan_payload=False)
    _same_with_grads(box_iou, old_box_iou, a, b, **loose)
    _same_with_grads(lambda x, y: box_iou(x, y, eps=1e-6), lambda x, y: old_box_iou(x, y, eps=1e-6), a, b, **loose)
    _same_with_grads(box_iou, old_box_iou, a, a, **loose)  # identical sets: the diagonal is the eps path
    finite = _pair(40, 30, seed)[0][:6].to(device, dtype)  # no overflow: the gradients are bitwise equal
    _same_with_grads(box_iou, old_box_iou, finite, finite.flip(0))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("device", DEVICES)
def test_generalized_box_iou_bitwise(dtype, seed, device) -> None:
    a, b = (t.to(device, dtype) for t in _pair(40, 30, seed))
    _same_with_grads(generalized_box_iou, old_generalized_box_iou, a, b)
    _same_with_grads(generalized_box_iou, old_generalized_box_iou, b, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("device", DEVICES)
def test_bbox_giou_bitwise(dtype, seed, device) -> None:
    a, b = (t.to(device, dtype) for t in _pair(32, 32, seed))
    _same_with_grads(bbox_giou, old_aligned_giou, a, b)
    _same_with_grads(bbox_giou, old_aligned_giou, a, a)  # all identical: iou ~ 1, hull = union
    # the DETR losses' call: boxes in normalised cxcywh converted on the way in
    c, t = (torch.rand(32, 4, generator=torch.Generator().manual_seed(seed + k)).to(device, dtype) for k in (7, 8))
    _same_with_grads(lambda x, y: bbox_giou(xywh_to_xyxy(x), xywh_to_xyxy(y)),
                     lambda x, y: old_aligned_giou(old_xywh_to_xyxy(x), old_xywh_to_xyxy(y)), c, t)


@pytest.mark.parametrize("device", DEVICES)
def test_giou_zero_area_rows_bitwise(device) -> None:
    """A whole batch of degenerate pairs (prod's backward takes its zero-safe branch)."""
    z = torch.zeros(6, 4)
    p = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 2.0, 0.0], [3.0, 3.0, 1.0, 1.0],
                      [0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 2.0, 1.0], [5.0, 5.0, 5.0, 9.0]])
    for dtype in DTYPES:
        zd, pd = z.to(device, dtype), p.to(device, dtype)
        _same_with_grads(bbox_giou, old_aligned_giou, zd, pd)
        _same_with_grads(generalized_box_iou, old_generalized_box_iou, zd, pd)
        _same_with_grads(box_iou, old_box_iou, pd, pd)


@pytest.mark.parametrize("seed", [0, 1])
def test_rtmdet_targets_bitwise(seed) -> None:
    from libreyolo.models.rtmdet.loss import build_targets

    g = torch.Generator().manual_seed(seed)
    n = 9
    boxes = torch.rand(n, 4, generator=g)
    boxes[0, 2:] = 0  # zero size
    idx = torch.tensor([0, 0, 1, 1, 1, 1, 2, 2, 2])
    batch = {"batch_idx": idx, "cls": torch.zeros(n), "bboxes": boxes}
    _, out, mask = build_targets(batch, batch_size=3, img_hw=(480, 640), device=torch.device("cpu"))
    old = old_rtmdet_targets(boxes, 640, 480)
    assert_bitwise(out[mask], old)  # the rows keep their order within each image (stable sort)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_box_iou_np_bitwise(dtype, seed) -> None:
    a, b = (t.numpy().astype(dtype) for t in _pair(40, 30, seed))
    for x, y in ((a, b), (a, a), (a[:0], b), (a, b[:0])):
        new, old = box_iou_np(x, y), old_iou_matrix(x, y)
        assert new.dtype == old.dtype and new.shape == old.shape
        assert np.array_equal(new.view(np.uint8), old.view(np.uint8))


def test_tracker_box_iou_bitwise() -> None:
    a, b = (t.numpy() for t in _pair(20, 15, 3))
    cases = ((a, b), (a.astype(np.float64), b), ([[0, 0, 10, 10]], [0, 5, 10, 15]), (np.zeros((0, 4)), b), (a, []))
    for x, y in cases:
        new, old = tracker_box_iou(x, y), old_tracker_box_iou(x, y)
        assert new.dtype == old.dtype == np.float64 and new.shape == old.shape
        assert np.array_equal(new.view(np.uint8), old.view(np.uint8))


# ---- why the remaining variants stay separate ------------------------------------------------

def _valid(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 100
    return torch.cat((xy, xy + torch.rand(n, 2, generator=g) * 60 + 1), 1)


def test_torchvision_ious_are_not_ours() -> None:
    """torchvision's box_iou / generalized_box_iou add no eps and do not clamp the areas: on
    normalised boxes (the DETR matcher's) the last bits differ, and an empty union is NaN there.
    (On pixel boxes with a union over ~2 px^2, ``union + 1e-7 == union`` in float32 and they agree.)"""
    a, b = _valid(50, 0) / 200, _valid(40, 1) / 200
    assert not torch.equal(tvo.box_iou(a, b), box_iou(a, b))
    assert not torch.equal(tvo.generalized_box_iou(a, b), generalized_box_iou(a, b))
    z = torch.zeros(1, 4)
    assert tvo.box_iou(z, z).isnan().all() and box_iou(z, z).eq(0).all()


def test_rtmdet_and_yolox_ious_differ() -> None:
    """RTMDet clamps the union at eps (ours adds eps) and does not clamp the areas; YOLOX's
    union comes from w*h of the centre form and is clamped at 1e-12 (or has 1e-16 added): other
    arithmetic, other last bits. On pixel boxes with unions of more than ~16 px^2 the eps
    vanishes in float32 and RTMDet's numbers agree with ours; on small boxes they do not."""
    from libreyolo.models.rtmdet.loss import giou_loss, pairwise_iou
    from libreyolo.models.yolox.loss import iou_loss, pairwise_iou_cxcywh

    a, b = _valid(50, 0) / 50, _valid(40, 1) / 50
    assert not torch.equal(pairwise_iou(a[None], b[None])[0], box_iou(a, b, eps=1e-6))
    assert not torch.equal(giou_loss(a, b[:50].repeat(2, 1)[:50]), 1.0 - bbox_giou(a, b[:50].repeat(2, 1)[:50], eps=1e-6)[1])
    ca, cb = xyxy_to_xywh(a), xyxy_to_xywh(b)
    assert not torch.equal(pairwise_iou_cxcywh(ca[None], cb[None])[0], box_iou(a, b, eps=0.0))
    assert not torch.equal(iou_loss(ca[:40], cb), 1.0 - box_iou(a[:40], b, eps=1e-16).diagonal().pow(2))
