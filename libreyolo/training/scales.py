"""Multi-scale training (``multi_scale=f``) on a small fixed set of shape buckets.

A random size per batch would give the training capture a new input shape almost every step
(SPEC T-3: it would never capture). Instead :func:`scale_buckets` fixes at most
:data:`MAX_BUCKETS` stride multiples evenly spread over ``[imgsz * (1 - f), imgsz * (1 + f)]``,
always including ``imgsz``; :class:`MultiScale` picks one per batch and resizes the batch on the
device with one ``F.interpolate`` (bilinear). With ``cuda_graph=True`` each bucket is captured
once (the capture is keyed by input shape; its cap on graphs follows the buckets:
:func:`graph_cap`).

The pick of batch ``i`` in epoch ``e`` is a pure function of ``(seed, e, i)`` through its own
``numpy`` generator: it draws nothing from the global ``random`` / ``numpy`` / ``torch`` streams
(a run with ``multi_scale=0`` never builds a :class:`MultiScale`, so its random state is what it
always was), a resumed run picks the sizes the uninterrupted one would have, and every DDP rank
picks the same size for the same step. Targets need no change: boxes are normalised to the image
(``cx cy w h`` in [0, 1]) and the losses scale them by the size of the network's feature maps.
A rectangular (``rect``) batch keeps its aspect: each side is scaled by ``size / imgsz`` and
rounded to a stride multiple.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

MAX_BUCKETS = 5
# a separate stream from the dataset's augmentation generators, which are seeded by (seed, epoch, index)
_STREAM = 0x5CA1E


def scale_buckets(imgsz: int, fraction: float, *, stride: int = 32, n: int = MAX_BUCKETS) -> tuple[int, ...]:
    """The training sizes of ``multi_scale=fraction``: up to ``n`` stride multiples evenly spread
    over ``[imgsz * (1 - fraction), imgsz * (1 + fraction)]`` (at least ``stride``), ``imgsz``
    included, ascending. ``fraction=0``: ``(imgsz,)``.

    Example:
        >>> scale_buckets(640, 0.5)
        (320, 480, 640, 800, 960)
    """
    if not 0 <= fraction < 1:
        raise ConfigError(f"multi_scale must be in [0, 1) (a fraction of imgsz), got {fraction}")
    lo = max(stride, math.ceil(imgsz * (1 - fraction) / stride) * stride)
    hi = max(lo, math.floor(imgsz * (1 + fraction) / stride) * stride)
    picks = {int(math.floor(v / stride + 0.5)) * stride for v in np.linspace(lo, hi, max(n, 1))}
    picks.add(int(imgsz))
    if len(picks) > n:  # imgsz displaced an evenly spread size: drop the one nearest imgsz
        others = sorted(picks - {imgsz}, key=lambda v: (abs(v - imgsz), v))
        picks.discard(others[0])
    return tuple(sorted(picks))


def graph_cap(n_buckets: int, default: int) -> int:
    """Training graphs to allow with ``n_buckets`` sizes: one per bucket plus one partial last
    batch, as the default cap allows one size plus its partial batch."""
    return max(default, n_buckets + default - 1)


class MultiScale:
    """Per-batch size choice and device-side resize (see the module docstring).

    Example:
        >>> ms = MultiScale(imgsz=640, fraction=0.5, seed=0)
        >>> ms.size(epoch=0, i=3) in ms.buckets
        True
        >>> imgs = ms(imgs, epoch=0, i=3)  # doctest: +SKIP
    """

    def __init__(self, *, imgsz: int, fraction: float, seed: int, stride: int = 32) -> None:
        self.imgsz, self.seed, self.stride = int(imgsz), int(seed), int(stride)
        self.buckets = scale_buckets(imgsz, fraction, stride=stride)

    def size(self, *, epoch: int, i: int) -> int:
        """The long-side size of batch ``i`` of ``epoch`` (one of :attr:`buckets`)."""
        g = np.random.default_rng([_STREAM, self.seed & 0x7FFFFFFFFFFFFFFF, int(epoch), int(i)])
        return self.buckets[int(g.integers(len(self.buckets)))]

    def shape(self, hw: tuple[int, int], size: int) -> tuple[int, int]:
        """(H, W) of a batch of shape ``hw`` (built at ``imgsz``) at ``size``."""
        s, k = size / self.imgsz, self.stride
        return tuple(max(k, int(math.floor(v * s / k + 0.5)) * k) for v in hw)  # type: ignore[return-value]

    def __call__(self, imgs: Tensor, *, epoch: int, i: int) -> Tensor:
        """``imgs`` (Tensor[B, C, H, W] float) resized to batch ``i``'s size; unchanged at ``imgsz``."""
        hw = (int(imgs.shape[-2]), int(imgs.shape[-1]))
        new = self.shape(hw, self.size(epoch=epoch, i=i))
        if new == hw:
            return imgs
        return torch.nn.functional.interpolate(imgs, size=new, mode="bilinear", align_corners=False)
