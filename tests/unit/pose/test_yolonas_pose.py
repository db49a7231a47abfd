"""yolonas_pose: parameter counts against the model card, forward shapes, the keypoint decode,
the loss (finite without objects, decreasing on a fixed batch), postprocess, the head rebuilt for
another keypoint count, weights names beside the detector's, a super-gradients-layout checkpoint
read on the CPU, and predict / train / val / reload on shapes-pose through the public API."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from _pose_checks import (
    check_keypoint_terms_decrease,
    check_loss_without_objects,
    check_postprocess_columns_and_arch,
)

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.data.shapes_pose import ensure_shapes_pose_dataset
from libreyolo.errors import ConfigError
from libreyolo.model import Model
from libreyolo.models._gelan.pose import decode_keypoints
from libreyolo.models.yolonas_pose.loss import YOLONASPoseLoss
from libreyolo.models.yolonas_pose.nn import VARIANTS, build_yolonas_pose, reference_param_count
from libreyolo.registry import families, parse_weights_name

# nc=1, nkpt=17 (the reference's COCO person model): (unfused, fused); the published counts are
# super-gradients' module counts = unfused + its unused rbr_reparam convs (reference_param_count),
# checked equal to the reference's own modules in tests/unit/convert/test_yolonas_pose_super_gradients.py
PARAMS = {"n": (7_165_323, 6_843_635), "s": (16_050_444, 15_337_756), "m": (40_886_734, 38_916_414),
          "l": (56_919_508, 54_371_076)}


@pytest.mark.parametrize("size", list(PARAMS))
def test_parameter_counts_match_the_model_card(size: str) -> None:
    net = build_yolonas_pose(size=size, nc=1, nkpt=17)
    assert VARIANTS[size].paper_counts == "reference"
    published = VARIANTS[size].paper_params_m * 1e6
    assert abs(reference_param_count(net) - published) <= 0.03 * published
    assert sum(p.numel() for p in net.parameters()) == PARAMS[size][0]
    net.eval().fuse()
    assert sum(p.numel() for p in net.parameters()) == PARAMS[size][1]
    assert reference_param_count(net) == PARAMS[size][1]  # a fused network has no branches left to count twice


def test_forward_shapes_train_and_eval_and_fuse_keeps_outputs() -> None:
    torch.manual_seed(0)
    net = build_yolonas_pose(size="n", nc=2, nkpt=5)
    x = torch.rand(2, 3, 64, 96)
    assert [tuple(o.shape) for o in net.train()(x)] == [(2, 85, 8, 12), (2, 85, 4, 6), (2, 85, 2, 3)]
    net.eval()
    with torch.no_grad():
        before = net(x)
        after = net.fuse()(x)
    for a, b in zip(before, after, strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    assert net.kpt_scale == 1.0 and all(abs(m.eps - 1e-6) < 1e-12 for m in build_yolonas_pose(size="n").modules()
                                        if isinstance(m, torch.nn.BatchNorm2d))


def test_head_channel_layout_x_y_then_visibility_from_the_class_conv() -> None:
    net = build_yolonas_pose(size="n", nc=2, nkpt=3).eval()
    head = net.heads.head1
    with torch.no_grad():
        head.pose_pred.weight.zero_()
        head.pose_pred.bias.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))  # (x0, y0, x1, y1, x2, y2)
        head.cls_pred.weight.zero_()
        head.cls_pred.bias.copy_(torch.tensor([10.0, 20.0, -1.0, -2.0, -3.0]))  # 2 classes, then 3 visibilities
        out = head(torch.rand(1, net.neck.out_channels[0], 2, 2))
    assert out[0, 68:, 0, 0].tolist() == [10.0, 20.0, 1.0, 2.0, -1.0, 3.0, 4.0, -2.0, 5.0, 6.0, -3.0]


def test_bad_build_arguments() -> None:
    with pytest.raises(ConfigError, match="no size 'x'"):
        build_yolonas_pose(size="x")
    with pytest.raises(ConfigError, match="nkpt"):
        build_yolonas_pose(size="n", nkpt=0)


def test_decode_is_the_reference_offset_plus_cell_times_stride() -> None:
    raw = torch.tensor([[[0.25, -0.5, 0.0]]])  # one anchor (cell (1, 3) of stride 16), one keypoint
    k = decode_keypoints(raw, torch.tensor([[3.5, 1.5]]), torch.tensor([[16.0]]), scale=1.0)
    assert k.tolist() == [[[(0.25 + 3.0) * 16, (-0.5 + 1.0) * 16, 0.5]]]


def test_loss_without_objects_is_finite_and_backpropagates() -> None:
    net = build_yolonas_pose(size="n", nc=2, nkpt=5).train()
    check_loss_without_objects(net, YOLONASPoseLoss(net))


def test_loss_and_keypoint_terms_decrease_over_a_few_steps() -> None:
    torch.manual_seed(0)
    net = build_yolonas_pose(size="n", nc=2, nkpt=5).train()
    crit = YOLONASPoseLoss(net)
    assert crit.kpt_scale == 1.0 and crit.reg_max == 17
    check_keypoint_terms_decrease(net, crit)


def test_postprocess_columns_and_family_arch() -> None:
    check_postprocess_columns_and_arch("yolonas_pose", "n", levels_error="YOLO-NAS-Pose postprocess expects 3 levels")


def test_weights_names_resolve_to_the_detector_and_the_pose_family() -> None:
    def parsed(name: str) -> tuple[str, str, str]:
        p = parse_weights_name(name)
        return p.family, p.size, p.task

    assert parsed("LibreYOLONASs.pt") == ("yolonas", "s", "detect")
    assert parsed("LibreYOLONASPoses-pose.pt") == ("yolonas_pose", "s", "pose")
    assert parsed("LibreYOLONASPosen-pose.pt") == ("yolonas_pose", "n", "pose")
    with pytest.raises(ConfigError, match="no registered family"):
        parse_weights_name("LibreYOLONASn.pt")  # the detector has no n


def _upstream_keys(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict in super-gradients' names (ConvBNReLU's ``seq``, SPP's ``cv1`` / ``cv2``)."""
    conv_bn = re.compile(r"^(heads\.head\d\.(?:bbox_stem|pose_stem|(?:cls|reg|pose)_convs\.\d+))\.(conv|bn)\.")
    out = {}
    for k, v in sd.items():
        k = conv_bn.sub(r"\1.seq.\2.", k)
        k = k.replace("context_module.conv1.", "context_module.cv1.").replace("context_module.conv2.",
                                                                              "context_module.cv2.")
        out[k] = v
    return out


def test_a_super_gradients_layout_checkpoint_converts_to_the_pose_family(tmp_path: Path) -> None:
    torch.manual_seed(0)
    src = build_yolonas_pose(size="n", nc=1, nkpt=17).eval()
    path = tmp_path / "ckpt_best.pth"
    torch.save({"net": _upstream_keys(src.state_dict())}, path)
    model = LibreYOLO(str(path))  # the detector's converter must pass it on (its heads have no shared stem)
    assert model.FAMILY == "yolonas_pose" and (model.size, model.nc, model.nkpt) == ("n", 1, 17)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(model.net.eval()(x), src(x), strict=True):
            assert torch.equal(a, b)


def test_predict_train_val_and_reload_on_shapes_pose(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Model(families()["yolonas_pose"](size="n", nc=2))
    r = model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=3)[0]
    assert r.keypoints.shape == (3, 17, 3) and r.orig_shape == (480, 640)
    data = ensure_shapes_pose_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=96)
    out = model.train(data=str(data), epochs=1, imgsz=64, batch=4, workers=0, device="cpu", lr0=1e-3,
                      project=str(tmp_path / "runs"), verbose=False, tensorboard=False, plots=False)
    assert model.nkpt == 5 and model.names == {0: "square", 1: "triangle"}  # rebuilt for kpt_shape [5, 3]
    for key in ("mAP50-95", "kpt_mAP50-95", "kpt_mAP50", "fitness"):
        assert 0.0 <= out[key] <= 1.0, key
    header = (Path(out["best"]).parents[1] / "results.csv").read_text().splitlines()[0].split(",")
    assert {"train/pose_loss", "train/kobj_loss", "train/dfl_loss", "metrics/kpt_mAP50-95"} <= set(header)
    m = model.val(data=str(data), imgsz=64, batch=4, workers=0, verbose=False, plots=False)
    assert m["images"] == 2 and m["instances"] > 0 and "kpt_mAP50-95" in m
    loaded = LibreYOLO(out["best"])
    assert loaded.task == "pose" and loaded.FAMILY == "yolonas_pose" and loaded.nkpt == 5
    r = loaded(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=2)[0]
    assert r.keypoints.shape == (2, 5, 3) and r.keypoints.skeleton == [[0, 1], [1, 2], [2, 3], [3, 0], [2, 4], [3, 4]]
