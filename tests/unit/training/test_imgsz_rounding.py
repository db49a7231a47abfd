"""The training ``imgsz`` is rounded to the model's own stride (32 for the detectors, 14 for DINOv2's
patches, 16 for NAFNet, 1 for ESRGAN / SwinIR), so training and validation agree on the size."""

from __future__ import annotations

import logging

from libreyolo.registry import families
from libreyolo.training.config import TrainConfig, imgsz_multiple


def test_rounding_follows_the_model_stride(caplog):
    dino = families()["dinov2"](size="s14", nc=3)
    yolo = families()["yolo9"](size="t", nc=3)
    assert imgsz_multiple(dino) == 14 and imgsz_multiple(yolo) == 32
    assert TrainConfig.from_overrides({"imgsz": 518}, multiple=imgsz_multiple(dino)).imgsz == 518
    with caplog.at_level(logging.WARNING):
        assert TrainConfig.from_overrides({"imgsz": 100}, multiple=imgsz_multiple(dino)).imgsz == 112
    assert "training at imgsz=112" in caplog.text
    assert TrainConfig.from_overrides({"imgsz": 518}, multiple=imgsz_multiple(yolo)).imgsz == 544  # as before


def test_rounding_uses_the_own_stride_of_stride_1_and_16_families():
    """A restoration network of stride 1 (ESRGAN, SwinIR) trains at any size and NAFNet (stride 16)
    at multiples of 16: neither is pushed to a multiple of 32 as the detectors are."""
    esrgan = families()["esrgan"]
    nafnet = families()["nafnet"]
    assert esrgan.STRIDE == 1 and nafnet.STRIDE == 16
    for fam, want in ((esrgan, 100), (nafnet, 112)):
        multiple = imgsz_multiple(fam.__new__(fam))  # the stride is a class attribute: no network needed
        assert TrainConfig.from_overrides({"imgsz": 100}, multiple=multiple).imgsz == want, fam.FAMILY
    assert TrainConfig.from_overrides({"imgsz": 48}, multiple=imgsz_multiple(nafnet.__new__(nafnet))).imgsz == 48
