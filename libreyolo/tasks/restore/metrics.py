"""Restoration metrics: PSNR and SSIM of images in [0, 1].

- PSNR: ``10 log10(1 / MSE)`` over every pixel and channel (data range 1); identical images
  give ``inf``.
- SSIM (Wang et al. 2004): local statistics under an 11x11 Gaussian window (sigma 1.5, the
  kernel truncated at 3.5 sigma and normalised), ``K1 = 0.01``, ``K2 = 0.03``, data range 1,
  population (not sample) covariances; the map is averaged over the positions where the
  window lies inside the image, per channel, then over the channels. This is the definition
  scikit-image's ``structural_similarity(..., gaussian_weights=True, sigma=1.5,
  use_sample_covariance=False, data_range=1, channel_axis=0)`` computes (the tests compare).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def psnr(pred: Tensor, target: Tensor) -> float:
    """PSNR in dB of two tensors of equal shape with values in [0, 1].

    Example:
        >>> round(psnr(torch.full((3, 4, 4), 0.5), torch.full((3, 4, 4), 0.6)), 4)
        20.0
    """
    if pred.shape != target.shape:
        raise ValueError(f"psnr: shapes {tuple(pred.shape)} and {tuple(target.shape)} differ")
    mse = float((pred.double() - target.double()).pow(2).mean())
    return math.inf if mse == 0 else 10.0 * math.log10(1.0 / mse)


def gaussian_window(size: int = 11, sigma: float = 1.5) -> Tensor:
    """Tensor[size, size] float64, the normalised 2-D Gaussian (outer product of the 1-D one)."""
    r = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-0.5 * (r / sigma) ** 2)
    g = g / g.sum()
    return g[:, None] * g[None, :]


def ssim(pred: Tensor, target: Tensor) -> float:
    """Mean SSIM of two images Tensor[C, H, W] (or [H, W]) in [0, 1], H and W >= 11.

    Example:
        >>> x = torch.rand(3, 16, 16, generator=torch.Generator().manual_seed(0))
        >>> ssim(x, x), round(ssim(x, 1 - x), 2) < 0
        (1.0, True)
    """
    if pred.shape != target.shape:
        raise ValueError(f"ssim: shapes {tuple(pred.shape)} and {tuple(target.shape)} differ")
    x, y = pred.double(), target.double()
    if x.ndim == 2:
        x, y = x[None], y[None]
    if min(x.shape[-2:]) < 11:
        raise ValueError(f"ssim needs images of at least 11x11 pixels (its window), got {tuple(x.shape[-2:])}")
    c = x.shape[0]
    w = gaussian_window().to(x.device).expand(c, 1, 11, 11)

    def filt(t: Tensor) -> Tensor:
        return F.conv2d(t[None], w, groups=c)[0]  # valid positions only: the window inside the image

    mx, my = filt(x), filt(y)
    vx, vy, cxy = filt(x * x) - mx * mx, filt(y * y) - my * my, filt(x * y) - mx * my
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return float(s.mean(dim=(1, 2)).mean())


def quantise(img: Tensor) -> Tensor:
    """A float image -> the 8-bit levels a saved picture holds: ``round(clamp(x, 0, 1) * 255) / 255``.

    Example:
        >>> quantise(torch.tensor([-0.1, 0.5, 1.2])).mul(255).tolist()
        [0.0, 128.0, 255.0]
    """
    return img.float().clamp(0, 1).mul(255).round().div(255)
