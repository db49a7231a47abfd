"""The pictures: val(plots=True) writes each one, not blank, of the expected size; the PR curve's
area is the metric's AP; train batches show their boxes; results.png pairs train and val losses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.image import imread

from libreyolo.engine import val_plots as P
from libreyolo.engine.validator import run_validation, validate
from libreyolo.model import Model
from libreyolo.ops.boxes import xywh_to_xyxy
from libreyolo.tasks.detect.results import DetMetrics

VAL_FILES = ("confusion_matrix.png", "confusion_matrix_normalized.png", "P_curve.png", "R_curve.png", "F1_curve.png",
             "PR_curve.png", "val_labels.png", "val_batch0.png", "val_batch1.png")


def _pixels(path: Path) -> np.ndarray:
    img = imread(path)
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    return img[..., :3]


def _not_blank(path: Path, min_h: int = 300, min_w: int = 300) -> np.ndarray:
    img = _pixels(path)
    assert img.shape[0] >= min_h and img.shape[1] >= min_w, (path.name, img.shape)
    assert img.std() > 0.02, f"{path.name} is (nearly) one colour"
    return img


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from libreyolo.data.shapes import ensure_shapes_dataset

    return ensure_shapes_dataset(tmp_path_factory.mktemp("pshapes"), n_train=4, n_val=6, imgsz=96)


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x


class _Model:
    OUTPUT_KIND = "boxes"

    def __init__(self, dets):
        self.dets = list(dets)

    def postprocess(self, raw, **kw):
        return self.dets.pop(0)

    def train_stages(self):
        return None


class _Loader(list):
    dataset = None


@pytest.fixture(scope="module")
def validated(shapes, tmp_path_factory):
    """Noisy ground truth as predictions (a class swapped, a false alarm) over the shapes val split."""
    from libreyolo.data.config import load_data_config
    from libreyolo.data.dataset import DetectionDataset, collate_detection

    d = load_data_config(str(shapes))
    ds = DetectionDataset(d.val, imgsz=96, augment=False, nc=d.nc)
    loader = _Loader(collate_detection([ds[i] for i in range(j, min(j + 3, len(ds)))]) for j in range(0, len(ds), 3))
    loader.dataset = ds
    rng = np.random.default_rng(0)
    dets = []
    for b in loader:
        h, w = b["img"].shape[2:]
        per = []
        for i in range(b["img"].shape[0]):
            sel = b["batch_idx"] == i
            boxes = xywh_to_xyxy(b["bboxes"][sel] * torch.tensor([w, h, w, h])) + torch.from_numpy(
                rng.normal(0, 1.5, (int(sel.sum()), 4))).float()
            cls = b["cls"][sel].view(-1).float().clone()
            cls[:1] = (cls[:1] + 1) % d.nc
            sc = torch.from_numpy(rng.uniform(0.3, 0.99, len(cls))).float()
            per.append(torch.cat((torch.cat((boxes, sc[:, None], cls[:, None]), 1),
                                  torch.tensor([[5.0, 5.0, 30.0, 30.0, 0.6, 0.0]]))))
        dets.append(per)
    out = tmp_path_factory.mktemp("plots") / "val"
    m = run_validation(model=_Model(dets), net=_Net(), loader=loader, names=d.names, verbose=False, progress=False,
                       plots_dir=out, plot_batches=2)
    return m, out, ds


def test_every_validation_picture_is_written_and_not_blank(validated):
    m, out, _ = validated
    assert m.save_dir == out
    for name in VAL_FILES:
        _not_blank(out / name)
    assert not (out / "val_batch2.png").exists()  # plot_batches=2


def test_pr_curve_area_is_the_metric_ap(validated):
    m, _, _ = validated
    cv = m.curves
    assert list(cv["pr_classes"]) == m.ap_class_index and cv["pr_precision"].shape == (len(m.ap_class_index), 101)
    for k, c in enumerate(cv["pr_classes"]):
        assert cv["pr_precision"][k].mean() == pytest.approx(m.per_class[int(c)]["ap50"], abs=1e-9)
    assert cv["pr_precision"].mean(1).mean() == pytest.approx(m["mAP50"], abs=1e-6)
    # the P / R curves at the best-F1 confidence give the per-class P / R of the metrics
    best = int(cv["f1"].mean(0).argmax())
    for k, c in enumerate(cv["classes"]):
        assert cv["precision"][k, best] == pytest.approx(m.per_class[int(c)]["precision"])


def test_confusion_matrix_picture_shows_the_counts(tmp_path):
    """More counts in a cell: a darker cell (the heat map is drawn from the matrix)."""
    names = {0: "a", 1: "b"}
    mat = np.array([[9, 0, 0], [0, 0, 0], [0, 0, 0]])
    full = _pixels(P.plot_confusion_matrix(mat, names, tmp_path / "one.png", normalize=False))
    empty = _pixels(P.plot_confusion_matrix(np.zeros((3, 3), int), names, tmp_path / "zero.png", normalize=False))
    assert full.shape == empty.shape and np.abs(full - empty).sum(-1).max() > 0.5


def test_val_plots_through_validate(shapes, tmp_path):
    from libreyolo.models.yolo9.family import YOLO9

    m = validate(Model(YOLO9(size="t", nc=6)), {"data": str(shapes), "imgsz": 64, "batch": 4, "workers": 0, "device": "cpu",
                                         "verbose": False, "plots": True, "project": str(tmp_path), "name": "v"})
    assert m.save_dir == tmp_path / "v" and (tmp_path / "v" / "PR_curve.png").is_file()
    _not_blank(tmp_path / "v" / "val_batch0.png")
    _not_blank(tmp_path / "v" / "val_labels.png")
    again = validate(Model(YOLO9(size="t", nc=6)), {"data": str(shapes), "imgsz": 64, "workers": 0, "device": "cpu",
                                             "verbose": False, "plots": True, "project": str(tmp_path), "name": "v"})
    assert again.save_dir == tmp_path / "v2"  # never overwrites an earlier run
    plain = validate(Model(YOLO9(size="t", nc=6)), {"data": str(shapes), "imgsz": 64, "workers": 0, "device": "cpu",
                                             "verbose": False, "project": str(tmp_path), "name": "none"})
    assert plain.save_dir is None and not (tmp_path / "none").exists()


def test_train_batch_shows_mosaics_and_their_boxes(shapes, tmp_path):
    from libreyolo.data.augment import AugmentConfig
    from libreyolo.data.config import load_data_config
    from libreyolo.data.dataset import DetectionDataset, collate_detection

    d = load_data_config(str(shapes))
    ds = DetectionDataset(d.train, imgsz=96, augment=True, nc=d.nc, hyp=AugmentConfig(mosaic=1.0))
    assert ds.mosaic_enabled
    batch = collate_detection([ds[i] for i in range(4)])
    assert len(batch["cls"]) > 0
    with_boxes = _not_blank(P.plot_train_batch(batch, tmp_path / "train_batch0.png", names=d.names))
    bare = {**batch, "batch_idx": batch["batch_idx"][:0], "cls": batch["cls"][:0], "bboxes": batch["bboxes"][:0]}
    without = _pixels(P.plot_train_batch(bare, tmp_path / "bare.png", names=d.names))
    assert with_boxes.shape == without.shape
    assert (np.abs(with_boxes - without).sum(-1) > 0.1).mean() > 0.005  # the boxes and their labels are drawn


def test_labels_plot_counts(tmp_path):
    labels = [np.array([[0, 0.5, 0.5, 0.2, 0.2], [1, 0.2, 0.3, 0.1, 0.1]]), np.array([[1, 0.7, 0.7, 0.3, 0.4]])]
    _not_blank(P.plot_labels(labels, {0: "a", 1: "b"}, tmp_path / "labels.png"), min_w=900)


def test_results_png_pairs_train_and_val_losses_and_smooths(tmp_path):
    from libreyolo.training.loggers import ResultsLogger, _panels, smooth

    log = ResultsLogger(tmp_path, tensorboard=False)
    for e in range(1, 9):
        log.log({"epoch": e, "train/box_loss": 2.0 / e, "metrics/mAP50": 0.05 * e, "val/box_loss": 2.5 / e})
    log.close()
    header = (tmp_path / "results.csv").read_text().splitlines()[0]
    assert header == "epoch,train/box_loss,metrics/mAP50,val/box_loss"
    _not_blank(tmp_path / "results.png", min_h=200, min_w=600)
    assert _panels(["train/box_loss", "metrics/mAP50", "val/box_loss"]) == [
        ("box_loss", ["train/box_loss", "val/box_loss"]), ("metrics/mAP50", ["metrics/mAP50"])]
    y = np.array([1.0, 3.0, 1.0, 3.0, 1.0, 3.0, 1.0, 3.0])
    s = smooth(y)
    assert s.shape == y.shape and np.ptp(s[1:-1]) < np.ptp(y)  # the zig-zag is flattened
    assert smooth(np.arange(10.0)) == pytest.approx(np.arange(10.0))  # a linear trend is kept, ends included
    assert isinstance(DetMetrics({}, names={}).losses, dict)
