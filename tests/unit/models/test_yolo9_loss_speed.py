"""The YOLOv9 loss matches a frozen copy of its earlier, slower implementation.

That copy (``_Ref*``, :func:`make_reference`) and the batch generators live in
``benchmarks/references/yolo9_loss.py``, shared with ``benchmarks/bench_loss.py``; any change of
result in ``libreyolo.models.yolo9.loss`` is caught here.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from benchmarks.references.yolo9_loss import (
    NET,
    _ref_build_targets,
    _ref_dfl_loss,
    _RefAssigner,
    make_batch,
    make_preds,
    make_reference,
)
from libreyolo.models.yolo9.loss import TaskAlignedAssigner, YOLO9Loss, build_targets, dfl_loss
from libreyolo.ops.anchors import (
    dfl_expectation,
    dist2bbox,
    flatten_levels,
    make_anchors,
)
from libreyolo.ops.boxes import bbox_ciou

# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------

IMGSZ = 96  # A = 144 + 36 + 9 anchors
CASES = [  # (boxes per image, clustered, seed)
    ([3, 0, 5], False, 0),
    ([0, 0, 0], False, 1),  # no box in the whole batch
    ([1, 1, 1], False, 2),
    ([9, 2, 0], True, 3),  # crowded: anchors claimed by several boxes
    ([12, 12, 12], True, 4),
    ([4, 7, 1], False, 5),
]


def _rel(a: Tensor, b: Tensor) -> float:
    """max |a - b| relative to max |b| (0 when both are zero)."""
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / scale if scale > 0 else (a - b).abs().max().item()


def _run(crit: Any, counts: list[int], clustered: bool, seed: int) -> tuple[Tensor, Tensor, list[Tensor]]:
    preds = make_preds(batch=len(counts), imgsz=IMGSZ, nc=NET.nc, reg_max=NET.reg_max, seed=seed)
    loss, items = crit(preds, make_batch(counts=counts, nc=NET.nc, seed=seed, clustered=clustered))
    loss.backward()
    return loss.detach(), items, [p.grad for p in preds]


def test_loss_and_gradients_match_frozen_reference():
    new, ref = YOLO9Loss(NET), make_reference(NET)
    saw_multi_claim = False
    for counts, clustered, seed in CASES:
        loss_n, items_n, grads_n = _run(new, counts, clustered, seed)
        loss_r, items_r, grads_r = _run(ref, counts, clustered, seed)
        assert torch.isfinite(loss_r) and loss_r > 0
        assert _rel(loss_n, loss_r) <= 1e-6, (counts, loss_n, loss_r)
        assert _rel(items_n, items_r) <= 1e-6, (counts, items_n, items_r)
        assert (items_n == 0).tolist() == (items_r == 0).tolist()
        for gn, gr in zip(grads_n, grads_r, strict=True):
            assert _rel(gn, gr) <= 1e-6, (counts, _rel(gn, gr))
        saw_multi_claim |= clustered and sum(counts) > 0
    assert saw_multi_claim


def test_loss_reuses_cached_anchors_across_calls_and_shapes():
    new, ref = YOLO9Loss(NET), make_reference(NET)
    for imgsz in (64, 96, 64):
        preds = make_preds(batch=2, imgsz=imgsz, nc=NET.nc, reg_max=NET.reg_max, seed=imgsz, requires_grad=False)
        batch = make_batch(counts=[2, 3], nc=NET.nc, seed=imgsz)
        assert _rel(new(preds, batch)[1], ref(preds, batch)[1]) <= 1e-6


def _assigner_inputs(counts: list[int], clustered: bool, seed: int) -> tuple[Tensor, ...]:
    preds = make_preds(batch=len(counts), imgsz=IMGSZ, nc=NET.nc, reg_max=NET.reg_max, seed=seed,
                       requires_grad=False)
    x = flatten_levels(preds)
    reg, cls_logits = x.split((4 * NET.reg_max, NET.nc), 1)
    points, stride_t = make_anchors([tuple(p.shape[2:]) for p in preds], NET.strides)
    pd_bboxes = dist2bbox(dfl_expectation(reg, NET.reg_max), points) * stride_t
    batch = make_batch(counts=counts, nc=NET.nc, seed=seed, clustered=clustered)
    gt = build_targets(batch, batch_size=len(counts), img_hw=(IMGSZ, IMGSZ), device=torch.device("cpu"))
    return (cls_logits.transpose(1, 2).sigmoid(), pd_bboxes, points * stride_t, *gt)


def test_assigner_is_bit_identical_to_reference():
    for counts, clustered, seed in CASES:
        args = _assigner_inputs(counts, clustered, seed)
        new = TaskAlignedAssigner(nc=NET.nc)(*args)
        ref = _RefAssigner(nc=NET.nc)(*args)
        for name in ("labels", "bboxes", "scores", "fg_mask", "gt_idx"):
            assert torch.equal(getattr(new, name), getattr(ref, name)), (counts, name)
        assert torch.equal(new.weight, new.scores.sum(-1))


def test_crowded_case_has_anchors_claimed_by_several_boxes():
    # guards the test above: the crowded case must exercise the "several candidates" branch
    args = _assigner_inputs([12, 12, 12], True, 4)
    a = _RefAssigner(nc=NET.nc)
    b, m, n_a = args[0].shape[0], args[4].shape[1], args[0].shape[1]
    scores = args[0].transpose(1, 2).gather(1, args[3][..., None].expand(b, m, n_a))
    overlaps = bbox_ciou(args[4][:, :, None, :], args[1][:, None, :, :]).clamp(min=0)
    align = scores.pow(a.alpha) * overlaps.pow(a.beta)
    x, y = args[2][:, 0], args[2][:, 1]
    g = args[4]
    inside = torch.stack((x - g[..., 0, None], y - g[..., 1, None], g[..., 2, None] - x, g[..., 3, None] - y),
                         -1).amin(-1) > a.eps
    valid = inside & args[5][..., None]
    top = torch.zeros_like(valid).scatter_(-1, (align * valid).topk(10, dim=-1).indices, True) & valid
    assert (top.sum(1) > 1).any()


def test_build_targets_is_identical_to_reference():
    for counts, clustered, seed in CASES:
        batch = make_batch(counts=counts, nc=NET.nc, seed=seed, clustered=clustered)
        kw = {"batch_size": len(counts), "img_hw": (64, 96), "device": torch.device("cpu")}
        for new, ref in zip(build_targets(batch, **kw), _ref_build_targets(batch, **kw), strict=True):
            assert new.dtype == ref.dtype and torch.equal(new, ref), counts


def test_dfl_loss_matches_two_cross_entropies():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 4, 16, generator=g) * 3
    target = torch.rand(50, 4, generator=g) * 14.99
    ref = _ref_dfl_loss(logits, target)
    assert torch.equal(dfl_loss(logits, target), ref)  # one log-softmax gives the same values as two
    # batched layout (B, A, 4, R) gives the per-anchor values of the flat layout
    assert torch.equal(dfl_loss(logits.view(5, 10, 4, 16), target.view(5, 10, 4)), ref.view(5, 10))


def _count_ops(fn: Any, names: tuple[str, ...]) -> dict[str, int]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    counts = dict.fromkeys(names, 0)
    for evt in prof.events():
        if evt.name in counts:
            counts[evt.name] += 1
    return counts


def test_loss_reads_no_tensor_values_on_the_host():
    """The only scalar read is the padded GT size, on the CPU labels; no mask indexing."""
    names = ("aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::unique")
    preds = make_preds(batch=3, imgsz=IMGSZ, nc=NET.nc, reg_max=NET.reg_max, seed=4)
    batch = make_batch(counts=[12, 1, 0], nc=NET.nc, seed=4, clustered=True)

    def step(crit: Any) -> Any:
        return lambda: crit(preds, batch)[0].backward()

    new = _count_ops(step(YOLO9Loss(NET)), names)
    ref = _count_ops(step(make_reference(NET)), names)
    assert new == {"aten::_local_scalar_dense": 1, "aten::nonzero": 0, "aten::is_nonzero": 0, "aten::unique": 0}
    assert ref["aten::nonzero"] > 0 and ref["aten::_local_scalar_dense"] > 1  # the check can see them
