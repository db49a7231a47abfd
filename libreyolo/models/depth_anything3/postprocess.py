"""The sky step of the Depth Anything 3 sizes with a sky head (eager: boolean masks, a quantile,
a branch on pixel counts; never captured).

Per image, pixels with sky probability ``>= 0.3`` are sky. When both the sky and the non-sky pixels
number more than 10, every sky pixel's depth becomes the 0.99 quantile of the non-sky depths (the
far end of the scene); otherwise the map is kept. The step changes only sky pixels and reads only
non-sky ones, so applying it twice equals applying it once (prediction runs it as the eager stage
of the seam and the postprocess runs it again for the ONNX Runtime backend, whose graph holds the
network only).
"""

from __future__ import annotations

import torch
from torch import Tensor

SKY_THRESHOLD = 0.3
MIN_PIXELS = 10  # fewer sky or non-sky pixels than this (or equal): the map is left as is
QUANTILE = 0.99


def sky_step(depth: Tensor, sky: Tensor) -> Tensor:
    """Depth Tensor[B, 1, H, W] with the sky pixels (``sky`` Tensor[B, 1, H, W] ``>= 0.3``) set to
    the 0.99 quantile of the image's other depths (module docstring); a new tensor.

    Example:
        >>> depth = torch.arange(1.0, 101.0).view(1, 1, 10, 10)
        >>> sky = torch.zeros_like(depth); sky[..., :2, :] = 1.0  # the top 20 pixels are sky
        >>> out = sky_step(depth, sky)
        >>> round(float(out[0, 0, 0, 0]), 2), float(out[0, 0, 5, 5])
        (99.21, 56.0)
    """
    out = depth.clone()
    for i in range(depth.shape[0]):
        d, non_sky = out[i], sky[i] < SKY_THRESHOLD
        n = int(non_sky.sum())
        if n <= MIN_PIXELS or non_sky.numel() - n <= MIN_PIXELS:
            continue
        far = torch.quantile(d[non_sky].float(), QUANTILE).to(d.dtype)
        d[~non_sky] = far
    return out
