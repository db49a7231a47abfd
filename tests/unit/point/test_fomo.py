"""FOMO on the CPU: the backbone against torchvision's MobileNetV2 (parameter counts at both
widths, converted weights giving the same features), weights names, and the public user path
(train on shapes, val, predict, save and reload)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo.model import Model
from libreyolo.registry import families, parse_weights_name

WIDTH = {"035": 0.35, "100": 1.0}


def _reference_trunk(tv: torch.nn.Module) -> torch.nn.Module:
    """torchvision's features up to stride 8 plus the next block's 1x1 expansion: FOMO's cut."""
    return torch.nn.Sequential(tv.features[:7], tv.features[7].conv[0])


@pytest.mark.parametrize("size", ["035", "100"])
def test_backbone_matches_torchvision_mobilenet_v2(size: str) -> None:
    tvm = pytest.importorskip("torchvision.models")
    from libreyolo.models.fomo.convert import load_torchvision_backbone
    from libreyolo.models.fomo.nn import IMAGENET_MEAN, IMAGENET_STD, build_fomo

    torch.manual_seed(0)
    tv = tvm.mobilenet_v2(width_mult=WIDTH[size]).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # non-trivial BatchNorm statistics, so that a misplaced tensor shows
        for m in tv.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(0.2 * torch.rand(m.num_features, generator=gen) - 0.1)
                m.running_var.copy_(0.5 + torch.rand(m.num_features, generator=gen))
                m.weight.copy_(0.5 + torch.rand(m.num_features, generator=gen))
    ref = _reference_trunk(tv)
    net = build_fomo(size=size, nc=2)
    n_ours = sum(p.numel() for p in net.backbone.parameters())
    assert n_ours == sum(p.numel() for p in ref.parameters())  # 15,840 at 0.35, 62,016 at 1.0
    load_torchvision_backbone(net, tv.state_dict()).eval()
    x = torch.rand(2, 3, 64, 96, generator=gen)
    std = (x - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        want, got = ref(std), net.backbone(std)
    assert got.shape == want.shape == (2, net.backbone.channels, 8, 12)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), float((got - want).abs().max())


def test_converter_names_a_foreign_key() -> None:
    from libreyolo.errors import CheckpointError
    from libreyolo.models.fomo.convert import load_torchvision_backbone
    from libreyolo.models.fomo.nn import build_fomo

    with pytest.raises(CheckpointError, match="backbone.0.weight"):
        load_torchvision_backbone(build_fomo(size="035", nc=1), {"backbone.0.weight": torch.zeros(1)})


def test_names_sizes_and_counts() -> None:
    fam = families()["fomo"]
    assert parse_weights_name("LibreFOMO035-point.pt").task == "point"
    counts = {s: sum(p.numel() for p in fam(size=s, nc=1).net.parameters()) for s in fam.SIZES}
    assert counts == {"035": 15840 + 96 * 32 + 32 + 32 * 2 + 2, "100": 62016 + 192 * 32 + 32 + 32 * 2 + 2}


def test_train_val_predict_and_reload_on_shapes(tmp_path: Path) -> None:
    from libreyolo.data.shapes import ensure_shapes_dataset

    data = ensure_shapes_dataset(tmp_path / "ds", n_train=16, n_val=8, imgsz=64)
    torch.manual_seed(0)
    model = Model(families()["fomo"](size="035", nc=6))
    out = model.train(data=str(data), epochs=2, imgsz=64, batch=8, workers=0, device="cpu",
                      project=str(tmp_path / "runs"), verbose=False, tensorboard=False, plots=False)
    assert {"precision", "recall", "F1", "fitness"} <= set(out) and 0.0 <= out["F1"] <= 1.0
    assert Path(out["best"]).is_file() and out["epochs"] == 2
    m = model.val(data=str(data), imgsz=64, batch=8, workers=0, verbose=False)
    assert m["instances"] > 0 and set(m.per_class) <= set(range(6)) and m.counts.shape == (6, 3)
    img = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    (r,) = model.predict(img, imgsz=64, conf=0.0)
    assert r.points is not None and r.boxes is None and r.points.shape[1] == 4
    assert ((r.points[:, 0] >= 0) & (r.points[:, 0] <= 80) & (r.points[:, 1] >= 0) & (r.points[:, 1] <= 48)).all()
    again = LibreYOLO(out["best"])
    assert (again.FAMILY, again.task, again.size, again.nc) == ("fomo", "point", "035", 6)
    (r2,) = again.predict(img, imgsz=64, conf=0.0)
    assert r2.points.shape[1] == 4 and r2.orig_shape == (48, 80)
