"""Keypoint ops shared by the pose task and the pose families: OKS sigmas, object keypoint
similarity, the horizontal-flip permutation.

OKS (COCO): for a predicted and a ground-truth keypoint set of one object,
``mean over labelled keypoints i of exp(-d_i^2 / (2 * s^2 * k_i^2))`` with ``d_i`` the pixel
distance, ``s^2`` the object's area and ``k_i = 2 * sigma_i``. Sigmas:

- K = 17: COCO's person sigmas (:data:`COCO_SIGMAS`), for training and validation.
- other K, validation: a uniform sigma equal to the mean of COCO's 17 (:data:`UNIFORM_SIGMA`,
  0.0669): every keypoint is held to the strictness of an average COCO landmark, whatever K is
  (COCO's sharpest, eyes and nose, are 0.025; its loosest, hips, 0.107). A dataset yaml may give
  its own ``kpt_sigmas`` list instead.
- other K, training loss: a uniform ``1 / K`` (Ultralytics' choice for its pose loss): much wider,
  so that the loss still has a gradient for the far-off keypoints of an untrained head.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

#: COCO's 17 person-keypoint sigmas (nose, eyes, ears, shoulders, elbows, wrists, hips, knees, ankles)
COCO_SIGMAS = (0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072, 0.062, 0.062, 0.107, 0.107,
               0.087, 0.087, 0.089, 0.089)
UNIFORM_SIGMA = round(sum(COCO_SIGMAS) / len(COCO_SIGMAS), 4)  # 0.0669


def metric_sigmas(nkpt: int, given: Sequence[float] | None = None) -> list[float]:
    """The OKS sigmas validation uses for ``nkpt`` keypoints (module docstring).

    Example:
        >>> metric_sigmas(17)[:2], metric_sigmas(3), metric_sigmas(2, [0.1, 0.2])
        ([0.026, 0.025], [0.0669, 0.0669, 0.0669], [0.1, 0.2])
    """
    if given is not None:
        return [float(s) for s in given]
    return list(COCO_SIGMAS) if nkpt == 17 else [UNIFORM_SIGMA] * nkpt


def loss_sigmas(nkpt: int) -> list[float]:
    """The OKS sigmas of the training loss for ``nkpt`` keypoints (module docstring).

    Example:
        >>> loss_sigmas(4)
        [0.25, 0.25, 0.25, 0.25]
    """
    return list(COCO_SIGMAS) if nkpt == 17 else [1.0 / nkpt] * nkpt


def keypoint_similarity(pred: Tensor, gt: Tensor, area: Tensor, sigmas: Tensor) -> Tensor:
    """Per-keypoint similarity ``exp(-d^2 / (2 * area * (2 sigma)^2))``.

    pred, gt (Tensor[..., K, >=2], pixels); area (Tensor[...]); sigmas (Tensor[K]). Returns Tensor[..., K].

    Example:
        >>> g = torch.tensor([[[10.0, 10.0], [20.0, 20.0]]])
        >>> keypoint_similarity(g, g, torch.tensor([100.0]), torch.tensor([0.1, 0.1])).tolist()
        [[1.0, 1.0]]
    """
    d2 = ((pred[..., :2] - gt[..., :2]) ** 2).sum(-1)
    return torch.exp(-d2 / (2.0 * area[..., None].clamp(min=1e-9) * (2.0 * sigmas) ** 2))


def check_flip_idx(flip_idx: Sequence[int], nkpt: int) -> list[int]:
    """``flip_idx`` as a list after checking it is a permutation of ``0..nkpt-1`` that is its own
    inverse (flipping twice gives the keypoints back); ``ValueError`` naming the problem otherwise.

    Example:
        >>> check_flip_idx([1, 0, 2], 3)
        [1, 0, 2]
    """
    idx = [int(i) for i in flip_idx]
    if sorted(idx) != list(range(nkpt)):
        raise ValueError(f"flip_idx {idx} is not a permutation of 0..{nkpt - 1} ({nkpt} keypoints)")
    bad = [i for i in range(nkpt) if idx[idx[i]] != i]
    if bad:
        raise ValueError(f"flip_idx {idx} swaps keypoint {bad[0]} with {idx[bad[0]]} but not back; a left/right "
                         "swap must be symmetric")
    return idx
