"""The point task on the CPU: centroid targets, cell decoding, the P/R/F1 metrics, the weighted
cross-entropy, Results.points, and the user path (train, val, predict, reload) of FOMO."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo.engine.results import Results
from libreyolo.errors import ConfigError, DatasetError
from libreyolo.models._base.point import PointLoss
from libreyolo.ops.points import centroid_targets, decode_points, merge_cells
from libreyolo.tasks.point.metrics import count, match_points, prf
from libreyolo.tasks.point.scoring import PointScorer

CPU = torch.device("cpu")


def test_targets_mark_the_cell_of_each_centre_and_keep_the_larger_class_on_a_collision() -> None:
    batch = {"batch_idx": torch.tensor([0, 0, 0, 1]), "cls": torch.tensor([0, 4, 2, 1]),
             # image 0: centres (20, 44) px and twice (60, 4) px at 64x64 -> cells (y 5, x 2) and (0, 7)
             "bboxes": torch.tensor([[20 / 64, 44 / 64, 0.1, 0.1], [60 / 64, 4 / 64, 0.05, 0.05],
                                     [61 / 64, 5 / 64, 0.05, 0.05], [1.0, 1.0, 0.1, 0.1]])}
    t = centroid_targets(batch, grid_hw=(8, 8), batch_size=2, device=CPU)
    assert t.shape == (2, 8, 8) and t.dtype == torch.int64
    assert t[0].nonzero().tolist() == [[0, 7], [5, 2]]
    assert int(t[0, 5, 2]) == 1 and int(t[0, 0, 7]) == 5  # classes 0 and max(4, 2), stored + 1
    assert t[1].nonzero().tolist() == [[7, 7]] and int(t[1, 7, 7]) == 2  # a centre on the edge: clamped
    empty = {"batch_idx": torch.zeros(0), "cls": torch.zeros(0), "bboxes": torch.zeros(0, 4)}
    assert int(centroid_targets(empty, grid_hw=(3, 5), batch_size=2, device=CPU).sum()) == 0


def test_decoding_merges_touching_cells_of_one_class_only() -> None:
    keep = np.zeros((4, 6), bool)
    cls = np.zeros((4, 6), np.int64)
    score = np.full((4, 6), 0.6, np.float32)
    keep[0, 0] = keep[1, 1] = True  # diagonal neighbours, class 0: one point
    keep[3, 4] = keep[3, 5] = True  # side neighbours of two classes: two points
    cls[3, 5] = 1
    pts = merge_cells(score, cls, keep, stride=8)
    assert pts.shape == (3, 4)
    assert sorted(map(tuple, pts[:, [0, 1, 3]].tolist())) == [(8.0, 8.0, 0.0), (36.0, 28.0, 0.0), (44.0, 28.0, 1.0)]
    # through the logits: background wins everywhere except two cells; conf and classes filter
    lg = torch.full((1, 3, 4, 4), -4.0)
    lg[0, 0] = 4.0
    lg[0, 1, 0, 0] = 8.0
    lg[0, 2, 3, 3] = 6.0
    (out,) = decode_points(lg, stride=8, conf=0.5)
    assert out[:, 3].tolist() == [0.0, 1.0] and out[:, :2].tolist() == [[4.0, 4.0], [28.0, 28.0]]
    assert decode_points(lg, stride=8, conf=0.5, classes=[1])[0][:, 3].tolist() == [1.0]
    assert len(decode_points(lg, stride=8, conf=0.999)[0]) == 0
    assert len(decode_points(lg, stride=8, conf=0.5, max_det=1)[0]) == 1


def test_metrics_on_known_inputs() -> None:
    gt = np.array([[0, 0, 10, 10], [20, 20, 40, 40], [50, 0, 60, 10]], float)
    gt_cls = np.array([0, 0, 1])
    pred = np.array([[5, 5, 0.9, 0],     # tp (box 0)
                     [30, 30, 0.8, 0],   # tp (box 1)
                     [31, 31, 0.7, 0],   # fp: box 1 already taken
                     [55, 5, 0.6, 0],    # fp: inside box 2 but of another class
                     [90, 90, 0.5, 1]], float)  # fp: outside everything
    assert match_points(pred, gt, gt_cls).tolist() == [True, True, False, False, False]
    c = count(pred, gt, gt_cls, 2)
    assert c.tolist() == [[2, 2, 0], [0, 1, 1]]
    assert prf(*c.sum(0)) == (0.4, 0.6667, 0.5)  # F1 = 2 tp / (2 tp + fp + fn) = 4 / 8
    # radius rule: within 3 px of the centre (5, 5) matches, 10 px away does not
    near = np.array([[7, 7, 0.9, 0], [30, 40, 0.8, 0]], float)
    assert match_points(near, gt, gt_cls, radius=3.0).tolist() == [True, False]


def test_scorer_maps_points_and_boxes_back_through_the_letterbox() -> None:
    # a 100x50 (w x h) image letterboxed to 64x64: ratio 0.64, pad (0, 16)
    batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1]),
             "bboxes": torch.tensor([[32 / 64, 32 / 64, 12.8 / 64, 12.8 / 64]]),  # (50, 25) px, 20 px box
             "ori_shape": [(50, 100)], "ratio_pad": [((0.64,), (0.0, 16.0))]}
    scorer = PointScorer({0: "a", 1: "b"})
    scorer.add(batch, [torch.tensor([[33.0, 33.0, 0.9, 1.0], [5.0, 20.0, 0.8, 0.0]])], input_hw=(64, 64))
    m = scorer.result(images=1, speed={}, ms_per_image=0.0, losses={}, save_dir=None)
    assert m["precision"] == 0.5 and m["recall"] == 1.0 and m["F1"] == m["fitness"] == 0.6667
    assert m.per_class[1]["F1"] == 1.0 and m.per_class[0]["precision"] == 0.0
    assert json.loads(m.to_json())["counts"]["rows"] == [[0, 1, 0], [1, 0, 0]]
    assert "all" in m.summary()


def test_loss_is_finite_weighted_and_falls_when_training() -> None:
    from libreyolo.registry import families

    torch.manual_seed(0)
    fam = families()["fomo"](size="035", nc=2)
    net = fam.net.train()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 64, 64, generator=g)
    batch = {"batch_idx": torch.tensor([0, 1]), "cls": torch.tensor([0, 1]),
             "bboxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.6, 0.2, 0.2]])}
    crit = fam.build_criterion()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss, items = crit(net(x), batch)
        assert torch.isfinite(loss) and items.shape == (1,) and torch.allclose(loss, items * 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(items))
    assert losses[-1] < 0.5 * losses[0], losses
    # object cells weigh 100x: the same logits cost more when the miss is on an object cell
    logits = torch.zeros(1, 3, 2, 2)
    hit = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([0]), "bboxes": torch.tensor([[0.2, 0.2, 0.1, 0.1]])}
    light, _ = PointLoss(object_weight=1.0)(logits, hit)
    heavy, _ = PointLoss()(logits, hit)
    assert float(heavy) == pytest.approx(float(light) * (3 + 100) / 4, rel=1e-6)


def test_results_points_round_trip(tmp_path: Path) -> None:
    img = np.zeros((40, 60, 3), np.uint8)
    r = Results(orig_img=img, path="a.jpg", names={0: "circle", 1: "square"},
                points=torch.tensor([[30.0, 20.0, 0.75, 0], [6.0, 4.0, 0.5, 1], [50.0, 10.0, 0.25, 0]]))
    assert r.verbose() == "2 circles, 1 square" and "points" in repr(r)
    rows = json.loads(r.to_json(normalize=True))
    assert rows[0] == {"name": "circle", "class": 0, "confidence": 0.75, "point": {"x": 0.5, "y": 0.5}}
    back = torch.tensor([[row["point"]["x"] * 60, row["point"]["y"] * 40, row["confidence"], row["class"]]
                         for row in rows])
    assert torch.allclose(back, r.points)
    assert r.to_csv().splitlines()[:2] == ["name,class,confidence,x,y", "circle,0,0.75,30.0,20.0"]
    drawn = r.plot()
    assert drawn.shape == img.shape and (drawn[20, 30] != 0).any() and (r.orig_img == 0).all()
    assert r.save(tmp_path / "p.png").is_file()
    assert r.save_txt(tmp_path / "p.txt", save_conf=True).read_text().splitlines()[1] == "1 0.1 0.1 0.5"
    assert r.cpu().points.shape == (3, 4) and r.new().verbose() == "no detections"
    assert len(r) == 3 and len(r[r.points[:, 2] > 0.4]) == 2 and r[1].verbose() == "1 square"
    with pytest.raises(ConfigError, match=r"\(n, 4\)"):
        Results(orig_img=img, names={0: "a"}, points=torch.zeros(2, 3))


def test_bad_label_gives_the_detection_reader_error(tmp_path: Path) -> None:
    from libreyolo.tasks import get_task

    (tmp_path / "images" / "train").mkdir(parents=True)
    (tmp_path / "labels" / "train").mkdir(parents=True)
    import cv2

    cv2.imwrite(str(tmp_path / "images" / "train" / "a.jpg"), np.zeros((32, 32, 3), np.uint8))
    (tmp_path / "labels" / "train" / "a.txt").write_text("0 0.5 0.5 0.2\n")
    (tmp_path / "data.yaml").write_text(f"path: {tmp_path}\ntrain: images/train\nval: images/train\nnames: [a]\n")
    task = get_task("point")
    cfg = task.load_data(str(tmp_path / "data.yaml"))
    with pytest.raises(DatasetError, match="expected 5 fields") as e:
        task.dataset(cfg, cfg.train, split="train", imgsz=64)
    assert "\n" not in str(e.value)


def test_points_draw_without_opencv(monkeypatch) -> None:
    import sys

    from libreyolo._cv import have_cv2

    pts = torch.tensor([[30.0, 20.0, 0.75, 0]])
    with_cv2 = Results(orig_img=np.zeros((40, 60, 3), np.uint8), names={0: "a"}, points=pts).plot()
    monkeypatch.setitem(sys.modules, "cv2", None)  # `import cv2` now raises ImportError
    assert not have_cv2()
    drawn = Results(orig_img=np.zeros((40, 60, 3), np.uint8), names={0: "a"}, points=pts).plot()
    assert drawn.shape == (40, 60, 3) and drawn.dtype == np.uint8
    assert (drawn[20, 30] == with_cv2[20, 30]).all() and (drawn[20, 30] != 0).any()  # the disc, class colour
