"""yolo9_seg: network contract, parameter counts against Ultralytics, fusing, the loss (finite,
decreasing on shapes-seg, no instances), postprocess + mask assembly."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
from torch import nn

from libreyolo.data.segment import SegmentDataset, collate_segment, load_segment_data
from libreyolo.data.shapes_seg import ensure_shapes_seg_dataset
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.models.yolo9_seg.family import YOLO9Seg
from libreyolo.models.yolo9_seg.nn import build_yolo9_seg

REG_MAX, NM = 16, 32


def _n(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_outputs_three_levels_and_prototypes(mode: str) -> None:
    torch.manual_seed(0)
    net = build_yolo9_seg(size="t", nc=3).train(mode == "train")
    with torch.no_grad():
        out = net(torch.rand(2, 3, 64, 96))
    shapes = [tuple(o.shape) for o in out]
    assert shapes == [(2, 4 * REG_MAX + 3 + NM, 64 // s, 96 // s) for s in (8, 16, 32)] + [(2, NM, 16, 24)]
    assert all(torch.isfinite(o).all() for o in out) and len(YOLO9Seg.OUTPUT_NAMES) == 4


def _ultralytics_seg(size: str):
    """Ultralytics' network of the same layout: ``yolov9c-seg.yaml`` for c; for t and s (no
    upstream seg config) ``yolov9{t,s}.yaml`` with its ``Detect`` replaced by ``Segment(nc, 32, npr)``."""
    os.environ.setdefault("YOLO_OFFLINE", "true")
    os.environ.setdefault("YOLO_CONFIG_DIR", tempfile.mkdtemp(prefix="ulcfg-"))
    ultralytics = pytest.importorskip("ultralytics")
    from ultralytics.nn.tasks import SegmentationModel
    from ultralytics.utils import YAML

    from libreyolo.models.yolo9_seg.nn import VARIANTS

    base = Path(ultralytics.__file__).parent / "cfg" / "models" / "v9"
    if size == "c":
        return SegmentationModel(str(base / "yolov9c-seg.yaml"), nc=80, verbose=False)
    d = YAML.load(base / f"yolov9{size}.yaml")
    assert d["head"][-1][2] == "Detect"
    d["head"][-1] = [d["head"][-1][0], 1, "Segment", ["nc", NM, VARIANTS[size].npr]]
    return SegmentationModel(d, nc=80, verbose=False)


@pytest.mark.parametrize("size", ["t", "s"])  # c: tests/unit/convert/test_yolo9_seg_ultralytics.py
def test_parameter_count_equals_ultralytics(size: str) -> None:
    ref = _ultralytics_seg(size)
    ours = build_yolo9_seg(size=size, nc=80, box_groups=1)  # Ultralytics' ungrouped box branch
    # Ultralytics keeps the DFL bin positions as a frozen 1x1 conv of reg_max weights
    assert _n(ours) + REG_MAX == _n(ref)
    for name in ("proto", "coef"):
        theirs = ref.model[-1].proto if name == "proto" else ref.model[-1].cv4
        assert _n(getattr(ours.head, name)) == _n(theirs)


def test_fuse_equals_unfused() -> None:
    torch.manual_seed(1)
    net = build_yolo9_seg(size="t", nc=2)
    randomise_norm_stats(net, seed=0)
    net.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        ref = [o.clone() for o in net(x)]
        got = net.fuse()(x)
    for r, g in zip(ref, got, strict=True):
        assert (r - g).abs().max().item() <= 1e-4 * max(1.0, r.abs().max().item())


def _batch(root: Path, n: int = 4) -> dict:
    cfg = load_segment_data(str(ensure_shapes_seg_dataset(root, n_train=n, n_val=1, imgsz=64)))
    ds = SegmentDataset(cfg.train, imgsz=64, nc=cfg.nc)
    return collate_segment([ds[i] for i in range(n)])


def test_loss_is_finite_and_decreases_on_shapes_seg(tmp_path: Path) -> None:
    torch.manual_seed(0)
    fam = YOLO9Seg(size="t", nc=6)
    batch = _batch(tmp_path)
    assert batch["masks"].shape[0] > 0
    crit = fam.build_criterion()
    net = fam.net.train()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    x = batch["img"].float() / 255
    history = []
    for _ in range(6):
        loss, items = crit(net(x), batch)
        assert torch.isfinite(loss) and items.shape == (4,) and bool((items >= 0).all())
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(items)
    first, last = history[0], history[-1]
    assert float(last.sum()) < float(first.sum())
    assert float(last[1]) < float(first[1])  # the mask term itself goes down


def test_loss_without_instances_is_finite_and_backpropagates(tmp_path: Path) -> None:
    fam = YOLO9Seg(size="t", nc=6)
    batch = {"batch_idx": torch.zeros(0, dtype=torch.long), "cls": torch.zeros(0), "bboxes": torch.zeros(0, 4),
             "masks": torch.zeros(0, 16, 16, dtype=torch.uint8)}
    net = fam.net.train()
    loss, items = fam.build_criterion()(net(torch.rand(2, 3, 64, 64)), batch)
    loss.backward()
    assert torch.isfinite(loss) and float(items[1]) == 0.0
    assert net.head.proto.cv3.conv.weight.grad is not None


def test_postprocess_keeps_coefficients_and_masks_stay_inside_boxes() -> None:
    torch.manual_seed(0)
    fam = YOLO9Seg(size="t", nc=3)
    with torch.no_grad():
        raw = fam.net.eval()(torch.rand(2, 3, 64, 64))
    dets = fam.postprocess(raw, conf=0.0, iou=0.7, classes=None, max_det=7, agnostic=False)
    assert [tuple(d.shape) for d in dets] == [(7, 6 + NM)] * 2
    masks = fam.masks(raw[-1][0], dets[0], input_hw=(64, 64))
    assert masks.shape == (7, 16, 16) and bool(((masks >= 0) & (masks <= 1)).all())
    for m, box in zip(masks, dets[0][:, :4] / 4, strict=True):
        ys, xs = torch.nonzero(m > 0, as_tuple=True)
        if len(xs):
            assert xs.min() >= box[0].floor() - 1 and xs.max() <= box[2].ceil() and ys.max() <= box[3].ceil()
    none = fam.postprocess(raw, conf=0.0, iou=0.7, classes=[], max_det=7, agnostic=False)
    assert none[0].shape == (0, 6 + NM)


def test_masks_to_the_original_image_in_chunks_equal_one_at_a_time() -> None:
    from libreyolo.tasks.segment.masks import CHUNK, to_original

    torch.manual_seed(0)
    probs = torch.rand(CHUNK * 2 + 3, 16, 16)
    kw = {"input_hw": (64, 64), "ratio": 0.5, "pad": (0.0, 8.0), "orig_hw": (96, 128)}
    together = to_original(probs, **kw)
    assert together.shape == (len(probs), 96, 128) and together.dtype == torch.bool
    assert torch.equal(together, torch.cat([to_original(p[None], **kw) for p in probs]))
