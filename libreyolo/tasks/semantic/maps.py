"""From the network's logits to a class map in original image pixels.

The network sees the image letterboxed (aspect kept, 114 grey padding, :mod:`libreyolo.ops.letterbox`)
and returns logits at a fraction of that input (1/4 for SegFormer). :func:`to_original`
upsamples them bilinearly to the input size, cuts the padding away, resizes the image's part
bilinearly to the original size and takes the arg-max: the class of each original pixel comes
from logits interpolated there, never from a resized class map.
"""

from __future__ import annotations

import torch  # noqa: F401 - the docstring example uses it
import torch.nn.functional as F
from torch import Tensor


def to_original(logits: Tensor, *, input_hw: tuple[int, int], ratio: float, pad: tuple[float, float],
                orig_hw: tuple[int, int]) -> Tensor:
    """logits (Tensor[nc, h, w], any float) of a letterboxed input of ``input_hw`` -> Tensor[H0, W0]
    int64 class ids for the original image of ``orig_hw``; ``ratio`` and ``pad`` (left, top) are
    the letterbox's.

    Example:
        >>> logits = torch.zeros(2, 4, 4); logits[1, :, 2:] = 1.0; logits[0] = 1 - logits[1]  # class 1 on the right
        >>> to_original(logits, input_hw=(16, 16), ratio=1.0, pad=(0.0, 0.0), orig_hw=(16, 16))[0].tolist()
        [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]
    """
    h0, w0 = (int(v) for v in orig_hw)
    x = logits.float()[None]
    if tuple(x.shape[2:]) != tuple(input_hw):
        x = F.interpolate(x, size=tuple(input_hw), mode="bilinear", align_corners=False)
    nh, nw = max(1, int(round(h0 * ratio))), max(1, int(round(w0 * ratio)))
    left, top = int(pad[0]), int(pad[1])
    x = x[:, :, top:top + nh, left:left + nw]
    if (nh, nw) != (h0, w0):
        x = F.interpolate(x, size=(h0, w0), mode="bilinear", align_corners=False)
    return x[0].max(0).indices  # = argmax(0) (first maximum on ties), several times faster on a CPU

