"""YOLOv9 end-to-end loss (one-to-many top-10 + one-to-one top-1, summed): hand-made targets, a
short CPU convergence run on a tiny shapes set, and the trainer's user path (train, val, reload)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from libreyolo.model import Model
from libreyolo.models._gelan.loss import YOLO9Loss
from libreyolo.models.yolo9_e2e.family import YOLO9E2E
from libreyolo.models.yolo9_e2e.loss import E2ELoss

R = 16


class _Net:
    nc, reg_max, strides = 2, R, (8, 16, 32)


def _box_preds(box: tuple[float, float, float, float], *, nc: int = 2, hw: int = 64) -> list[torch.Tensor]:
    """Level-0 anchors whose centre lies inside ``box`` (pixels) predict it exactly; the rest of
    the map predicts nothing useful. Class logits zero everywhere."""
    preds = [torch.zeros(1, 4 * R + nc, hw // s, hw // s) for s in (8, 16, 32)]
    b = torch.tensor(box) / 8
    for gy in range(hw // 8):
        for gx in range(hw // 8):
            cx, cy = gx + 0.5, gy + 0.5
            d = torch.tensor([cx - b[0], cy - b[1], b[2] - cx, b[3] - cy])
            if (d > 0).all():
                for side in range(4):
                    k = int(d[side].floor())
                    preds[0][0, side * R + k, gy, gx] = 30.0
                    preds[0][0, side * R + k + 1, gy, gx] = 30.0
    return preds


BATCH = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1]), "bboxes": torch.tensor([[0.375, 0.375, 0.25, 0.25]])}


def test_one_to_one_assignment_takes_one_anchor_per_object() -> None:
    """On the same predictions, the top-1 assigner marks exactly one anchor per ground truth and
    the top-10 one several; the E2E loss is the sum of the two losses with those assigners."""
    preds = _box_preds((16.0, 16.0, 32.0, 32.0))
    o2o, o2m = YOLO9Loss(_Net(), topk=1), YOLO9Loss(_Net(), topk=10)
    counts = []
    for crit in (o2o, o2m):
        seen = {}
        real = crit.assigner

        def spy(*a, real=real, seen=seen, **k):
            seen["t"] = real(*a, **k)
            return seen["t"]

        crit.assigner = spy
        crit(preds, BATCH)
        counts.append(int(seen["t"].fg_mask.sum()))
    assert counts[0] == 1 and counts[1] > 1
    e2e = E2ELoss(_Net())
    loss, items = e2e([*preds, *preds], BATCH)
    lo, io = YOLO9Loss(_Net(), topk=1)(preds, BATCH)
    lm, im = YOLO9Loss(_Net(), topk=10)(preds, BATCH)
    torch.testing.assert_close(loss, lo + lm)
    torch.testing.assert_close(items, torch.cat((io, im)))
    assert items.shape == (len(YOLO9E2E.LOSS_NAMES),)
    # eval-mode input (the one-to-one levels only): the one-to-one terms alone
    l3, i3 = e2e(preds, BATCH)
    torch.testing.assert_close(l3, lo)
    assert i3.shape == (3,)


def test_a_misplaced_one_to_one_prediction_costs_more() -> None:
    good = _box_preds((16.0, 16.0, 32.0, 32.0))
    bad = _box_preds((16.0, 16.0, 32.0, 24.0))  # half the object (IoU 0.5)
    e2e = E2ELoss(_Net())
    _, ig = e2e([*good, *good], BATCH)
    _, ib = e2e([*bad, *good], BATCH)  # only the one-to-one head's boxes moved
    assert ib[0] > ig[0] + 0.05  # its box term grows
    torch.testing.assert_close(ib[3:], ig[3:])  # the one-to-many terms do not change


def _shapes_batch(root: Path, n: int = 4) -> dict:
    from libreyolo.data.config import load_data_config
    from libreyolo.data.dataset import DetectionDataset, collate_detection

    cfg = load_data_config(str(root))
    ds = DetectionDataset([str(f) for f in cfg.train[:n]], imgsz=64, augment=False, nc=cfg.nc)
    batch = collate_detection([ds[i] for i in range(n)])
    batch["img"] = batch["img"].float() / 255.0
    return batch


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from libreyolo.data.shapes import ensure_shapes_dataset

    return ensure_shapes_dataset(tmp_path_factory.mktemp("shapes"), n_train=8, n_val=4, imgsz=64)


def test_short_cpu_run_decreases_both_heads_losses(shapes: Path) -> None:
    torch.manual_seed(0)
    batch = _shapes_batch(shapes)
    model = YOLO9E2E(size="t", nc=6)
    net = model.net.train()
    # Start both heads from boxes about one cell from the anchor instead of the flat initial
    # distribution (7.5 cells a side): from there the IoU-aware normalisation makes the loss grow
    # while boxes shrink to the objects' size, which says nothing about fitting (as for RTMDet).
    with torch.no_grad():
        for head in (net.head.o2o, net.head.o2m):
            for branch in head.box:
                bias = branch[-1].bias.view(4, R)
                bias.fill_(0.0)
                bias[:, 1] = 4.0
    crit = model.build_criterion()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    totals, o2o_cls = [], []
    for _ in range(12):
        loss, items = crit(net(batch["img"]), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert torch.isfinite(loss)
        totals.append(loss.item())
        o2o_cls.append(items[1].item())
    assert sum(totals[-3:]) < 0.7 * sum(totals[:3]), totals
    assert o2o_cls[-1] < 0.6 * o2o_cls[0], o2o_cls  # the one-to-one head learns its classes too


def test_trainer_val_and_reload(shapes: Path, tmp_path: Path) -> None:
    from libreyolo import LibreYOLO

    model = Model(YOLO9E2E(size="t", nc=80))  # the dataset has 6 classes: the head is rebuilt
    result = model.train(data=str(shapes), imgsz=64, batch=4, workers=0, device="cpu", nbs=4, mosaic=0.0,
                         close_mosaic=0, warmup_epochs=0, optimizer="AdamW", lr0=0.002, verbose=False,
                         tensorboard=False, project=str(tmp_path / "runs"), seed=0, epochs=1)
    with open(f"{result['save_dir']}/results.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert {f"train/{n}_loss" for n in YOLO9E2E.LOSS_NAMES} <= set(row)
    assert {"val/box_loss", "val/cls_loss", "val/dfl_loss", "metrics/mAP50-95"} <= set(row)
    assert "val/o2m_box_loss" not in row  # validation scores the one-to-one head that predicts
    metrics = model.val(data=str(shapes), imgsz=64, batch=4, device="cpu", workers=0, verbose=False)
    assert 0.0 <= metrics["mAP50-95"] <= metrics["mAP50"] <= 1.0
    loaded = LibreYOLO(result["best"])
    assert loaded.FAMILY == "yolo9_e2e" and loaded.nc == 6
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(model.net.eval()(x), loaded.net.eval()(x), strict=True):
            assert torch.equal(a, b)
