"""YOLO-NAS-Pose against super-gradients' own module code (3.7.1), when its source is installed.

As ``test_yolonas_super_gradients.py``: ``pip install --no-deps --target DIR super-gradients==3.7.1``
and ``DIR`` on ``PYTHONPATH``; ``_sg_source.PoseReference`` builds the reference from its real
QARepVGG / YOLO-NAS stage / PAN neck classes and its ``YoloNASPoseNDFLHeads`` /
``YoloNASPoseDFLHead`` as ``yolo_nas_pose_{n,s,m,l}_arch_params.yaml`` wire them (bn_eps 1e-6).
With random BatchNorm statistics, shortcut weights and head biases, its state dict is saved as its
trainer saves (``{"net": ...}``), loaded by path through ``LibreYOLO`` (which must pick
``yolonas_pose``, not the detector), and both run in eval mode on the same input (fp32): raw class,
box and keypoint-visibility logits, decoded boxes, scores, keypoint coordinates and keypoint
scores agree, unfused and fused. The parameter count equals the reference's less its unused
``rbr_reparam`` convs, and :func:`reference_param_count` equals the reference's total. CI skips
this file (the package is not in the ``ref`` extra)."""

from __future__ import annotations

import pytest
import torch
from _sg_source import PoseReference, loaded, source_root

from libreyolo import LibreYOLO
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.models._gelan.pose import decode_keypoints
from libreyolo.models.yolonas_pose.family import YOLONASPose
from libreyolo.models.yolonas_pose.nn import reference_param_count
from libreyolo.ops.anchors import dfl_expectation, dist2bbox, flatten_levels, make_anchors

ROOT = source_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="super-gradients source not installed "
                                "(pip install --no-deps --target DIR super-gradients==3.7.1; DIR on PYTHONPATH)")
K = 17


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


def _compare(out: list[torch.Tensor], ref: tuple, tol: float, net_scale: float) -> None:
    (boxes, scores, coords, kscores), raw = ref
    flat = flatten_levels(out)  # (B, 68 + 1 + 3K, A)
    reg, cls = flat[:, :68].transpose(1, 2), flat[:, 68:69].transpose(1, 2)
    kpt = flat[:, 69:].transpose(1, 2).unflatten(2, (K, 3))  # (B, A, K, 3)
    assert _rel(cls, raw[0]) < tol and _rel(reg, raw[1]) < tol and _rel(kpt[..., 2], raw[3]) < tol
    pts, st = make_anchors([tuple(o.shape[2:]) for o in out], (8, 16, 32))
    assert _rel(dist2bbox(dfl_expectation(flat[:, :68], 17), pts) * st, boxes) < tol
    assert _rel(cls.sigmoid(), scores) < tol
    dec = decode_keypoints(kpt, pts, st, scale=net_scale)  # (B, A, K, 3)
    assert _rel(dec[..., :2], coords) < tol and _rel(dec[..., 2], kscores) < tol


@pytest.mark.parametrize("size", ["n", "s", "m", "l"])
def test_converted_reference_weights_give_equal_outputs(size: str, tmp_path) -> None:  # noqa: ANN001 - fixture
    assert ROOT is not None
    with loaded(ROOT) as mods:
        torch.manual_seed(0)
        ref = PoseReference(ROOT, mods, size)
        randomise_norm_stats(ref, seed=1)
        with torch.no_grad():
            for name, p in ref.named_parameters():
                if name.endswith(".alpha"):  # the bottlenecks' shortcut weights
                    p.uniform_(0.5, 1.5)
                elif name.endswith(("pred.bias", "pred.weight")):  # keep every output channel informative
                    p.normal_(0.0, 0.1)
        ref.eval()
        total = sum(p.numel() for p in ref.parameters())
        ours = YOLONASPose(size=size, nc=1).net
        assert sum(p.numel() for n, p in ref.named_parameters() if "rbr_reparam" not in n) == \
            sum(p.numel() for p in ours.parameters())
        assert reference_param_count(ours) == total
        path = tmp_path / "ckpt_best.pth"
        torch.save({"net": ref.state_dict(), "acc": 0.0}, path)
        x = torch.rand(2, 3, 96, 128, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            expected = ref(x)
    model = LibreYOLO(str(path))
    assert isinstance(model.family, YOLONASPose) and (model.size, model.nc, model.nkpt) == (size, 1, K)
    net = model.net.eval()
    with torch.no_grad():
        _compare(net(x), expected, 1e-5, net.kpt_scale)
        _compare(net.fuse()(x), expected, 1e-5, net.kpt_scale)
