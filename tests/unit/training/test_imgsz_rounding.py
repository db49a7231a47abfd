"""The training ``imgsz`` is rounded to 32, or to the model's own stride where 32 is not a multiple
of it (DINOv2's 14-pixel patches), so training and validation agree on the size."""

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
