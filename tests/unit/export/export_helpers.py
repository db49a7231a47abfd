"""Helpers of the export tests: real input images and an order-tolerant row comparison."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from libreyolo import SAMPLE_IMAGE


def sample_batch(size: int) -> torch.Tensor:
    """Tensor[2, 3, size, size] in [0, 1]: the sample photo resized, and its mirror image."""
    img = np.asarray(Image.open(SAMPLE_IMAGE).convert("RGB").resize((size, size)), dtype=np.float32) / 255
    x = torch.from_numpy(img).permute(2, 0, 1)
    return torch.stack((x, x.flip(-1)))


def assert_same_rows(got: torch.Tensor, ref: torch.Tensor, *, box_tol: float, score_tol: float = 1e-4) -> None:
    """got, ref (Tensor[k, 6]: x1, y1, x2, y2, score, class) hold the same rows, up to the order of
    near-tied scores: scores agree position by position (both sorted), and every row of one has a
    row of the other with the same class, boxes within ``box_tol`` px and score within
    ``score_tol``; rows whose score is within ``score_tol`` of the last (lowest kept) score are
    exempt, as a top-k may cut a tie there either way."""
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if not len(ref):
        return
    assert torch.allclose(got[:, 4], ref[:, 4], atol=score_tol, rtol=0), float((got[:, 4] - ref[:, 4]).abs().max())
    floor = float(ref[-1, 4]) + score_tol
    for a, b in ((got, ref), (ref, got)):
        rows = a[a[:, 4] > floor]
        box_d = torch.cdist(rows[:, :4], b[:, :4], p=float("inf"))  # (n, k)
        ok = (box_d <= box_tol) & ((rows[:, None, 4] - b[None, :, 4]).abs() <= score_tol) \
            & (rows[:, None, 5] == b[None, :, 5])
        missing = (~ok.any(1)).nonzero().flatten()
        assert not len(missing), f"{len(missing)} rows without a match, first: {rows[missing[0]].tolist()}"
