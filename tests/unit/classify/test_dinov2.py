"""DINOv2 (issue 23): parameter counts, timm and transformers fidelity, the checkpoint files, the
position-embedding resampling, the fused-attention flag (off by default) and the user path on the
built-in demo data. ONNX export and ONNX Runtime parity: tests/contract."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from _vit_refs import randomise_vit as _randomise
from _vit_refs import rel_err as _rel_err
from _vit_refs import standardise as _standardise
from torch import nn

from libreyolo import LibreYOLO
from libreyolo.convert import ForeignWeights, convert_foreign
from libreyolo.errors import CheckpointError
from libreyolo.kernels.attention import fused_attention_modules, set_fused_attention
from libreyolo.model import Model
from libreyolo.models._vit.net import resample_pos_embed
from libreyolo.registry import families

TIMM_ARCH = {"s14": "vit_small_patch14_dinov2", "b14": "vit_base_patch14_dinov2", "l14": "vit_large_patch14_dinov2"}
# backbone parameters (millions): the timm model cards (22.1 / 86.6 / 304.4) and the DINOv2 paper
# (21 / 86 / 300 M); the paper's ViT-S/14 figure is 5 % below the tensors of its own checkpoint
PUBLISHED = {"s14": 22.1, "b14": 86.6, "l14": 304.4}


def _timm_reference(nc: int = 0) -> nn.Module:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    ref = timm.create_model("vit_small_patch14_dinov2", pretrained=False, num_classes=nc).eval()
    _randomise(ref)
    return ref


def _hf_reference(nc: int = 7) -> nn.Module:
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tf.Dinov2Config(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, patch_size=14,
                          image_size=518, layerscale_value=1e-5, num_labels=nc, attn_implementation="eager")
    ref = tf.Dinov2ForImageClassification(cfg).eval()
    _randomise(ref)
    return ref


@pytest.mark.parametrize("size", ["s14", "b14", "l14"])
def test_backbone_parameter_count_equals_timm_and_published(size: str) -> None:
    """Everything but the head equals timm's DINOv2 backbone tensor for tensor count (fused and
    unfused are the same: no BatchNorm); the head, class token + patch mean -> nc, adds (2D + 1) nc."""
    timm = pytest.importorskip("timm")
    with torch.device("meta"):
        net = families()["dinov2"].build_net(size=size, nc=1000, task="classify")
        ref = timm.create_model(TIMM_ARCH[size], pretrained=False, num_classes=0)
    head = sum(p.numel() for p in net.body.head.parameters())
    backbone = sum(p.numel() for p in net.parameters()) - head
    assert backbone == sum(p.numel() for p in ref.parameters())
    assert abs(backbone / 1e6 / PUBLISHED[size] - 1) < 0.03, f"{size}: {backbone / 1e6:.3f} M"
    dim = net.body.spec.dim
    assert head == (2 * dim + 1) * 1000


@torch.no_grad()
def test_timm_features_and_class_token_head_equal_ours() -> None:
    """timm's ViT-S/14 at its trained 518 px (no position-embedding resampling): the final-norm tokens
    equal ours, and timm's class-token head, converted to ours with a zero patch-mean half, gives the
    same logits."""
    ref = _timm_reference(nc=5)
    sd = dict(ref.state_dict())
    sd["mask_token"] = torch.zeros(1, 384)  # the official checkpoints carry it; it is dropped
    model = convert_foreign(ForeignWeights(source="timm", arch="timm/vit_small_patch14_dinov2.lvd142m",
                                           state_dict=sd, path="<memory>"))
    assert (model.FAMILY, model.size, model.nc) == ("dinov2", "s14", 5)
    x = torch.rand(1, 3, 518, 518, generator=torch.Generator().manual_seed(5))
    feats = ref.forward_features(_standardise(x))
    body = model.net.eval().body
    tokens = body.tokens(_standardise(x))
    assert float(feats.std()) > 0.1
    assert _rel_err(tokens, feats) <= 1e-5
    want = ref.forward_head(feats)
    assert float(want.std()) > 0.1 and _rel_err(body.head(body.features(_standardise(x))), want) <= 1e-5


@pytest.mark.parametrize("fused", [False, True], ids=["equation", "sdpa"])
@pytest.mark.parametrize("hw", [(112, 112), (98, 126)], ids=["112", "98x126"])
@torch.no_grad()
def test_transformers_logits_equal_ours_at_resampled_sizes(hw: tuple[int, int], fused: bool) -> None:
    """transformers' Dinov2ForImageClassification (the linear-evaluation head on the class token and
    the patch-token mean) resamples the 37 x 37 position embedding bicubically to the input grid, as
    ours: logits equal at 8 x 8 and 7 x 9 patches, the equation or SDPA."""
    ref = _hf_reference()
    model = convert_foreign(ForeignWeights(source="transformers", arch="dinov2", state_dict=ref.state_dict(),
                                           path="<memory>"))
    assert (model.FAMILY, model.size, model.nc) == ("dinov2", "s14", 7)
    assert set_fused_attention(model.net, enabled=fused) == 12
    x = torch.rand(2, 3, *hw, generator=torch.Generator().manual_seed(6))
    want = ref(pixel_values=_standardise(x)).logits
    assert float(want.std()) > 0.1
    assert _rel_err(model.net.eval()(x), want) <= 1e-5


def _hub_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' state dict under the names of the files on the Hub (query/key/value, output.dense)."""
    old = {"attention.q_proj": "attention.attention.query", "attention.k_proj": "attention.attention.key",
           "attention.v_proj": "attention.attention.value", "attention.o_proj": "attention.output.dense"}
    out = {}
    for k, v in sd.items():
        for new, was in old.items():
            k = k.replace(new, was)
        out[k] = v.contiguous()
    return out


def test_libreyolo_loads_checkpoint_files_and_predicts(tmp_path: Path) -> None:
    """A timm backbone file (no head, with the mask token) and a transformers classifier file in the
    Hub's tensor names, each with its config.json."""
    from safetensors.torch import save_file

    ref = _timm_reference()
    sd = {k: v.contiguous() for k, v in ref.state_dict().items()}
    save_file({**sd, "mask_token": torch.zeros(1, 384)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_small_patch14_dinov2", "num_classes": 0}))
    model = LibreYOLO(str(tmp_path / "model.safetensors"))
    assert (model.FAMILY, model.size, model.nc) == ("dinov2", "s14", 1000)  # a new head for the linear probe
    ours = model.net.state_dict()
    assert all(torch.equal(ours[f"body.{k}"], v) for k, v in sd.items())
    assert model.predict(torch.rand(1, 3, 56, 56), imgsz=56)[0].probs.data.shape == (1000,)

    hf = _hf_reference(nc=3)
    d = tmp_path / "hf"
    d.mkdir()
    save_file(_hub_names(hf.state_dict()), str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"model_type": "dinov2", "architectures": ["Dinov2ForImageClassification"],
                                               "id2label": {"0": "cat", "1": "dog", "2": "owl"}}))
    model = LibreYOLO(str(d / "model.safetensors"))
    assert (model.FAMILY, model.size, model.names) == ("dinov2", "s14", {0: "cat", 1: "dog", 2: "owl"})
    x = torch.rand(1, 3, 112, 112, generator=torch.Generator().manual_seed(7))
    probs = model.predict(x, imgsz=112)[0].probs.data.float().cpu()
    with torch.no_grad():
        want = hf(pixel_values=_standardise(x)).logits.softmax(-1)[0]
    assert _rel_err(probs, want) <= 1e-4


def test_foreign_tensors_are_named() -> None:
    """Register tokens (the reg4 variants) have no place in this network; the error names the tensor."""
    from libreyolo.models.dinov2.convert import convert_state_dict, hf_to_timm

    own = families()["dinov2"].build_net(size="s14", nc=10, task="classify").state_dict()
    src = {"reg_token": torch.zeros(1, 4, 384), "cls_token": torch.zeros(1, 1, 384)}
    with pytest.raises(CheckpointError, match="reg_token") as e:
        convert_state_dict(src, own)
    assert "\n" not in str(e.value)
    with pytest.raises(CheckpointError, match="weights_in"):  # ViT-g/14's SwiGLU MLP
        hf_to_timm({"encoder.layer.0.mlp.weights_in.weight": torch.zeros(2, 2)})


def test_pos_embed_resampling_is_bicubic_by_size_without_antialiasing() -> None:
    """Ours equals timm's resample_abs_pos_embed with antialias=False (and transformers', tested through
    the logits above); timm's dynamic_img_size default (antialias=True) is another function at
    downsampled grids, so timm's dynamic mode is not the reference there."""
    layers = pytest.importorskip("timm.layers")
    pos = torch.randn(1, 1 + 37 * 37, 16, generator=torch.Generator().manual_seed(0))
    assert resample_pos_embed(pos, (37, 37), trained=(37, 37)) is pos
    for grid in [(16, 16), (8, 8), (7, 9)]:
        got = resample_pos_embed(pos, grid, trained=(37, 37))
        assert torch.equal(got, layers.resample_abs_pos_embed(pos, new_size=list(grid), antialias=False))
        assert not torch.allclose(got, layers.resample_abs_pos_embed(pos, new_size=list(grid), antialias=True))


def test_fused_attention_is_off_by_default_and_an_arch_option(tmp_path: Path) -> None:
    model = Model(families()["dinov2"](size="s14", nc=3))
    mods = fused_attention_modules(model.net)
    assert len(mods) == 12 and not any(m.fused_attn for m in mods) and model.family.arch == {}
    assert set_fused_attention(model.net) == 12
    assert all(m.fused_attn for m in mods) and model.family.arch == {"fused_attn": True}
    loaded = LibreYOLO(str(model.save(tmp_path / "on.pt")))  # the option travels with the checkpoint
    assert loaded.family.arch == {"fused_attn": True}
    x = torch.rand(2, 3, 56, 56)
    with torch.no_grad():  # same weights either way; SDPA and the equation agree to rounding
        on = loaded.net.eval()(x)
        loaded.family.set_arch()  # back to the family default
        assert loaded.family.arch == {} and not any(m.fused_attn for m in fused_attention_modules(loaded.net))
        off = loaded.net(x)
    assert _rel_err(on, off) <= 1e-5


def test_vit_keeps_its_default_and_no_layer_scale() -> None:
    """The lineage options leave ViT as it was: fused attention on, class-token head, no ls tensors."""
    net = families()["vit"].build_net(size="s16", nc=3, task="classify")
    assert all(m.fused_attn for m in fused_attention_modules(net)) and net.body.head.in_features == 384
    assert not any(".ls1." in k or ".ls2." in k for k in net.state_dict())


def test_train_then_val_on_demo_data(tiny_cls: Path, tmp_path: Path) -> None:
    """ViT-S/14 on the built-in shapes-cls crops: the head is rebuilt for six classes with the flag kept
    on, best.pt reloads, val reports top-1 / top-5, predict saves. The trainer rounds imgsz to a
    multiple of 32 and val wants a multiple of the patch (14): 32 px trains on a 2 x 2 patch grid
    (the last 4 px unused), 28 px validates on the same grid (224 px, the default, is both)."""
    torch.manual_seed(0)
    model = LibreYOLO("LibreDINOv2s14-cls.pt", pretrained=False, nc=3)
    model.family.set_arch(fused_attn=True)
    out = model.train(data=str(tiny_cls), epochs=1, imgsz=32, batch=12, workers=0, project=str(tmp_path / "runs"),
                      verbose=False, tensorboard=False, plots=False, amp=False)
    assert model.nc == 6 and model.family.arch == {"fused_attn": True}
    assert 0.0 <= out["top1"] <= out["top5"] <= 1.0 and Path(out["best"]).is_file()
    loaded = LibreYOLO(out["best"])
    assert loaded.FAMILY == "dinov2" and loaded.nc == 6 and loaded.family.arch == {"fused_attn": True}
    m = loaded.val(data=str(tiny_cls), imgsz=28, batch=4, workers=0, verbose=False)
    assert set(m) >= {"top1", "top5", "fitness"} and 0.0 <= m["top1"] <= m["top5"] <= 1.0
    assert math.isclose(loaded.val(data=str(tiny_cls), imgsz=28, batch=6, workers=0, verbose=False)["top1"],
                        m["top1"], abs_tol=1e-6)  # deterministic, independent of the batch
    from libreyolo import SAMPLE_IMAGE

    r = loaded(SAMPLE_IMAGE, imgsz=28, save=True, save_dir=tmp_path / "pred")[0]
    assert r.boxes is None and r.probs is not None and r.probs.data.shape == (6,)
    assert r.save_path is not None and r.save_path.is_file() and r.plot().shape == (*r.orig_shape, 3)


def test_trace_records_the_equation_with_fused_attention_on() -> None:
    """SPEC K-9: torch.jit.trace (TorchScript, CoreML, NCNN) keeps the primitive math."""
    torch.manual_seed(0)
    net = families()["dinov2"].build_net(size="s14", nc=3, task="classify", fused_attn=True).eval()
    x = torch.rand(1, 3, 28, 28)
    with torch.no_grad():
        traced = torch.jit.trace(net, (x,), check_trace=False)
        graph = str(traced.inlined_graph)
        assert "scaled_dot_product_attention" not in graph and "aten::softmax" in graph
        set_fused_attention(net, enabled=False)
        assert torch.equal(traced(x), net(x))


def test_linear_probe_trains_only_the_head_on_frozen_eval_features(tiny_cls: Path, tmp_path: Path) -> None:
    """``freeze="probe"``, DINOv2's linear evaluation: the backbone's tensors come out of training
    bit-identical, the head's change, and the frozen blocks ran in eval mode (stochastic depth
    off) while the head trained."""
    torch.manual_seed(0)
    model = LibreYOLO("LibreDINOv2s14-cls.pt", pretrained=False, nc=6)
    seen: list[tuple[bool, bool]] = []  # (a block's training flag, the head's) at every forward
    hook = model.net.body.blocks[0].register_forward_pre_hook(
        lambda m, _: seen.append((m.training, model.net.body.head.training)))
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    out = model.train(data=str(tiny_cls), epochs=2, imgsz=32, batch=6, workers=0, project=str(tmp_path / "runs"),
                      verbose=False, tensorboard=False, plots=False, amp=False, freeze="probe", lr0=0.01)
    hook.remove()
    after = LibreYOLO(out["last"]).net.state_dict()
    head = {k for k in before if k.startswith("body.head.")}
    assert head == {"body.head.weight", "body.head.bias"}
    assert all(torch.equal(before[k], after[k].to(before[k].dtype)) for k in before if k not in head)
    assert any(not torch.equal(before[k], after[k]) for k in head)
    trained = [s for s in seen if s[1]]  # forwards with the head in training mode
    assert trained and all(not block for block, _ in trained), seen


def test_linear_probe_is_refused_for_a_detector(tiny_cls: Path, tmp_path: Path) -> None:
    from libreyolo.errors import ConfigError

    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2)
    with pytest.raises(ConfigError, match="freeze='probe'.*for classifiers"):
        model.train(data=str(tiny_cls), epochs=1, imgsz=64, batch=2, workers=0, project=str(tmp_path / "runs"),
                    verbose=False, freeze="probe")
