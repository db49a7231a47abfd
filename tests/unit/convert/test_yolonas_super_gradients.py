"""YOLO-NAS against super-gradients' own module code (3.7.1), when its source is installed.

super-gradients cannot be imported here (its trainer pins numpy<=1.23, onnxruntime==1.15, ...),
but its wheel installs without dependencies: ``pip install --no-deps --target DIR
super-gradients==3.7.1`` and ``DIR`` on ``PYTHONPATH``. ``_sg_source`` then builds the reference
network from the real QARepVGG / YOLO-NAS stage / PAN neck / NDFL head classes as the arch-params
yaml wires them (module docstring there). With a fixed seed, random BatchNorm statistics and
shortcut weights, its state dict is saved as its trainer saves (``{"net": ...}``), loaded by path
through ``LibreYOLO``, and both run in eval mode on the same input (fp32). CI skips this file (the
package is not in the ``ref`` extra: docs/weights.md)."""

from __future__ import annotations

import pytest
import torch
from _sg_source import Reference, loaded, source_root

from libreyolo import LibreYOLO
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.models.yolonas.family import YOLONAS
from libreyolo.ops.anchors import dfl_expectation, dist2bbox, flatten_levels, make_anchors

ROOT = source_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="super-gradients source not installed "
                                "(pip install --no-deps --target DIR super-gradients==3.7.1; DIR on PYTHONPATH)")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


@pytest.mark.parametrize("size", ["s", "m", "l"])
def test_converted_reference_weights_give_equal_outputs(size: str, tmp_path) -> None:  # noqa: ANN001 - fixture
    assert ROOT is not None
    with loaded(ROOT) as mods:
        torch.manual_seed(0)
        ref = Reference(ROOT, mods, size, nc=80)
        randomise_norm_stats(ref, seed=1)
        with torch.no_grad():
            for name, p in ref.named_parameters():
                if name.endswith(".alpha"):  # the bottlenecks' shortcut weights
                    p.uniform_(0.5, 1.5)
        ref.eval()
        assert sum(p.numel() for n, p in ref.named_parameters() if "rbr_reparam" not in n) == \
            sum(p.numel() for p in YOLONAS(size=size, nc=80).net.parameters())
        path = tmp_path / "ckpt_best.pth"
        torch.save({"net": ref.state_dict(), "acc": 0.0}, path)
        x = torch.rand(2, 3, 96, 128, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            (boxes, scores), raw = ref(x)
    model = LibreYOLO(str(path))
    assert isinstance(model.family, YOLONAS) and (model.size, model.nc) == (size, 80)
    net = model.net.eval()
    with torch.no_grad():
        out = net(x)
    flat = flatten_levels(out)  # (B, 68 + C, A)
    reg, cls = flat[:, :68].transpose(1, 2), flat[:, 68:].transpose(1, 2)
    assert _rel(cls, raw[0]) < 1e-5 and _rel(reg, raw[1]) < 1e-5
    pts, st = make_anchors([tuple(o.shape[2:]) for o in out], (8, 16, 32))
    got_boxes = dist2bbox(dfl_expectation(flat[:, :68], 17), pts) * st
    assert _rel(got_boxes, boxes) < 1e-5 and _rel(cls.sigmoid(), scores) < 1e-5
    with torch.no_grad():
        fused = flatten_levels(net.fuse()(x))
    assert _rel(fused[:, 68:].transpose(1, 2), raw[0]) < 1e-5 and _rel(fused[:, :68].transpose(1, 2), raw[1]) < 1e-5
