"""From the network's depth map to one in original image pixels.

The network sees the image letterboxed (aspect kept, 114 grey padding, :mod:`libreyolo.ops.letterbox`)
and returns a map at (or near) its input size. :func:`to_original` resizes it bilinearly to the
input size when they differ, cuts the padding away and resizes the image's part bilinearly to the
original size.
"""

from __future__ import annotations

import torch  # noqa: F401 - the docstring example uses it
import torch.nn.functional as F
from torch import Tensor


def to_original(depth: Tensor, *, input_hw: tuple[int, int], ratio: float, pad: tuple[float, float],
                orig_hw: tuple[int, int]) -> Tensor:
    """depth (Tensor[h, w], any float) of a letterboxed input of ``input_hw`` -> Tensor[H0, W0]
    float32 for the original image of ``orig_hw``; ``ratio`` and ``pad`` (left, top) are the
    letterbox's.

    Example:
        >>> d = torch.arange(16.0).view(4, 4)  # a 2x4 image letterboxed into 4x4 (one padded row each side)
        >>> to_original(d, input_hw=(4, 4), ratio=1.0, pad=(0.0, 1.0), orig_hw=(2, 4)).tolist()
        [[4.0, 5.0, 6.0, 7.0], [8.0, 9.0, 10.0, 11.0]]
    """
    h0, w0 = (int(v) for v in orig_hw)
    x = depth.float()[None, None]
    if tuple(x.shape[2:]) != tuple(input_hw):
        x = F.interpolate(x, size=tuple(input_hw), mode="bilinear", align_corners=False)
    nh, nw = max(1, int(round(h0 * ratio))), max(1, int(round(w0 * ratio)))
    left, top = int(pad[0]), int(pad[1])
    x = x[:, :, top:top + nh, left:left + nw]
    if (nh, nw) != (h0, w0):
        x = F.interpolate(x, size=(h0, w0), mode="bilinear", align_corners=False)
    return x[0, 0]
