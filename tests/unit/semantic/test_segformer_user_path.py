"""SegFormer through the user path on a CPU: the weights name, predict (Results.semantic at the
original size), training on shapes-sem (the loss falls; the trainer writes a checkpoint that
loads back), val (mIoU), and the fused-attention flag (SPEC K-9: present, off by default)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _steps import loss_history

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.data.shapes_sem import ensure_shapes_sem_dataset
from libreyolo.kernels.attention import set_fused_attention
from libreyolo.models.segformer.nn import EfficientSelfAttention
from libreyolo.registry import parse_weights_name


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_shapes_sem_dataset(tmp_path_factory.mktemp("sem"), n_train=4, n_val=2, imgsz=64)


def test_weights_name_and_predict_fill_results_semantic() -> None:
    assert parse_weights_name("LibreSegFormerb0-sem.pt").task == "semantic"
    torch.manual_seed(0)
    model = LibreYOLO("LibreSegFormerb0-sem.pt", pretrained=False, nc=3)
    assert (model.FAMILY, model.task, model.size, model.imgsz) == ("segformer", "semantic", "b0", 512)
    (r,) = model(SAMPLE_IMAGE, imgsz=64)
    assert r.semantic.shape == r.orig_shape == (480, 640) and r.semantic.dtype == torch.int64
    assert int(r.semantic.min()) >= 0 and int(r.semantic.max()) < 3 and r.boxes is None and r.probs is None
    # a batch of two differently sized arrays, square letterbox: each map at its own image's size
    imgs = [np.random.default_rng(i).integers(0, 255, (h, w, 3), dtype=np.uint8) for i, (h, w) in
            enumerate([(40, 70), (64, 30)])]
    out = model.predict(imgs, imgsz=64, batch=2, rect=False)
    assert [tuple(o.semantic.shape) for o in out] == [(40, 70), (64, 30)]


def test_the_loss_falls_over_a_few_steps(data: Path) -> None:
    losses = loss_history("LibreSegFormerb0-sem.pt", data, imgsz=64, augment=True)
    assert losses[-1] < 0.8 * losses[0], losses


def test_train_then_val_then_reload(data: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LibreYOLO("LibreSegFormerb0-sem.pt", pretrained=False, nc=3)
    out = model.train(data=str(data), epochs=1, imgsz=64, batch=2, workers=0, project=str(tmp_path), lr0=1e-3,
                      plots=False)
    assert model.nc == 7 and model.names[1] == "circle"  # the head was rebuilt for the data's classes
    assert 0.0 <= out["mIoU"] <= 1.0 and out["fitness"] == out["mIoU"] and Path(out["best"]).is_file()
    header = (Path(out["save_dir"]) / "results.csv").read_text().splitlines()[0]
    assert "train/ce_loss" in header and "val/ce_loss" in header and "metrics/mIoU" in header, header
    m = model.val(data=str(data), imgsz=64, batch=2)
    assert m["images"] == 2.0 and 0.0 <= m["mIoU"] <= 1.0 and 0.0 <= m["aAcc"] <= 1.0
    assert m.confusion_matrix.shape == (7, 7) and int(m.confusion_matrix.sum()) > 0
    again = LibreYOLO(out["best"])
    assert (again.FAMILY, again.task, again.nc) == ("segformer", "semantic", 7)


def test_fused_attention_flag_is_off_by_default_and_flips() -> None:
    model = LibreYOLO("LibreSegFormerb0-sem.pt", pretrained=False, nc=3)
    mods = [m for m in model.net.modules() if isinstance(m, EfficientSelfAttention)]
    assert len(mods) == 8 and not any(m.fused_attn for m in mods)
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    net = model.net.eval()
    with torch.no_grad():
        ref = net(x)
        assert set_fused_attention(net, enabled=True) == 8 and all(m.fused_attn for m in mods)
        fused = net(x)
    assert torch.allclose(ref, fused, rtol=1e-4, atol=1e-5)


def test_predict_save_and_save_txt_write_the_overlay_and_the_index_mask(tmp_path: Path) -> None:
    from libreyolo._cv import cv2

    torch.manual_seed(0)
    model = LibreYOLO("LibreSegFormerb0-sem.pt", pretrained=False, nc=3)
    (r,) = model.predict(SAMPLE_IMAGE, imgsz=64, save=True, save_txt=True, save_dir=str(tmp_path / "run"))
    assert (tmp_path / "run" / "sample.jpg").is_file()
    mask = cv2.imread(str(tmp_path / "run" / "masks" / "sample.png"), cv2.IMREAD_UNCHANGED)
    assert mask.shape == (480, 640) and np.array_equal(mask, r.semantic.numpy())


def test_the_parity_harness_builds_and_probes_segformer() -> None:
    """What benchmarks/parity_predict.py does before capturing: the probe model of the semantic task
    builds (nc=80, random BatchNorm statistics, fused) and its eager forward is deterministic and
    differs between the two probe distributions."""
    from libreyolo.graphs.parity import build_probe_model, compare_outputs, probe_batch
    from libreyolo.registry import families

    cls = families()["segformer"]
    model = build_probe_model(cls, size="b0", task="semantic", device="cpu", seed=0)
    assert model.task == "semantic" and model.fused and model.nc == 80
    assert float(model.net.head.fuse.bias.detach().abs().sum()) > 0  # the BatchNorm statistics were randomised, then folded
    xa, xb = (probe_batch(k, (1, 3, 64, 64), device="cpu", seed=i) for i, k in enumerate(("uniform", "image")))
    a = model.eager_forward(xa)
    assert compare_outputs(a, model.eager_forward(xa))["equal"] and not compare_outputs(a, model.eager_forward(xb))["equal"]
    assert tuple(a.shape) == (1, 80, 16, 16)
