"""benchmarks/parity_train.py builds a classification batch for classify families."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from libreyolo.registry import families

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


def _load():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("parity_train_under_test", BENCH / "parity_train.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))


def test_classify_batch_feeds_the_family_criterion():
    mod = _load()
    b = mod.classify_batch(batch=4, imgsz=32, nc=6, seed=1, device=torch.device("cpu"))
    assert b["img"].shape == (4, 3, 32, 32) and b["cls"].shape == (4,) and int(b["cls"].max()) < 6
    assert torch.equal(b["cls"], mod.classify_batch(batch=4, imgsz=32, nc=6, seed=1, device=torch.device("cpu"))["cls"])
    fam = families()["resnet"]
    model = fam(size="18", nc=6)
    loss, items = model.build_criterion()(model.net.train()(b["img"]), b)
    assert torch.isfinite(loss) and items.shape == (1,)
