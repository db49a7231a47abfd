"""COCO JSON datasets (libreyolo/data/coco.py): the same images and boxes as a YOLO-format copy
give the same labels, the same validation metrics, and train."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo.data.coco import read_coco, role_of
from libreyolo.data.config import load_data_config
from libreyolo.data.dataset import DetectionDataset
from libreyolo.errors import DatasetError
from libreyolo.model import Model

CAT_IDS = [11, 3, 7, 1, 20, 5]  # non-contiguous, unsorted: class k is the k-th smallest id


def _to_coco(yolo_yaml: Path, out: Path) -> Path:
    """A COCO folder (annotations/instances_<split>.json + <split>/ images) of a YOLO dataset."""
    y = load_data_config(yolo_yaml)
    sorted_ids = sorted(CAT_IDS)
    (out / "annotations").mkdir(parents=True)
    for split, folder in (("train", "train2017"), ("val", "val2017")):
        (out / folder).mkdir()
        images, anns = [], []
        for i, f in enumerate(getattr(y, split)):
            shutil.copy(f, out / folder / f.name)
            w, h = Image.open(f).size
            images.append({"id": 100 + i, "file_name": f.name, "width": w, "height": h})
            lab = Path(str(f).replace("/images/", "/labels/")).with_suffix(".txt")
            for row in np.loadtxt(lab, ndmin=2) if lab.stat().st_size else []:
                c, cx, cy, bw, bh = row
                anns.append({"id": len(anns) + 1, "image_id": 100 + i, "category_id": sorted_ids[int(c)],
                             "bbox": [(cx - bw / 2) * w, (cy - bh / 2) * h, bw * w, bh * h], "iscrowd": 0,
                             "area": bw * w * bh * h})
        if split == "train":  # a crowd box is left out
            anns.append({"id": 9999, "image_id": 100, "category_id": 1, "bbox": [0, 0, 5, 5], "iscrowd": 1})
        cats = [{"id": cid, "name": y.names[sorted_ids.index(cid)]} for cid in CAT_IDS]
        doc = {"images": images, "annotations": anns, "categories": cats}
        (out / "annotations" / f"instances_{folder}.json").write_text(json.dumps(doc))
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from libreyolo.data.shapes import ensure_shapes_dataset

    root = tmp_path_factory.mktemp("coco")
    yolo = ensure_shapes_dataset(root / "yolo", n_train=8, n_val=6, imgsz=64)
    return yolo, _to_coco(yolo, root / "coco")


def test_coco_folder_gives_the_yolo_labels(pair):
    yolo, coco = pair
    y, c = load_data_config(yolo), load_data_config(coco)
    assert c.names == y.names and c.nc == 6 and [f.name for f in c.val] == [f.name for f in y.val]
    yd = DetectionDataset(y.train, imgsz=64, augment=False, nc=6)
    cd = DetectionDataset(c.train, imgsz=64, augment=False, nc=6, labels=c.label_index("train", c.train))
    assert [Path(f).name for f in cd.im_files] == [Path(f).name for f in yd.im_files]
    for a, b in zip(yd.labels, cd.labels, strict=True):
        assert a.shape == b.shape  # the crowd annotation was left out
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_val_metrics_on_coco_equal_the_yolo_copy(pair):
    from libreyolo import LibreYOLO

    yolo, coco = pair
    model = LibreYOLO("LibreYOLO9t.pt")  # trained on shapes: finds objects, so the metrics are not all 0
    kw = dict(imgsz=64, batch=4, workers=0, device="cpu", verbose=False, plots=False)
    m_yolo, m_coco = model.val(data=str(yolo), **kw), model.val(data=str(coco), **kw)
    assert m_yolo["mAP50"] > 0
    for k in ("mAP50-95", "mAP50", "precision", "recall"):
        assert m_coco[k] == pytest.approx(m_yolo[k], abs=1e-6), k


def test_train_on_a_coco_yaml_with_json_keys(pair, tmp_path):
    from libreyolo.models.yolo9.family import YOLO9

    _, coco = pair
    cfg = tmp_path / "data.yaml"  # names left out: read from the categories
    cfg.write_text(f"path: {coco}\ntrain: train2017\nval: val2017\n"
                   "train_json: annotations/instances_train2017.json\nval_json: annotations/instances_val2017.json\n")
    d = load_data_config(cfg)
    assert d.nc == 6 and set(d.coco) == {"train", "val"}
    out = Model(YOLO9(size="t", nc=6)).train(data=str(cfg), epochs=1, imgsz=64, batch=4, workers=0, device="cpu",
                                      project=str(tmp_path / "runs"), plots=False, tensorboard=False, verbose=False,
                                      mosaic=0.0)
    assert (Path(out["save_dir"]) / "weights" / "best.pt").is_file()


def test_test_split_validates(pair, tmp_path):
    from libreyolo import LibreYOLO

    yolo, _ = pair
    y = load_data_config(yolo)
    cfg = tmp_path / "d.yaml"
    cfg.write_text(f"path: {y.root}\ntrain: images/train\nval: images/val\ntest: images/val\nnames: {list(y.names.values())}\n")
    model = LibreYOLO("LibreYOLO9t.pt")
    kw = dict(imgsz=64, batch=4, workers=0, device="cpu", verbose=False, plots=False)
    assert model.val(data=str(cfg), split="test", **kw)["mAP50"] == pytest.approx(
        model.val(data=str(cfg), split="val", **kw)["mAP50"])
    no_test = tmp_path / "n.yaml"
    no_test.write_text(f"path: {y.root}\ntrain: images/train\nval: images/val\nnames: {list(y.names.values())}\n")
    with pytest.raises(Exception, match="no test images"):
        model.val(data=str(no_test), split="test", **kw)


def test_bad_coco_files_name_the_problem(tmp_path):
    (tmp_path / "im").mkdir()
    Image.new("RGB", (10, 10)).save(tmp_path / "im" / "a.png")
    base = {"images": [{"id": 1, "file_name": "a.png", "width": 10, "height": 10}],
            "categories": [{"id": 1, "name": "x"}], "annotations": []}
    cases = [
        ({**base, "annotations": [{"id": 5, "image_id": 1, "category_id": 2, "bbox": [0, 0, 2, 2]}]},
         "category_id 2"),
        ({**base, "annotations": [{"id": 5, "image_id": 9, "category_id": 1, "bbox": [0, 0, 2, 2]}]}, "image id 9"),
        ({**base, "images": [{"id": 1, "file_name": "missing.png", "width": 10, "height": 10}]}, "does not exist"),
        ({"images": []}, "not a COCO instances file"),
    ]
    for doc, msg in cases:
        (tmp_path / "a.json").write_text(json.dumps(doc))
        with pytest.raises(DatasetError, match=msg):
            read_coco(tmp_path / "a.json", tmp_path / "im")
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(DatasetError, match="cannot be read as JSON"):
        read_coco(tmp_path / "a.json", tmp_path / "im")


def test_split_roles_from_annotation_names():
    assert [role_of(s) for s in ("instances_train2017", "instances_val2017", "instances_test-dev2017",
                                 "instances_valid", "instances_minival2014", "instances_train")] == [
        "train", "val", "test", "val", None, "train"]
