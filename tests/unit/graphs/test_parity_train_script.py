"""benchmarks/parity_train.py: its batches feed the families' criteria, and it merges matrices from
several runs without losing or doubling rows."""

from __future__ import annotations

import torch

from benchmarks import parity_train
from libreyolo.model import Model
from libreyolo.registry import families


def _doc(commit: str, rows: list[dict]) -> dict:
    return {"environment": {"commit": commit, "date": f"date-{commit}", "gpu": "g", "torch": "t", "cuda": "c"},
            "rows": rows}


def test_later_rows_replace_earlier_ones_and_keep_their_commit():
    mod = parity_train
    old = _doc("aaa", [{"family": "f", "size": "s", "dtype": "float16", "pass": False},
                       {"family": "f", "size": "s", "dtype": "float32", "pass": True},
                       {"family": "g", "size": "n", "dtype": "float32", "pass": True}])
    new = _doc("bbb", [{"family": "f", "size": "s", "dtype": "float16", "pass": True}])
    out = mod.combine([old, new])
    rows = {(r["family"], r["size"], r["dtype"]): r for r in out["rows"]}
    assert len(out["rows"]) == 3 == len(rows)
    assert rows[("f", "s", "float16")]["pass"] is True and rows[("f", "s", "float16")]["commit"] == "bbb"
    assert rows[("f", "s", "float32")]["commit"] == "aaa" and rows[("g", "n", "float32")]["date"] == "date-aaa"
    assert out["environment"]["commit"] == "bbb"
    md = mod.render_markdown(out)
    assert "rows from commits aaa, bbb" in md and md.count("| f | ") == 2


def test_a_row_that_carries_its_commit_keeps_it():
    mod = parity_train
    out = mod.combine([_doc("ccc", [{"family": "f", "size": "s", "dtype": "float32", "commit": "zzz"}])])
    assert out["rows"][0]["commit"] == "zzz"


def test_classify_batch_feeds_the_family_criterion():
    mod = parity_train
    b = mod.classify_batch(batch=4, imgsz=32, nc=6, seed=1, device=torch.device("cpu"))
    assert b["img"].shape == (4, 3, 32, 32) and b["cls"].shape == (4,) and int(b["cls"].max()) < 6
    assert torch.equal(b["cls"], mod.classify_batch(batch=4, imgsz=32, nc=6, seed=1, device=torch.device("cpu"))["cls"])
    fam = families()["resnet"]
    model = Model(fam(size="18", nc=6))
    loss, items = model.build_criterion()(model.net.train()(b["img"]), b)
    assert torch.isfinite(loss) and items.shape == (1,)


def test_semantic_batch_feeds_the_family_criterion():
    mod = parity_train
    b = mod.semantic_batch(batch=2, imgsz=64, nc=6, seed=1, device=torch.device("cpu"))
    assert b["img"].shape == (2, 3, 64, 64) and b["mask"].shape == (2, 64, 64) and b["mask"].dtype == torch.int64
    assert int(b["mask"].max()) < 6 and int((b["mask"] > 0).sum()) > 0 and int((b["mask"] == -1).sum()) > 0
    assert torch.equal(b["mask"], mod.semantic_batch(batch=2, imgsz=64, nc=6, seed=1, device=torch.device("cpu"))["mask"])
    model = Model(families()["segformer"](size="b0", nc=6))
    loss, items = model.build_criterion()(model.net.train()(b["img"]), b)
    assert torch.isfinite(loss) and items.shape == (1,) and float(items) > 0


def test_depth_batch_feeds_the_family_criterion():
    mod = parity_train
    b = mod.depth_batch(batch=2, imgsz=42, nc=6, seed=1, device=torch.device("cpu"))
    assert b["img"].shape == (2, 3, 42, 42) and b["depth"].shape == (2, 42, 42) and b["depth"].dtype == torch.float32
    assert int((b["depth"] == 0).sum()) > 0 and float(b["depth"].max()) <= 12.0 and float(b["depth"][b["depth"] > 0].min()) >= 2.0
    assert torch.equal(b["depth"], mod.depth_batch(batch=2, imgsz=42, nc=6, seed=1, device=torch.device("cpu"))["depth"])
    torch.manual_seed(0)
    model = Model(families()["depth_anything"](size="s", nc=6))
    loss, items = model.build_criterion()(model.net.train()(b["img"]), b)
    assert torch.isfinite(loss) and items.shape == (1,) and float(items) > 0


def test_point_families_take_the_detection_batch():
    """A point family (``OUTPUT_KIND == "points"``) gets the detection batch: its loss reduces the
    boxes to centroid cells."""
    fam = families()["fomo"]
    b = parity_train.synthetic_batch(batch=2, imgsz=64, nc=6, seed=1, device=torch.device("cpu"))
    model = Model(fam(size="035", nc=6))
    loss, items = model.build_criterion()(model.net.train()(b["img"]), b)
    assert fam.OUTPUT_KIND == "points" and torch.isfinite(loss) and items.shape == (1,) and float(items) > 0


def test_restore_batch_feeds_the_family_criteria():
    mod = parity_train
    for name, scale in (("nafnet", 1), ("esrgan", 4)):
        b = mod.restore_batch(batch=2, imgsz=16, nc=6, seed=1, device=torch.device("cpu"), scale=scale)
        assert b["img"].shape == (2, 3, 16, 16) and b["target"].shape == (2, 3, 16 * scale, 16 * scale)
        assert b["target"].dtype == torch.uint8 and 0 <= float(b["img"].min()) and float(b["img"].max()) <= 1
        again = mod.restore_batch(batch=2, imgsz=16, nc=6, seed=1, device=torch.device("cpu"), scale=scale)
        assert torch.equal(b["img"], again["img"]) and torch.equal(b["target"], again["target"])
        fam = families()[name]
        model = Model(fam(size=fam.SIZES[0], nc=6))
        loss, items = model.build_criterion()(model.net.train()(b["img"]), b)
        assert torch.isfinite(loss) and items.shape == (1,) and float(items) > 0


def test_segment_batch_feeds_the_family_criterion():
    mod = parity_train
    b = mod.segment_batch(batch=2, imgsz=64, nc=6, seed=1, device=torch.device("cpu"))
    n = b["cls"].shape[0]
    assert b["masks"].shape == (n, 16, 16) and b["masks"].dtype == torch.uint8 and b["bboxes"].shape == (n, 4)
    assert bool((b["masks"].flatten(1).sum(1) > 0).all())
    assert torch.equal(b["masks"], mod.segment_batch(batch=2, imgsz=64, nc=6, seed=1, device=torch.device("cpu"))["masks"])
    model = Model(families()["yolo9_seg"](size="t", nc=6))
    loss, items = model.build_criterion()(model.net.train()(b["img"]), b)
    assert torch.isfinite(loss) and items.shape == (4,) and float(items[1]) > 0


def test_pose_batch_feeds_the_family_criterion():
    mod = parity_train
    b = mod.pose_batch(batch=2, imgsz=64, nc=6, seed=1, device=torch.device("cpu"), nkpt=17)
    n = b["cls"].shape[0]
    assert b["keypoints"].shape == (n, 17, 3) and set(b["keypoints"][..., 2].unique().tolist()) <= {0.0, 2.0}
    assert torch.equal(b["keypoints"], mod.pose_batch(batch=2, imgsz=64, nc=6, seed=1, device=torch.device("cpu"))["keypoints"])
    model = Model(families()["yolo9_pose"](size="t", nc=6))
    loss, items = model.build_criterion()(model.net.train()(b["img"]), b)
    assert torch.isfinite(loss) and items.shape == (5,) and float(items[1]) > 0 and float(items[2]) > 0
