"""yolo9_seg: network contract, parameter counts against Ultralytics, fusing, the loss (finite,
decreasing on shapes-seg, no instances), postprocess + mask assembly."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
from _seg_checks import (
    check_fuse_equals_unfused,
    fit_on_shapes_seg,
    loss_without_instances,
    n_params,
)

from libreyolo.models.yolo9_seg.family import YOLO9Seg
from libreyolo.models.yolo9_seg.nn import build_yolo9_seg

REG_MAX, NM = 16, 32


_n = n_params


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
    check_fuse_equals_unfused(lambda: build_yolo9_seg(size="t", nc=2))


def test_loss_is_finite_and_decreases_on_shapes_seg(tmp_path: Path) -> None:
    torch.manual_seed(0)
    history = fit_on_shapes_seg(YOLO9Seg(size="t", nc=6), tmp_path, steps=6, n_items=4)
    first, last = history[0], history[-1]
    assert float(last.sum()) < float(first.sum())
    assert float(last[1]) < float(first[1])  # the mask term itself goes down


def test_loss_without_instances_is_finite_and_backpropagates(tmp_path: Path) -> None:
    net, items = loss_without_instances(YOLO9Seg(size="t", nc=6))
    assert float(items[1]) == 0.0
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
