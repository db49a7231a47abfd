"""Depth Anything 3 (issue 25) on a CPU: parameter counts of every size against the reference
configurations, the reference checkpoint layout through ``LibreYOLO(path)``, the seam (network +
eager sky step) and the sky step itself, and the user path (weights name, predict -> Results.depth,
plot / save, one training epoch on shapes-depth, val, reload). The fidelity test against the
reference package is tests/unit/convert/test_depth_anything3_reference.py (skips without it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.data.shapes_depth import ensure_shapes_depth_dataset
from libreyolo.graphs.seam import run_eager
from libreyolo.models._vit.net import ViTSpec
from libreyolo.models.depth_anything3.convert import rename_key
from libreyolo.models.depth_anything3.family import DepthAnything3
from libreyolo.models.depth_anything3.nn import DA3Spec, build_depth_anything3
from libreyolo.models.depth_anything3.nn import DepthAnything3 as DA3Net
from libreyolo.models.depth_anything3.postprocess import sky_step
from libreyolo.registry import parse_weights_name

# what the reference package's configurations build (depth_anything_3 0.1.1, counted by
# instantiating da3-small.yaml / da3-base.yaml / da3mono-large.yaml / da3metric-large.yaml)
REFERENCE_TOTAL = {"s": 34_299_463, "b": 135_366_599, "mono_l": 334_171_394, "metric_l": 334_171_394}
# of those, not built here: the any-view head's ray branch and the camera encoder / decoder
NOT_BUILT = {"s": 9_307_749, "b": 37_079_141, "mono_l": 0, "metric_l": 0}


def _count(size: str) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in build_depth_anything3(size=size).parameters())


@pytest.mark.parametrize("size", list(REFERENCE_TOTAL))
def test_parameter_counts_match_the_reference(size: str) -> None:
    assert _count(size) == REFERENCE_TOTAL[size] - NOT_BUILT[size]


def _to_reference(key: str) -> str:
    """Our key -> the reference's (the inverse of convert.rename_key), under the Hub's ``model.``."""
    rules = [(r"encoder\.(.+)", r"backbone.pretrained.\1"), (r"token_norm\.(.+)", r"head.norm.\1"),
             (r"neck\.reassemble\.(\d)\.proj\.(.+)", r"head.projects.\1.\2"),
             (r"neck\.reassemble\.(\d)\.resize\.(.+)", r"head.resize_layers.\1.\2"),
             (r"head\.conv1\.(.+)", r"head.scratch.output_conv1.\1"), (r"head\.conv2\.(.+)", r"head.scratch.output_conv2.0.\1"),
             (r"head\.conv3\.(.+)", r"head.scratch.output_conv2.2.\1")]
    for pat, rep in rules:
        if re.fullmatch(pat, key):
            return "model." + re.sub(pat, rep, key)
    if m := re.fullmatch(r"neck\.convs\.(\d)\.weight", key):
        return f"model.head.scratch.layer{int(m[1]) + 1}_rn.weight"
    m = re.fullmatch(r"neck\.fusion\.(\d)\.(res[12]\.conv[12]|proj)\.(.+)", key)
    assert m, key
    part = "out_conv" if m[2] == "proj" else f"resConfUnit{m[2][3]}.conv{m[2][-1]}"
    return f"model.head.scratch.refinenet{4 - int(m[1])}.{part}.{m[3]}"


def test_reference_checkpoint_layout_loads(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(0)
    net = build_depth_anything3(size="s").eval()
    sd = {_to_reference(k): v.clone() for k, v in net.state_dict().items()}
    assert all(rename_key(r) == k for k, r in zip(net.state_dict(), sd, strict=True))
    sd["model.cam_dec.backbone.0.weight"] = torch.zeros(3, 3)  # dropped: pose / ray parts
    sd["model.head.scratch.refinenet1_aux.out_conv.weight"] = torch.zeros(2, 2)
    save_file(sd, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_name": "da3-small"}))
    model = LibreYOLO(str(tmp_path / "model.safetensors"))
    assert (model.FAMILY, model.size, model.task, model.nc) == ("depth_anything3", "s", "depth", 1)
    x = torch.rand(1, 3, 42, 56)
    with torch.no_grad():
        for a, b in zip(model.net.eval()(x), net(x), strict=True):
            assert torch.equal(a, b)


def _tiny(dual: bool) -> DA3Net:
    vit = ViTSpec(dim=32, depth=4, heads=2, patch=14, img_size=28, layer_scale=1.0, drop_path=0.0)
    return DA3Net(DA3Spec(vit, taps=(0, 1, 2, 3), neck=(8, 8, 16, 16), fusion=16, alt=-1 if not dual else 1,
                          cat_token=dual, dual=dual, head_hidden=8)).eval()


def test_sky_step_sets_sky_to_the_far_quantile_and_is_idempotent() -> None:
    depth = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0)) + 1.0
    sky = torch.zeros_like(depth)
    sky[0, :, :3] = 0.9  # image 0: 24 sky pixels; image 1: none (kept as is)
    out = sky_step(depth, sky)
    far = torch.quantile(depth[0, 0, 3:].flatten(), 0.99)
    assert torch.equal(out[0, 0, :3], far.expand(3, 8)) and torch.equal(out[0, 0, 3:], depth[0, 0, 3:])
    assert torch.equal(out[1], depth[1]) and torch.equal(sky_step(out, sky), out)
    few = torch.zeros_like(depth)
    few[0, 0, 0, :5] = 1.0  # 5 sky pixels: too few, the map is kept
    assert torch.equal(sky_step(depth, few), depth)


def test_seam_network_captured_sky_step_eager() -> None:
    model = DepthAnything3(size="s")
    (net,) = model.forward_stages()  # no sky head: one capturable stage
    assert net.capturable and model.OUTPUT_NAMES == ("depth", "conf")
    torch.manual_seed(0)
    model.net = _tiny(dual=False)
    with torch.no_grad():
        model.net.head.sky_conv3.bias.fill_(0.3)
    stages = model.forward_stages()
    assert [(s.name, s.capturable) for s in stages] == [("net", True), ("sky", False)] and "data-dependent" in stages[1].reason
    assert model.OUTPUT_NAMES == ("depth", "sky")
    x = torch.rand(1, 3, 42, 56, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        depth, sky = model.net(x)
        got = run_eager(stages, x)
    assert 0.05 < float((sky < 0.3).float().mean()) < 0.95
    assert torch.equal(got[0], sky_step(depth, sky)) and not torch.equal(got[0], depth)
    # the postprocess applies it again (the ONNX Runtime path): the same maps either way
    assert torch.equal(model.postprocess(got)[0], model.postprocess((depth, sky))[0])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return LibreYOLO("LibreDepthAnything3s-depth.pt", pretrained=False)


def test_weights_name_predict_plot_save(model, tmp_path: Path) -> None:
    assert parse_weights_name("LibreDepthAnything3mono_l-depth.pt").task == "depth"
    assert (model.FAMILY, model.task, model.size, model.names, model.imgsz, model.PREDICTS) == \
        ("depth_anything3", "depth", "s", {0: "depth"}, 518, "depth")
    (r,) = model.predict(SAMPLE_IMAGE, imgsz=42, save=True, save_txt=True, save_dir=str(tmp_path / "run"))
    assert r.depth.shape == r.orig_shape == (480, 640) and float(r.depth.min()) > 0.0  # exp: positive depth
    assert np.array_equal(np.load(tmp_path / "run" / "depth" / "sample.npy"), r.depth.numpy())
    assert (tmp_path / "run" / "sample.jpg").is_file()
    img = r.plot()
    assert img.shape == (480, 640, 3) and img.dtype == np.uint8
    assert r.save(tmp_path / "a.png").is_file()


def test_train_one_epoch_then_val_then_reload(tmp_path: Path) -> None:
    data = ensure_shapes_depth_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=64)
    torch.manual_seed(0)
    model = LibreYOLO("LibreDepthAnything3s-depth.pt", pretrained=False)
    assert model.build_criterion().target == "depth"
    out = model.train(data=str(data), epochs=1, imgsz=56, batch=2, workers=0, project=str(tmp_path / "runs"),
                      plots=False)
    assert 0.0 <= out["delta1"] <= 1.0 and out["fitness"] == out["delta1"] and out["abs_rel"] > 0
    m = model.val(data=str(data), imgsz=56, batch=2)
    assert m["images"] == 2.0 and m["rmse"] > 0 and 0.0 <= m["delta1"] <= 1.0
    again = LibreYOLO(out["best"])
    assert (again.FAMILY, again.size, again.task) == ("depth_anything3", "s", "depth")
    x = torch.rand(1, 3, 56, 56)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(again.net.eval()(x), model.net.eval()(x), strict=True))


def test_fused_attention_flag_is_off_by_default_and_flips(model) -> None:
    from libreyolo.kernels.attention import fused_attention_modules

    mods = fused_attention_modules(model.net)
    assert len(mods) == 12 and not any(m.fused_attn for m in mods) and model.arch == {}
    x = torch.rand(1, 3, 42, 42, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model.net(x)
        model.set_arch(fused_attn=True)
        try:
            assert model.arch == {"fused_attn": True}
            assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(model.net(x), ref, strict=True))
        finally:
            model.set_arch(fused_attn=None)
    assert model.arch == {}


@pytest.mark.parametrize("dual", [False, True])
def test_half_precision_twin_stays_in_its_dtype(dual: bool) -> None:
    """A twin cast to half precision (predict's ``half=True``; bfloat16 on the CPU) runs end to end
    in that dtype: the UV embedding of the any-view sizes (dual) is computed in float32 and must be
    cast back, or the next convolution gets float32 input against half weights (the GPU parity
    run of 2026-12-03 failed this way for the s and b sizes)."""
    net = _tiny(dual=dual).to(torch.bfloat16)
    with torch.no_grad():
        depth, aux = net(torch.rand(1, 3, 42, 56, dtype=torch.bfloat16))
    assert depth.dtype == aux.dtype == torch.bfloat16
    assert torch.isfinite(depth.float()).all()
