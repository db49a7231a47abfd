"""ViT and DeiT (issue 23): timm fidelity with fused attention off and on, the timm checkpoint path,
the position-embedding resampling, the fused-attention flag as an architecture option, and the
user path on the built-in demo data. Parameter counts: tests/unit/classify/test_classify_nets.py;
ONNX export and ONNX Runtime parity: tests/contract."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from libreyolo import LibreYOLO
from libreyolo.convert import ForeignWeights, convert_foreign
from libreyolo.errors import CheckpointError
from libreyolo.kernels.attention import fused_attention_modules, set_fused_attention
from libreyolo.layers.attention import Attention
from libreyolo.layers.classify import IMAGENET_MEAN, IMAGENET_STD
from libreyolo.model import Model
from libreyolo.models._vit.net import resample_pos_embed
from libreyolo.registry import families


def _standardise(x: torch.Tensor) -> torch.Tensor:
    return (x - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-12))


@torch.no_grad()
def _timm_reference(arch: str, *, nc: int = 1000):
    """A seeded timm model whose LayerNorms and class token are randomised too (a fresh init has
    gamma 1 / beta 0 and a ~0 class token, which would hide a swapped or dropped tensor)."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    ref = timm.create_model(arch, pretrained=False, num_classes=nc).eval()
    g = torch.Generator().manual_seed(1)
    for m in ref.modules():
        if isinstance(m, nn.LayerNorm):
            m.weight.copy_(0.75 + 0.5 * torch.rand(m.weight.shape, generator=g))
            m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    ref.cls_token.copy_(torch.randn(ref.cls_token.shape, generator=g))
    return ref


def _set_timm_fused(ref: nn.Module, on: bool) -> None:
    for m in ref.modules():
        if hasattr(m, "fused_attn"):
            m.fused_attn = on


def _convert(ref: nn.Module, arch: str) -> Model:
    return convert_foreign(ForeignWeights(source="timm", arch=arch, state_dict=ref.state_dict(), path="<memory>"))


@pytest.mark.parametrize("fused", [False, True], ids=["equation", "sdpa"])
def test_deit_tiny_logits_equal_timm(fused: bool) -> None:
    ref = _timm_reference("deit_tiny_patch16_224")
    model = _convert(ref, "deit_tiny_patch16_224")
    assert (model.FAMILY, model.size, model.nc) == ("deit", "t", 1000)
    assert set_fused_attention(model.net, enabled=fused) == 12
    _set_timm_fused(ref, fused)
    x = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = ref(_standardise(x))
        got = model.net.eval()(x)
    assert float(want.std()) > 0.1, "the reference logits are degenerate; the comparison would prove little"
    assert _rel_err(got, want) <= 1e-5


@pytest.mark.parametrize(("arch", "family", "size"), [("vit_small_patch16_224.augreg_in21k_ft_in1k", "vit", "s16"),
                                                      ("timm/deit_small_patch16_224.fb_in1k", "deit", "s")])
def test_small_sizes_convert_and_equal_timm(arch: str, family: str, size: str) -> None:
    """The 22 M models through each family's own match (pretrained tags and hub prefix stripped)."""
    ref = _timm_reference(arch.split("/")[-1].split(".")[0], nc=7)
    model = _convert(ref, arch)
    assert (model.FAMILY, model.size, model.nc) == (family, size, 7)
    x = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert _rel_err(model.net.eval()(x), ref(_standardise(x))) <= 1e-5


def test_base_arch_is_matched_without_building_timm() -> None:
    from libreyolo.models.vit.convert import match

    fw = ForeignWeights(source="timm", arch="hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k",
                        state_dict={"head.weight": torch.zeros(1000, 768)}, path="<memory>")
    assert match(fw) == ("b16", 1000)
    assert match(ForeignWeights(source="timm", arch="vit_base_patch32_224", state_dict={}, path="")) is None


def test_distilled_deit_names_its_extra_tensor() -> None:
    """A distilled DeiT has a distillation token and a second head this network lacks: converting it
    as the plain model fails on one line that names the first foreign key."""
    from libreyolo.models.deit.convert import convert_state_dict

    ref = _timm_reference("deit_tiny_distilled_patch16_224")
    own = families()["deit"].build_net(size="t", nc=1000, task="classify").state_dict()
    with pytest.raises(CheckpointError, match=r"dist_token|head_dist") as e:
        convert_state_dict(ref.state_dict(), own)
    assert "\n" not in str(e.value)


def test_libreyolo_loads_a_timm_checkpoint_file_and_predicts(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    ref = _timm_reference("deit_tiny_patch16_224", nc=3)
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "deit_tiny_patch16_224.fb_in1k",
                                                      "num_classes": 3, "label_names": ["cat", "dog", "owl"]}))
    model = LibreYOLO(str(tmp_path / "model.safetensors"))
    assert (model.FAMILY, model.size, model.names) == ("deit", "t", {0: "cat", 1: "dog", 2: "owl"})
    x = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(7))
    probs = model.predict(x, imgsz=224)[0].probs.data.float().cpu()
    with torch.no_grad():
        want = ref(_standardise(x)).softmax(-1)[0]
    assert _rel_err(probs, want) <= 1e-4


def test_pos_embed_resampling_equals_timm_bicubic() -> None:
    """Our resampling is timm's resample_abs_pos_embed with antialiasing off (the ONNX-portable
    kernel); the trained grid is returned as is."""
    layers = pytest.importorskip("timm.layers")
    pos = torch.randn(1, 1 + 14 * 14, 16, generator=torch.Generator().manual_seed(0))
    assert resample_pos_embed(pos, (14, 14), trained=(14, 14)) is pos
    for grid in [(4, 4), (20, 12), (2, 7)]:
        want = layers.resample_abs_pos_embed(pos, new_size=list(grid), num_prefix_tokens=1, antialias=False)
        got = resample_pos_embed(pos, grid, trained=(14, 14))
        assert got.shape == (1, 1 + grid[0] * grid[1], 16) and torch.equal(got, want), grid
        assert torch.equal(got[:, 0], pos[:, 0])  # the class token's embedding is never resampled


def test_other_input_sizes_run_and_resample() -> None:
    torch.manual_seed(0)
    model = Model(families()["deit"](size="t", nc=4))
    with torch.no_grad():
        for hw in [(32, 32), (96, 160), (240, 224)]:
            out = model.net.eval()(torch.rand(1, 3, *hw))
            assert out.shape == (1, 4) and torch.isfinite(out).all(), hw


@pytest.mark.parametrize("name", ["vit", "deit"])
def test_fused_attention_is_on_by_default_and_an_arch_option(name: str, tmp_path: Path) -> None:
    cls = families()[name]
    model = Model(cls(size=cls.SIZES[0], nc=3))
    mods = fused_attention_modules(model.net)
    assert len(mods) == 12 and all(isinstance(m, Attention) and m.fused_attn for m in mods)
    assert model.family.arch == {}
    assert set_fused_attention(model.net, enabled=False) == 12
    assert not any(m.fused_attn for m in mods) and model.family.arch == {"fused_attn": False}
    path = model.save(tmp_path / "off.pt")  # the option travels with the checkpoint
    loaded = LibreYOLO(str(path))
    assert loaded.family.arch == {"fused_attn": False}
    loaded.family.set_arch(fused_attn=True)
    assert all(m.fused_attn for m in fused_attention_modules(loaded.net)) and loaded.family.arch == {}
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():  # same weights either way; SDPA and the equation agree to rounding
        on = loaded.net.eval()(x)
        set_fused_attention(loaded.net, enabled=False)
        off = loaded.net(x)
    assert _rel_err(on, off) <= 1e-5


def test_train_defaults_are_the_deit_recipe() -> None:
    for name in ("vit", "deit"):
        d = families()[name].TRAIN_DEFAULTS
        assert d["optimizer"] == "AdamW" and d["weight_decay"] == 0.05 and d["lr0"] == 5e-4


def test_train_then_val_on_demo_data(tiny_cls: Path, tmp_path: Path) -> None:
    """DeiT-T on the built-in shapes-cls crops (32 px = a 2 x 2 token grid): the head is rebuilt for
    six classes with fused attention kept off, best.pt reloads, val reports top-1 / top-5."""
    torch.manual_seed(0)
    model = LibreYOLO("LibreDeiTt-cls.pt", pretrained=False, nc=3)
    set_fused_attention(model.net, enabled=False)
    out = model.train(data=str(tiny_cls), epochs=1, imgsz=32, batch=12, workers=0, project=str(tmp_path / "runs"),
                      verbose=False, tensorboard=False, plots=False, amp=False)
    assert model.nc == 6 and model.family.arch == {"fused_attn": False}
    assert 0.0 <= out["top1"] <= out["top5"] <= 1.0 and Path(out["best"]).is_file()
    loaded = LibreYOLO(out["best"])
    assert loaded.FAMILY == "deit" and loaded.nc == 6 and loaded.family.arch == {"fused_attn": False}
    m = loaded.val(data=str(tiny_cls), imgsz=32, batch=4, workers=0, verbose=False)
    assert set(m) >= {"top1", "top5", "fitness"} and math.isclose(m["top1"], out["top1"], abs_tol=1e-6)
    from libreyolo import SAMPLE_IMAGE

    r = loaded(SAMPLE_IMAGE, imgsz=32, save=True, save_dir=tmp_path / "pred")[0]
    assert r.boxes is None and r.probs is not None and r.probs.data.shape == (6,)
    assert r.save_path is not None and r.save_path.is_file() and r.plot().shape == (*r.orig_shape, 3)


def test_trace_records_the_equation_even_with_fused_attention_on() -> None:
    """SPEC K-9: torch.jit.trace (TorchScript, CoreML, NCNN) keeps the primitive math."""
    torch.manual_seed(0)
    net = families()["deit"].build_net(size="t", nc=3, task="classify").eval()
    assert all(m.fused_attn for m in fused_attention_modules(net))
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        traced = torch.jit.trace(net, (x,), check_trace=False)
        graph = str(traced.inlined_graph)
        assert "scaled_dot_product_attention" not in graph and "aten::softmax" in graph
        set_fused_attention(net, enabled=False)
        assert torch.equal(traced(x), net(x))
