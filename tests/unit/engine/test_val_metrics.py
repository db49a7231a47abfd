"""The object detection val() returns: a dict as before plus per-class numbers, confusion matrix,
speed, losses, summary() / to_json(); and the library log handler that shows the table."""

from __future__ import annotations

import json
import logging
import pickle

import numpy as np
import pytest
import torch

from libreyolo.engine.val_logging import library_logging
from libreyolo.engine.validator import run_validation
from libreyolo.model import Model
from libreyolo.tasks.detect import metrics as M
from libreyolo.tasks.detect.results import DetMetrics
from libreyolo.tasks.detect.scoring import DetectionScorer as _Collector

NAMES = {0: "cat", 1: "dog", 2: "bird"}


def _images():
    """Two images: class 0 found twice; class 1 found once and once called class 0; one false alarm."""
    a = {"hw": (100, 100), "gt": np.array([[0, 0, 10, 10], [20, 20, 40, 40]], float), "gt_cls": np.array([0, 1]),
         "pred": np.array([[0, 0, 10, 10], [20, 20, 40, 40], [60, 60, 90, 90]], float),
         "score": np.array([0.9, 0.8, 0.6]), "pred_cls": np.array([0, 1, 1])}
    b = {"hw": (100, 100), "gt": np.array([[0, 0, 10, 10], [50, 50, 70, 70]], float), "gt_cls": np.array([0, 1]),
         "pred": np.array([[0, 0, 10, 10], [50, 50, 70, 70]], float),
         "score": np.array([0.95, 0.7]), "pred_cls": np.array([0, 0])}
    return [a, b]


def _scored():
    col = _Collector()
    col.images = _images()
    values = col.score(NAMES)
    return DetMetrics(values, names=NAMES, per_class=col.per_class, confusion_matrix=col.confusion,
                      curves=col.curves, speed={"preprocess": 1.0, "inference": 2.0, "postprocess": 0.5})


def test_confusion_matrix_counts_on_a_hand_made_case():
    m = M.confusion_matrix(_images(), 3)
    want = np.zeros((4, 4), int)
    want[0, 0] = 2  # cat -> cat, both images
    want[1, 1] = 1  # dog -> dog
    want[0, 1] = 1  # the dog of image b predicted as cat
    want[1, 3] = 1  # a dog predicted where nothing is
    assert m.tolist() == want.tolist()
    # a detection below conf is not drawn: the GT it would have matched is missed instead
    low = M.confusion_matrix(_images(), 3, conf=0.75)
    assert low[3, 1] == 1 and low[0, 1] == 0 and low[1, 3] == 0
    # IoU below the threshold: a miss plus a false alarm, not a pair
    shifted = [{**_images()[0], "pred": _images()[0]["pred"] + [6, 6, 6, 6]}]
    s = M.confusion_matrix(shifted, 3)
    assert s[0, 0] == 0 and s[3, 0] == 1 and s[0, 3] == 1


def test_metrics_object_still_behaves_as_the_dict_of_before():
    m = _scored()
    assert isinstance(m, dict)
    assert set(m) == {"mAP50-95", "mAP50", "precision", "recall", "images", "instances", "fitness"}
    assert m["mAP50-95"] == pytest.approx(dict(m)["mAP50-95"]) and list(m.keys()) == list(dict(m).keys())
    assert json.loads(json.dumps(dict(m))) == pytest.approx(dict(m))
    assert m.get("fitness") == pytest.approx(0.1 * m["mAP50"] + 0.9 * m["mAP50-95"])
    again = pickle.loads(pickle.dumps(m))  # checkpoints and DDP broadcasts pickle what they are given
    assert again == m and again.per_class == m.per_class


def test_per_class_numbers_maps_and_normalised_confusion():
    m = _scored()
    assert m.ap_class_index == [0, 1]  # bird has no ground truth
    cat, dog = m.per_class[0], m.per_class[1]
    assert cat["instances"] == 2 and dog["instances"] == 2 and cat["images"] == 2 and dog["images"] == 2
    # cat: 3 detections (2 TP at .95/.9, the wrong-class one at .7): AP50 = 1
    assert cat["ap50"] == pytest.approx(1.0) and dog["ap50"] < 1.0
    # at the best mean-F1 confidence, each class's P / R are the curve values there
    assert m["precision"] == pytest.approx((cat["precision"] + dog["precision"]) / 2)
    assert m["recall"] == pytest.approx((cat["recall"] + dog["recall"]) / 2)
    assert 0 < dog["recall"] <= 0.5 + 1e-9  # one of the two dogs is ever found as a dog
    maps = m.maps
    assert maps.shape == (3,) and maps[0] == pytest.approx(cat["ap50-95"]) and maps[1] == pytest.approx(dog["ap50-95"])
    assert maps[2] == pytest.approx(m["mAP50-95"])  # no ground truth: the overall value
    norm = m.confusion_matrix_normalized
    assert norm[:, 1].sum() == pytest.approx(1.0) and norm[0, 1] == pytest.approx(1 / 2)
    assert m.confusion_matrix.sum() == 5


def test_summary_and_to_json():
    m = _scored()
    text = m.summary()
    lines = text.splitlines()
    assert lines[0].split() == ["class", "images", "instances", "P", "R", "mAP50", "mAP50-95"]
    assert lines[1].split()[0] == "all" and float(lines[1].split()[-1]) == pytest.approx(m["mAP50-95"], abs=5e-4)
    dog = next(ln for ln in lines if ln.split()[0] == "dog").split()
    assert float(dog[-2]) == pytest.approx(m.per_class[1]["ap50"], abs=5e-4) and dog[2] == "2"
    assert not any(ln.split()[0] == "bird" for ln in lines[1:-1])
    assert "2.0 ms inference" in lines[-1]
    js = json.loads(m.to_json())
    assert js["metrics"]["mAP50"] == pytest.approx(m["mAP50"])
    assert js["per_class"]["dog"]["ap50"] == pytest.approx(m.per_class[1]["ap50"])
    assert js["confusion_matrix"] == m.confusion_matrix.tolist() and js["speed"]["inference"] == 2.0
    assert js["save_dir"] is None and js["names"]["1"] == "dog"


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x


class _Model:
    """postprocess returns the ground truth as detections (in input pixels): mAP 1."""

    OUTPUT_KIND = "boxes"

    def __init__(self, dets, stages=None):
        self.dets, self.stages = list(dets), stages

    def postprocess(self, raw, **kw):
        return self.dets.pop(0)

    def train_stages(self):
        return self.stages


def _batches(n_batches=2, b=2, s=32):
    out, dets = [], []
    for k in range(n_batches):
        boxes = torch.tensor([[0.5, 0.5, 0.5, 0.5]] * b)
        out.append({"img": torch.full((b, 3, s, s), 50 * k, dtype=torch.uint8), "batch_idx": torch.arange(b).float(),
                    "cls": torch.zeros(b, 1), "bboxes": boxes, "ori_shape": [(s, s)] * b,
                    "ratio_pad": [((1.0, 1.0), (0.0, 0.0))] * b})
        dets.append([torch.tensor([[8.0, 8.0, 24.0, 24.0, 0.9, 0.0]]) for _ in range(b)])
    return out, dets


def test_run_validation_returns_the_object_with_losses_and_speed():
    batches, dets = _batches()
    calls = []

    def criterion(raw, batch):
        calls.append(torch.is_inference_mode_enabled())
        items = torch.stack([raw.mean(), raw.mean() * 2])  # batch means 50/255*k: 0 and 0.196
        return items.sum(), items

    m = run_validation(model=_Model(dets), net=_Net(), loader=batches, names={0: "a"}, verbose=False,
                       progress=False, criterion=criterion, loss_names=("box", "cls"))
    assert isinstance(m, DetMetrics) and m["mAP50-95"] == pytest.approx(1.0)
    assert calls == [False, False]  # no_grad, not inference mode: what the criterion caches stays usable
    mean = (0 + 50 / 255) / 2
    assert m.losses == pytest.approx({"box": mean, "cls": 2 * mean})
    assert set(m.speed) == {"preprocess", "inference", "postprocess"} and all(v >= 0 for v in m.speed.values())
    assert m["ms_per_image"] == pytest.approx(m.speed["inference"] + m.speed["postprocess"])
    assert m.confusion_matrix.tolist() == [[4, 0], [0, 0]] and m.save_dir is None
    # a family whose training forward is split in stages gets no losses (its eval outputs differ)
    batches, dets = _batches()
    m = run_validation(model=_Model(dets, stages=["trunk", "decoder"]), net=_Net(), loader=batches, names={0: "a"},
                       verbose=False, progress=False, criterion=criterion, loss_names=("box", "cls"))
    assert m.losses == {} and len(calls) == 2


def test_table_is_shown_in_python_without_touching_the_root_logger(monkeypatch, capsys):
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # as in a plain Python session (pytest adds its own)
    monkeypatch.setattr(root, "level", logging.WARNING)
    lib = logging.getLogger("libreyolo")
    before = (list(lib.handlers), lib.level, lib.propagate)
    batches, dets = _batches()
    with library_logging() as h:
        assert h is not None and h in lib.handlers
        run_validation(model=_Model(dets), net=_Net(), loader=batches, names={0: "a"}, verbose=True, progress=False)
    err = capsys.readouterr().err
    assert "mAP50-95" in err and any(ln.split()[:1] == ["a"] for ln in err.splitlines())
    assert root.handlers == [] and root.level == logging.WARNING  # the root logger untouched
    assert (list(lib.handlers), lib.level, lib.propagate) == before  # and the library's restored
    # somebody configured logging: left alone
    monkeypatch.setattr(root, "handlers", [logging.NullHandler()])
    with library_logging() as h:
        assert h is None and lib.handlers == before[0]
    with library_logging(enabled=False) as h:
        assert h is None


def test_validate_shows_the_table_through_the_library_handler(monkeypatch, capsys, tmp_path):
    from libreyolo.data.shapes import ensure_shapes_dataset
    from libreyolo.engine.validator import validate
    from libreyolo.models.yolo9.family import YOLO9

    yaml = ensure_shapes_dataset(tmp_path / "d", n_train=1, n_val=2, imgsz=64)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    m = validate(Model(YOLO9(size="t", nc=6)), {"data": str(yaml), "imgsz": 64, "batch": 2, "workers": 0, "device": "cpu"})
    assert isinstance(m, DetMetrics) and m.summary().splitlines()[0] in capsys.readouterr().err
    assert not logging.getLogger("libreyolo").handlers
