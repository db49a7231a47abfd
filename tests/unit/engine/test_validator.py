"""Validation: original-pixel coordinates via ratio_pad, oracle predictions score 1, the public entry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libreyolo.engine.validator import ValConfig, validate
from libreyolo.errors import ConfigError
from libreyolo.model import Model
from libreyolo.ops.boxes import xywh_to_xyxy
from libreyolo.tasks.detect.scoring import DetectionScorer as _Collector


@pytest.fixture(scope="module")
def val_yaml(tmp_path_factory):
    from libreyolo.data.shapes import ensure_shapes_dataset

    return ensure_shapes_dataset(tmp_path_factory.mktemp("vshapes"), n_train=2, n_val=4, imgsz=80)


def test_oracle_predictions_score_one_in_original_pixels(val_yaml):
    from libreyolo.data.config import load_data_config
    from libreyolo.data.dataset import DetectionDataset, collate_detection

    d = load_data_config(str(val_yaml))
    ds = DetectionDataset(d.val, imgsz=64, augment=False, nc=d.nc)  # 80 px images letterboxed to 64
    batch = collate_detection([ds[i] for i in range(len(ds))])
    h, w = batch["img"].shape[2:]
    dets = []
    for i in range(len(ds)):
        sel = batch["batch_idx"] == i
        boxes = xywh_to_xyxy(batch["bboxes"][sel] * torch.tensor([w, h, w, h]))
        dets.append(torch.cat((boxes, torch.full((len(boxes), 1), 0.9), batch["cls"][sel, None].float()), 1))
    col = _Collector()
    col.add_batch(batch, dets, input_hw=(h, w))
    for i, im in enumerate(col.images):
        h0, w0 = ds.shapes[i]
        lab = ds.labels[i]
        want = xywh_to_xyxy(torch.from_numpy(lab[:, 1:5]) * torch.tensor([w0, h0, w0, h0])).numpy()
        order = np.lexsort(want.T[::-1])
        got = im["gt"][np.lexsort(im["gt"].T[::-1])]
        assert np.abs(got - want[order]).max() < 1.5  # original pixels (up to resize rounding)
        assert tuple(im["hw"]) == (h0, w0)
    out = col.score(d.names)
    assert out["mAP50-95"] == pytest.approx(1.0) and out["mAP50"] == pytest.approx(1.0)
    assert out["precision"] == pytest.approx(1.0, abs=1e-3) and out["recall"] == pytest.approx(1.0, abs=1e-3)
    assert out["fitness"] == pytest.approx(1.0) and out["instances"] == sum(len(x) for x in ds.labels)


def test_validate_entry_point(val_yaml):
    from libreyolo.models.yolo9.family import YOLO9

    model = Model(YOLO9(size="t", nc=6))
    out = validate(model, {"data": str(val_yaml), "imgsz": 64, "batch": 2, "workers": 0, "device": "cpu",
                           "verbose": False})
    for k in ("mAP50-95", "mAP50", "precision", "recall", "fitness"):
        assert 0.0 <= out[k] <= 1.0
    assert out["images"] == 4.0
    with pytest.raises(ConfigError, match="Did you mean 'conf'"):
        model.val(data=str(val_yaml), conff=0.1)
    with pytest.raises(ConfigError, match="classes"):
        Model(YOLO9(size="t", nc=3)).val(data=str(val_yaml), imgsz=64, workers=0)
    assert ValConfig.from_overrides({}).conf == 0.001 and ValConfig().iou == 0.7 and ValConfig().max_det == 300


def test_empty_data_is_an_error_not_the_training_dataset():
    """data='' must not silently fall back to the dataset the model was trained on."""
    from libreyolo.models.yolo9.family import YOLO9

    model = Model(YOLO9(size="t", nc=6))
    model.train_args = {"data": "shapes"}
    for empty in ("", "  "):
        with pytest.raises(ConfigError, match=r"'data' is empty; pass a dataset yaml, e.g. data=my-dataset.yaml"):
            model.val(data=empty)


def test_workers_are_capped_to_the_cpus_available(val_yaml, monkeypatch, caplog):
    import libreyolo.engine.validator as V

    monkeypatch.setattr(V, "available_cpus", lambda: 2)
    from libreyolo.data import loader as L

    got = []
    build = L.build_dataloader
    monkeypatch.setattr(L, "build_dataloader", lambda *a, **k: got.append(k["workers"]) or build(*a, **{**k, "workers": 0}))
    from libreyolo.models.yolo9.family import YOLO9

    model = Model(YOLO9(size="t", nc=6))
    with caplog.at_level("INFO", logger="libreyolo.engine.validator"):
        validate(model, {"data": str(val_yaml), "imgsz": 64, "batch": 2, "device": "cpu", "verbose": False})
        assert got == [2] and not caplog.records  # the default 4 on 2 CPUs, silently
        validate(model, {"data": str(val_yaml), "imgsz": 64, "batch": 2, "device": "cpu", "verbose": False,
                         "workers": 16})
    assert got == [2, 2] and "workers=16 lowered to 2" in caplog.text
    assert V.capped_workers(1, explicit=True) == 1 and V.capped_workers(0, explicit=True) == 0
