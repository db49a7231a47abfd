"""rtmdet_ins: parameter counts against the published table, network contract, the head's
sharing, the dynamic convolution against a grouped-conv formulation, dice loss on hand-made masks,
the loss (finite, decreasing on shapes-seg, no instances), postprocess + masks, and the whole user
path (predict, train, val, reload) on shapes-seg."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from _seg_checks import (
    check_fuse_equals_unfused,
    fit_on_shapes_seg,
    loss_without_instances,
    n_params,
)

from libreyolo import SAMPLE_IMAGE
from libreyolo.data.shapes_seg import ensure_shapes_seg_dataset
from libreyolo.model import Model
from libreyolo.models.rtmdet_ins.family import RTMDetIns
from libreyolo.models.rtmdet_ins.loss import dice_loss, mask_centers
from libreyolo.models.rtmdet_ins.nn import NUM_PARAMS, PARAM_SPLITS, build_rtmdet_ins
from libreyolo.models.rtmdet_ins.postprocess import assemble_masks, dynamic_mask_logits
from libreyolo.registry import families, parse_weights_name

# RTMDet-Ins model zoo (mmdetection configs/rtmdet/README.md, "Instance Segmentation", 80 classes)
PUBLISHED_M = {"t": 5.6, "s": 10.18, "m": 27.58, "l": 57.37, "x": 102.7}
MEASURED = {"t": 5_638_187, "s": 10_183_311, "m": 27_575_111, "l": 57_365_663, "x": 102_703_767}  # ours, unfused


_n = n_params


@pytest.mark.parametrize("size", ["t", "s", "m", "l", "x"])
def test_parameter_count_matches_the_published_table(size: str) -> None:
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        n = _n(build_rtmdet_ins(size=size, nc=80))
    assert n == MEASURED[size]
    assert abs(n / 1e6 - PUBLISHED_M[size]) <= 0.03 * PUBLISHED_M[size]
    if size != "t":  # published to 0.01 M (tiny to 0.1 M): equal at that rounding
        assert round(n / 1e6, 2) == pytest.approx(PUBLISHED_M[size], abs=0.006)


def test_dynamic_kernel_layout_is_169_parameters() -> None:
    assert PARAM_SPLITS == ((10 * 8, 8 * 8, 8 * 1), (8, 8, 1)) and NUM_PARAMS == 169


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_outputs_three_levels_and_mask_features(mode: str) -> None:
    torch.manual_seed(0)
    net = build_rtmdet_ins(size="t", nc=3).train(mode == "train")
    with torch.no_grad():
        out = net(torch.rand(2, 3, 64, 96))
    assert [tuple(o.shape) for o in out] == [(2, 4 + 3 + 169, 64 // s, 96 // s) for s in (8, 16, 32)] + [(2, 8, 8, 12)]
    assert all(torch.isfinite(o).all() for o in out) and len(RTMDetIns.OUTPUT_NAMES) == 4
    assert all(bool((o[:, :4] >= 0).all()) for o in out[:3])  # distances through ReLU


def test_head_shares_the_class_tower_with_boxes_and_keeps_kernel_towers_per_level() -> None:
    head = build_rtmdet_ins(size="t", nc=3).head
    assert not hasattr(head, "reg_convs")  # the box prediction reads the class tower, as the reference
    assert len(head.cls_convs) == 2 and len(head.cls_convs[0].bns) == 3  # shared conv, BatchNorm per level
    towers = [t[0].conv.weight for t in head.kernel_convs]
    assert len({w.data_ptr() for w in towers}) == 3
    assert head.mask_head.projection.out_channels == 8 and len(head.mask_head.stacked_convs) == 4


def _grouped_conv_reference(mask_feat: torch.Tensor, kernels: torch.Tensor, points: torch.Tensor,
                            strides: torch.Tensor, feat_stride: int) -> torch.Tensor:
    """The dynamic convolution written as the paper describes it: 1x1 convs grouped by instance."""
    n = kernels.shape[0]
    p, h, w = mask_feat.shape
    ys, xs = torch.meshgrid(torch.arange(h) * float(feat_stride), torch.arange(w) * float(feat_stride), indexing="ij")
    rel_x = (points[:, 0, None, None] - xs) / (strides[:, None, None] * 8)
    rel_y = (points[:, 1, None, None] - ys) / (strides[:, None, None] * 8)
    x = torch.cat((rel_x[:, None], rel_y[:, None], mask_feat[None].expand(n, p, h, w)), 1).reshape(1, -1, h, w)
    w1, w2, w3, b1, b2, b3 = kernels.split((80, 64, 8, 8, 8, 1), 1)
    x = F.relu(F.conv2d(x, w1.reshape(n * 8, 10, 1, 1), b1.reshape(-1), groups=n))
    x = F.relu(F.conv2d(x, w2.reshape(n * 8, 8, 1, 1), b2.reshape(-1), groups=n))
    x = F.conv2d(x, w3.reshape(n, 8, 1, 1), b3.reshape(-1), groups=n)
    return x.reshape(n, h, w)


def test_dynamic_convolution_equals_grouped_1x1_convs() -> None:
    torch.manual_seed(0)
    feat, kernels = torch.randn(8, 6, 7), torch.randn(5, 169)
    points = torch.rand(5, 2) * 50
    strides = torch.tensor([8.0, 16.0, 32.0, 8.0, 16.0])
    got = dynamic_mask_logits(feat, kernels, points, strides, feat_stride=8)
    ref = _grouped_conv_reference(feat, kernels, points, strides, 8)
    assert got.shape == (5, 6, 7) and torch.allclose(got, ref, atol=1e-5, rtol=1e-5)
    assert dynamic_mask_logits(feat, kernels[:0], points[:0], strides[:0], feat_stride=8).shape == (0, 6, 7)


def test_relative_coordinates_put_the_mask_around_the_detection_point() -> None:
    """A kernel whose logit is ``1 - |rel_x| - |rel_y|`` (first layer: +-rel_x, +-rel_y; last layer
    negative sum plus one) peaks at the detection's own point."""
    k = torch.zeros(1, 169)
    w1 = torch.zeros(8, 10)
    w1[0, 0], w1[1, 0], w1[2, 1], w1[3, 1] = 1.0, -1.0, 1.0, -1.0
    w2 = torch.eye(8)
    w3 = -torch.ones(1, 8)
    k[0, :80], k[0, 80:144], k[0, 144:152] = w1.reshape(-1), w2.reshape(-1), w3.reshape(-1)
    k[0, -1] = 1.0
    point = torch.tensor([[40.0, 24.0]])  # grid pixel (col 5, row 3) at stride 8
    logits = dynamic_mask_logits(torch.zeros(8, 8, 8), k, point, torch.tensor([8.0]), feat_stride=8)
    assert tuple(divmod(int(logits[0].argmax()), 8)) == (3, 5) and float(logits[0, 3, 5]) == 1.0
    assert float(logits[0, 3, 6]) == pytest.approx(1 - 8 / 64)


def test_dice_loss_on_hand_made_masks() -> None:
    t = torch.zeros(3, 4, 4)
    t[:, :2] = 1  # 8 pixels each
    sure = 30.0
    perfect = torch.where(t[0] > 0, sure, -sure)
    disjoint = torch.where(t[1] > 0, -sure, sure)
    half = torch.full((4, 4), -sure)
    half[0] = sure  # 4 of the 8 pixels, nothing outside
    loss = dice_loss(torch.stack((perfect, disjoint, half)), t)
    # 1 - 2a / (b + c): perfect a = b = c = 8; disjoint a = 0; half a = 4, b = 4, c = 8
    assert loss.tolist() == pytest.approx([0.0, 1.0, 1 - 8 / 12], abs=1e-5)
    # an empty target scores 1 whatever the prediction (a = 0), and stays finite
    empty = dice_loss(torch.stack((torch.full((4, 4), -sure), perfect)), torch.zeros(2, 4, 4))
    assert empty.tolist() == pytest.approx([1.0, 1.0], abs=1e-6)


def test_mask_centres_are_the_centre_of_mass_in_input_pixels() -> None:
    m = torch.zeros(2, 4, 4)
    m[0, 0, 0] = m[0, 0, 2] = 1  # mask pixels (0, 0) and (0, 2): mean column 1
    boxes = torch.tensor([[0.0, 0.0, 16.0, 16.0], [2.0, 4.0, 6.0, 12.0]])
    c = mask_centers(m, boxes, mask_stride=4)
    assert c.tolist() == [[1 * 4 + 1.5, 1.5], [4.0, 8.0]]  # the empty mask falls back to the box centre


def test_fuse_equals_unfused() -> None:
    check_fuse_equals_unfused(lambda: build_rtmdet_ins(size="t", nc=2))


def test_loss_is_finite_and_decreases_on_shapes_seg(tmp_path: Path) -> None:
    torch.manual_seed(0)
    history = fit_on_shapes_seg(RTMDetIns(size="t", nc=6), tmp_path, steps=20, n_items=3)
    h = torch.stack(history)  # (steps, 3): cls, box, seg
    first, last = h[:3].mean(0), h[-3:].mean(0)
    assert float(first[2]) > 0.0  # positives were found and the dice term is live
    # the box and mask terms fit; the QFL term may rise early, its soft targets (IoUs) growing
    assert float(last[1]) < 0.85 * float(first[1]), h[:, 1].tolist()
    assert float(last[2]) < 0.98 * float(first[2]), h[:, 2].tolist()


def test_loss_without_instances_is_finite_and_backpropagates() -> None:
    net, items = loss_without_instances(RTMDetIns(size="t", nc=6))
    assert float(items[2]) == 0.0
    assert net.head.mask_head.projection.weight.grad is not None
    assert net.head.rtm_kernel[0].weight.grad is not None


def test_postprocess_carries_point_stride_and_kernel_of_each_detection() -> None:
    torch.manual_seed(0)
    fam = RTMDetIns(size="t", nc=3)
    with torch.no_grad():
        raw = fam.net.eval()(torch.rand(2, 3, 64, 64))
    dets = fam.postprocess(raw, conf=0.0, iou=0.7, classes=None, max_det=7, agnostic=False)
    assert [tuple(d.shape) for d in dets] == [(7, 6 + 3 + 169)] * 2
    for b, d in enumerate(dets):
        px, py = d[:, 6], d[:, 7]
        assert bool(((d[:, 0] <= px) & (px <= d[:, 2]) & (d[:, 1] <= py) & (py <= d[:, 3])).all())  # ReLU distances
        for row in d:
            level = {8: 0, 16: 1, 32: 2}[int(row[8])]
            col, r = int(row[6]) // int(row[8]), int(row[7]) // int(row[8])
            assert torch.equal(row[9:], raw[level][b, 4 + 3:, r, col].float())
    masks = fam.masks(raw[-1][0], dets[0], input_hw=(64, 64))
    assert masks.shape == (7, 16, 16) and bool(((masks >= 0) & (masks <= 1)).all())
    direct = torch.sigmoid(F.interpolate(
        dynamic_mask_logits(raw[-1][0], dets[0][:, 9:], dets[0][:, 6:8], dets[0][:, 8], feat_stride=8)[None],
        scale_factor=2, mode="bilinear", align_corners=False)[0])
    assert torch.allclose(masks, direct)
    none = fam.postprocess(raw, conf=0.0, iou=0.7, classes=[], max_det=7, agnostic=False)
    assert none[0].shape == (0, 178) and assemble_masks(raw[-1][0], none[0]).shape == (0, 16, 16)


def test_weights_names_resolve() -> None:
    for size in ("t", "s", "m", "l", "x"):
        parsed = parse_weights_name(f"LibreRTMDetIns{size}-seg.pt")
        assert (parsed.family, parsed.size, parsed.task) == ("rtmdet_ins", size, "segment")
    assert parse_weights_name("LibreRTMDets.pt").family == "rtmdet"


def test_predict_train_val_and_reload_on_shapes_seg(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Model(families()["rtmdet_ins"](size="t", nc=6))
    r = model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=4)[0]
    assert r.orig_shape == (480, 640) and len(r.boxes) == 4
    assert r.masks.data.shape == (4, 480, 640) and r.masks.data.dtype == torch.bool
    assert len(r.masks.xy) == 4

    data = ensure_shapes_seg_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=96)
    out = model.train(data=str(data), epochs=1, imgsz=64, batch=4, workers=0, device="cpu", lr0=1e-3,
                      project=str(tmp_path / "runs"), verbose=False, tensorboard=False, plots=False)
    for key in ("mAP50-95", "mask_mAP50-95", "mask_mAP50", "fitness"):
        assert 0.0 <= out[key] <= 1.0, key
    header = (Path(out["best"]).parents[1] / "results.csv").read_text().splitlines()[0].split(",")
    assert {"train/cls_loss", "train/box_loss", "train/seg_loss", "val/seg_loss", "metrics/mask_mAP50-95"} <= set(header)
    m = model.val(data=str(data), imgsz=64, batch=4, workers=0, verbose=False, plots=False)
    assert m["images"] == 2 and m["instances"] > 0 and "mask_mAP50-95" in m
    from libreyolo import LibreYOLO

    loaded = LibreYOLO(out["best"])
    assert loaded.task == "segment" and loaded.FAMILY == "rtmdet_ins"
    r2 = loaded(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=2)[0]
    assert r2.masks.data.shape == (2, 480, 640)


def test_pad_rows_lays_rows_out_as_the_padded_boxes() -> None:
    from libreyolo.models._rtmdet.loss import build_targets, pad_rows

    idx = torch.tensor([2, 0, 2, 2, 0])
    boxes = torch.rand(5, 4) * 0.5 + 0.25
    batch = {"batch_idx": idx, "cls": torch.arange(5), "bboxes": boxes}
    labels, _, mask = build_targets(batch, batch_size=3, img_hw=(64, 64), device=torch.device("cpu"))
    assert torch.equal(pad_rows(torch.arange(5), idx, batch_size=3), labels)  # cls = row index here
    assert torch.equal(pad_rows(torch.ones(5, dtype=torch.bool), idx, batch_size=3), mask)



def test_parity_train_segment_batch_feeds_the_criterion() -> None:
    """benchmarks/parity_train.py's synthetic instance-segmentation batch (what the GPU training
    parity rows use) gives positives and a live dice term for this family."""
    from benchmarks import parity_train

    b = parity_train.segment_batch(batch=2, imgsz=64, nc=6, seed=1, device=torch.device("cpu"))
    model = Model(families()["rtmdet_ins"](size="t", nc=6))
    loss, items = model.build_criterion()(model.net.train()(b["img"]), b)
    assert torch.isfinite(loss) and items.shape == (3,) and float(items[2]) > 0
