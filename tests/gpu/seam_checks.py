"""Shared GPU check of a seam-split (trunk captured) training step against eager (SPEC T-6)."""

from __future__ import annotations

from typing import Any

import torch

IMGSZ, BATCH = 320, 2


def assert_seam_step_zero_matches_eager(fam: type, size: str) -> Any:
    """Step zero of the seam arm vs two seeded eager arms; returns the seam arm after two more steps.

    Loss bit-identical, BatchNorm buffers equal, gradients (over all parameters together) no further
    from eager than two eager runs are from each other (atomics in the decoder's backward), with a
    floor for when eager happens to repeat exactly. Single tensors are not compared relatively: the
    bias of a BatchNorm that feeds another BatchNorm has a gradient of pure cancellation noise.
    """
    from benchmarks.bench_rtdetr import TrainArm, _max_rel, _synthetic_batch, global_rel

    dev = torch.device("cuda", 0)
    data = _synthetic_batch(BATCH, IMGSZ, dev)
    eager = TrainArm(fam, size, device=dev, amp=None, graph=False)
    eager_b = TrainArm(fam, size, device=dev, amp=None, graph=False)
    seam = TrainArm(fam, size, device=dev, amp=None, graph=True)
    loss_e, g_e = eager.step(data, grads=True)
    _, g_b = eager_b.step(data, grads=True)
    loss_s, g_s = seam.step(data, grads=True)
    assert seam.tg is not None and seam.tg.failed is None and seam.tg.live
    assert torch.equal(loss_e, loss_s)  # step 0: bit-identical loss (T-6)
    for (k, a), (_, b) in zip(eager.net.named_buffers(), seam.net.named_buffers(), strict=True):
        assert torch.equal(a, b), f"buffer {k} drifted under capture warm-up"
    diff, spread = global_rel(g_e, g_s), global_rel(g_e, g_b)
    worst, at = _max_rel(g_e, g_s)
    assert diff <= max(1e-5, 4 * spread), (
        f"gradients differ by {diff:.3g} (global relative; eager-vs-eager {spread:.3g}; worst tensor {at} {worst:.3g})")
    for _ in range(2):  # replays keep training
        loss, _ = seam.step(data)
        assert torch.isfinite(loss)
    return seam
