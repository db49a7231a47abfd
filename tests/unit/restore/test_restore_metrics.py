"""PSNR and SSIM on known inputs (scikit-image as the reference when installed), the pixel losses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from libreyolo.models._base.restore import RestoreLoss
from libreyolo.tasks.restore.metrics import gaussian_window, psnr, quantise, ssim
from libreyolo.tasks.restore.scoring import RestoreScorer


def test_psnr_known_values() -> None:
    a = torch.zeros(3, 8, 8)
    assert psnr(a, a) == math.inf
    assert psnr(a, torch.full((3, 8, 8), 0.1)) == pytest.approx(20.0)
    b = a.clone()
    b[0, 0, 0] = 1.0  # MSE = 1 / 192
    assert psnr(a, b) == pytest.approx(10 * math.log10(192))
    with pytest.raises(ValueError, match="differ"):
        psnr(a, torch.zeros(3, 8, 9))


def test_ssim_identity_constant_and_window() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 24, 24, generator=g)
    assert ssim(x, x) == pytest.approx(1.0)
    assert ssim(x, (x + 0.05 * torch.randn(3, 24, 24, generator=g)).clamp(0, 1)) < 0.99
    # two constant images c1, c2: SSIM = (2 c1 c2 + C1) / (c1^2 + c2^2 + C1)
    c1, c2, k = 0.2, 0.6, 0.01 ** 2
    assert ssim(torch.full((1, 12, 12), c1), torch.full((1, 12, 12), c2)) == pytest.approx(
        (2 * c1 * c2 + k) / (c1 * c1 + c2 * c2 + k))
    assert float(gaussian_window().sum()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 11x11"):
        ssim(torch.zeros(3, 8, 8), torch.zeros(3, 8, 8))


def test_ssim_and_psnr_match_scikit_image() -> None:
    metrics = pytest.importorskip("skimage.metrics")
    rng = np.random.default_rng(0)
    a = rng.random((3, 32, 40))
    b = np.clip(a + 0.1 * rng.standard_normal(a.shape), 0, 1)
    ref = metrics.structural_similarity(a, b, data_range=1.0, channel_axis=0, gaussian_weights=True, sigma=1.5,
                                        use_sample_covariance=False)
    assert ssim(torch.from_numpy(a), torch.from_numpy(b)) == pytest.approx(ref, abs=1e-9)
    assert psnr(torch.from_numpy(a), torch.from_numpy(b)) == pytest.approx(
        metrics.peak_signal_noise_ratio(a, b, data_range=1.0), abs=1e-9)


def test_losses_and_scorer() -> None:
    pred = torch.full((2, 3, 4, 4), 0.5, requires_grad=True)
    loss, items = RestoreLoss("l1")(pred, {"target": torch.zeros(2, 3, 4, 4, dtype=torch.uint8)})
    assert float(loss.detach()) == pytest.approx(1.0) and float(items) == pytest.approx(0.5)
    loss.backward()
    assert pred.grad is not None and float(pred.grad.abs().sum()) > 0
    loss, items = RestoreLoss("psnr")(torch.full((1, 3, 4, 4), 0.1), {"target": torch.zeros(1, 3, 4, 4)})
    assert float(items) == pytest.approx(-20.0, abs=1e-4)  # minus the PSNR
    with pytest.raises(Exception, match="scale"):
        RestoreLoss()(torch.zeros(1, 3, 8, 8), {"target": torch.zeros(1, 3, 32, 32)})
    target = torch.randint(0, 256, (1, 3, 16, 16), dtype=torch.uint8)
    scorer = RestoreScorer()
    out = target[0].float() / 255
    scorer.add({"target": target, "valid": [(16, 16)]}, [out], input_hw=(16, 16))
    m = scorer.result(images=1, speed={}, ms_per_image=0.0, losses={}, save_dir=None)
    assert m["psnr"] == 100.0 and m["ssim"] == pytest.approx(1.0) and m["fitness"] == m["psnr"]
    assert torch.equal(quantise(out), out)
