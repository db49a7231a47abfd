"""From prototype-resolution mask probabilities to binary masks in original image pixels."""

from __future__ import annotations

import torch  # noqa: F401 - the docstring example uses it
import torch.nn.functional as F
from torch import Tensor

CHUNK = 16  # masks upsampled together


def to_original(probs: Tensor, *, input_hw: tuple[int, int], ratio: float, pad: tuple[float, float],
                orig_hw: tuple[int, int], threshold: float = 0.5) -> Tensor:
    """probs (Tensor[n, h, w] in [0, 1], at a fraction of a letterboxed input of ``input_hw``) ->
    Tensor[n, H0, W0] bool for the original image of ``orig_hw``: bilinear upsampling to the
    input, padding cut (``ratio``, ``pad`` = left, top of the letterbox), bilinear resize to the
    original size, ``> threshold``.

    Example:
        >>> p = torch.zeros(1, 4, 4); p[0, :, 2:] = 1.0
        >>> to_original(p, input_hw=(16, 16), ratio=0.5, pad=(0.0, 4.0), orig_hw=(16, 32))[0, 0].tolist()[14:18]
        [False, False, True, True]
    """
    h0, w0 = (int(v) for v in orig_hw)
    if probs.shape[0] == 0:
        return torch.zeros((0, h0, w0), dtype=torch.bool, device=probs.device)
    if probs.shape[0] > CHUNK:  # bounded float memory at the original size: a few masks at a time
        return torch.cat([to_original(c, input_hw=input_hw, ratio=ratio, pad=pad, orig_hw=orig_hw, threshold=threshold)
                          for c in probs.split(CHUNK)])
    x = probs.float()[None]
    if tuple(x.shape[2:]) != tuple(input_hw):
        x = F.interpolate(x, size=tuple(input_hw), mode="bilinear", align_corners=False)
    nh, nw = max(1, int(round(h0 * ratio))), max(1, int(round(w0 * ratio)))
    left, top = int(pad[0]), int(pad[1])
    x = x[:, :, top:top + nh, left:left + nw]
    if (nh, nw) != (h0, w0):
        x = F.interpolate(x, size=(h0, w0), mode="bilinear", align_corners=False)
    return x[0] > threshold
