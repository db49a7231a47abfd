"""Swin Transformer (issue 23): timm fidelity with fused attention off and on, the timm checkpoint
path, shifted windows in every stage at 448 px, the padding rule for other input sizes, the
fused-attention flag as an architecture option (off by default), and the user path on the built-in
demo data. Parameter counts: tests/unit/classify/test_classify_nets.py; ONNX export and ONNX
Runtime parity: tests/contract."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from _vit_refs import rel_err as _rel_err
from _vit_refs import standardise as _standardise
from torch import nn

from libreyolo import LibreYOLO
from libreyolo.convert import ForeignWeights, convert_foreign
from libreyolo.errors import CheckpointError, ConfigError
from libreyolo.kernels.attention import fused_attention_modules, set_fused_attention
from libreyolo.layers.attention import Attention, attention_equation
from libreyolo.model import Model
from libreyolo.models.swin.convert import convert_state_dict
from libreyolo.models.swin.nn import SwinSpec, SwinStage, SwinTransformer, relative_position_index
from libreyolo.registry import families


@torch.no_grad()
def _randomise(ref: nn.Module) -> nn.Module:
    """LayerNorm weights/biases, linear biases and the relative-position tables drawn at random (a
    fresh init has gamma 1 / beta 0, zero biases and a ~0 table, which would hide a swapped, dropped
    or misindexed tensor)."""
    g = torch.Generator().manual_seed(1)
    for name, p in ref.named_parameters():
        if "relative_position_bias_table" in name:
            p.copy_(torch.randn(p.shape, generator=g))
        elif name.endswith("bias"):
            p.copy_(0.1 * torch.randn(p.shape, generator=g))
        elif p.ndim == 1:  # LayerNorm weights
            p.copy_(0.75 + 0.5 * torch.rand(p.shape, generator=g))
    return ref.eval()


def _timm_reference(arch: str, *, nc: int = 1000) -> nn.Module:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    return _randomise(timm.create_model(arch, pretrained=False, num_classes=nc))


def _set_timm_fused(ref: nn.Module, on: bool) -> None:
    for m in ref.modules():
        if hasattr(m, "fused_attn"):
            m.fused_attn = on


@pytest.mark.parametrize("fused", [False, True], ids=["equation", "sdpa"])
def test_swin_tiny_logits_equal_timm(fused: bool) -> None:
    ref = _timm_reference("swin_tiny_patch4_window7_224")
    model = convert_foreign(ForeignWeights(source="timm", arch="swin_tiny_patch4_window7_224",
                                           state_dict=ref.state_dict(), path="<memory>"))
    assert (model.FAMILY, model.size, model.nc) == ("swin", "t", 1000)
    assert set_fused_attention(model.net, enabled=fused) == 12  # one attention layer per block
    _set_timm_fused(ref, fused)
    x = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = ref(_standardise(x))
        got = model.net.eval()(x)
    assert float(want.std()) > 0.1, "the reference logits are degenerate; the comparison would prove little"
    assert _rel_err(got, want) <= 1e-5


def test_swin_small_converts_through_match_and_equals_timm() -> None:
    """Swin-S (49.6 M) through the family's own match, hub prefix and pretrained tag stripped."""
    ref = _timm_reference("swin_small_patch4_window7_224", nc=7)
    model = convert_foreign(ForeignWeights(source="timm", arch="timm/swin_small_patch4_window7_224.ms_in22k_ft_in1k",
                                           state_dict=ref.state_dict(), path="<memory>"))
    assert (model.FAMILY, model.size, model.nc) == ("swin", "s", 7)
    x = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert _rel_err(model.net.eval()(x), ref(_standardise(x))) <= 1e-5


def test_448_px_shifts_every_stage_as_timm() -> None:
    """At 448 px every stage grid (112, 56, 28, 14) exceeds the window, so the last stage shifts too
    (at 224 it does not); a narrow Swin keeps the test small."""
    sw = pytest.importorskip("timm.models.swin_transformer")
    torch.manual_seed(0)
    ref = _randomise(sw.SwinTransformer(img_size=448, embed_dim=16, depths=(2, 2, 2, 2), num_heads=(1, 2, 2, 4),
                                        window_size=7, num_classes=5))
    ours = SwinTransformer(SwinSpec(dim=16, depths=(2, 2, 2, 2), heads=(1, 2, 2, 4)), nc=5).eval()
    own = {k.removeprefix("body."): v for k, v in
           convert_state_dict(ref.state_dict(), {f"body.{k}": v for k, v in ours.state_dict().items()}).items()}
    ours.load_state_dict(own)
    x = torch.randn(1, 3, 448, 448, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        assert _rel_err(ours(x), ref(x)) <= 1e-5


def test_a_padded_stage_equals_attention_over_its_real_tokens() -> None:
    """A stage grid smaller than the window (4 x 4 < 7) is padded to one window with the padded keys
    masked: a block then equals plain attention over the 16 real tokens with the bias of their own
    offsets, as if the window were 4 x 4."""
    torch.manual_seed(0)
    stage = SwinStage(8, 1, 2, 7, 4.0, merge=False, drop_paths=[0.0], fused_attn=False).eval()
    block = stage.blocks[0]
    with torch.no_grad():
        block.attn.rel_pos_bias.table.normal_()
        x = torch.randn(2, 4, 4, 8)
        got = stage(x)
        y = block.norm1(x).reshape(2, 16, 8)
        q, k, v = block.attn.qkv(y).view(2, 16, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        ys, xs = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
        pos = (ys * 7 + xs).flatten()  # the 4 x 4 tokens at the top-left of the padded 7 x 7 window
        bias = block.attn.rel_pos_bias()[:, pos][:, :, pos].unsqueeze(0)
        a = attention_equation(q, k, v, scale=block.attn.scale, bias=bias).transpose(1, 2).reshape(2, 16, 8)
        want = x.reshape(2, 16, 8) + block.attn.proj(a)
        want = want + block.mlp(block.norm2(want))
    assert torch.allclose(got.reshape(2, 16, 8), want, atol=1e-5, rtol=1e-5)


def test_relative_position_index_is_timms() -> None:
    sw = pytest.importorskip("timm.models.swin_transformer")
    assert torch.equal(relative_position_index(7), sw.get_relative_position_index(7, 7))


@pytest.mark.parametrize("hw", [(32, 32), (64, 96), (96, 224)])
def test_other_input_sizes_run(hw: tuple[int, int]) -> None:
    torch.manual_seed(0)
    net = families()["swin"].build_net(size="t", nc=4, task="classify").eval()
    with torch.no_grad():
        out = net(torch.rand(1, 3, *hw))
    assert out.shape == (1, 4) and torch.isfinite(out).all()


def test_a_side_not_a_multiple_of_32_is_a_one_line_error() -> None:
    net = families()["swin"].build_net(size="t", nc=4, task="classify").eval()
    with pytest.raises(ConfigError, match=r"multiples of 32, got 100x224; use e.g. 96x224") as e:
        net(torch.rand(1, 3, 100, 224))
    assert "\n" not in str(e.value)


def test_foreign_keys_are_named() -> None:
    own = families()["swin"].build_net(size="t", nc=1000, task="classify").state_dict()
    with pytest.raises(CheckpointError, match=r"logit_scale") as e:  # a Swin V2 tensor
        convert_state_dict({"layers.0.blocks.0.attn.logit_scale": torch.zeros(3, 1, 1)}, own)
    assert "\n" not in str(e.value)
    with pytest.raises(CheckpointError, match=r"nothing for"):  # an incomplete file names what is missing
        convert_state_dict({"head.fc.weight": torch.zeros(1000, 768)}, own)


def test_libreyolo_loads_a_timm_checkpoint_file_and_predicts(tmp_path: Path) -> None:
    """model.safetensors + config.json as the Hub stores them; the buffers older timm files carry
    (relative_position_index, attn_mask) are dropped and recomputed."""
    from safetensors.torch import save_file

    ref = _timm_reference("swin_tiny_patch4_window7_224", nc=3)
    sd = {k: v.contiguous() for k, v in ref.state_dict().items()}
    sd["layers.0.blocks.1.attn.relative_position_index"] = relative_position_index(7)
    sd["layers.0.blocks.1.attn_mask"] = torch.zeros(64, 49, 49)
    save_file(sd, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "swin_tiny_patch4_window7_224.ms_in1k",
                                                      "num_classes": 3, "label_names": ["cat", "dog", "owl"]}))
    model = LibreYOLO(str(tmp_path / "model.safetensors"))
    assert (model.FAMILY, model.size, model.names) == ("swin", "t", {0: "cat", 1: "dog", 2: "owl"})
    # whole multiples of 1/255: the predictor's uint8 image of the tensor is exact
    x = torch.randint(0, 256, (1, 3, 224, 224), generator=torch.Generator().manual_seed(7)) / 255.0
    probs = model.predict(x, imgsz=224)[0].probs.data.float().cpu()
    with torch.no_grad():
        want = ref(_standardise(x)).softmax(-1)[0]
    assert _rel_err(probs, want) <= 1e-4


def test_fused_attention_is_off_by_default_and_an_arch_option(tmp_path: Path) -> None:
    model = Model(families()["swin"](size="t", nc=3))
    mods = fused_attention_modules(model.net)
    assert len(mods) == 12 and all(isinstance(m, Attention) and not m.fused_attn for m in mods)
    assert model.family.arch == {}
    assert set_fused_attention(model.net, enabled=True) == 12
    assert all(m.fused_attn for m in mods) and model.family.arch == {"fused_attn": True}
    path = model.save(tmp_path / "on.pt")  # the option travels with the checkpoint
    loaded = LibreYOLO(str(path))
    assert loaded.family.arch == {"fused_attn": True}
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():  # same weights either way; SDPA and the equation agree to rounding
        on = loaded.net.eval()(x)
        loaded.family.set_arch()  # back to the default
        assert loaded.family.arch == {} and not any(m.fused_attn for m in fused_attention_modules(loaded.net))
        off = loaded.net(x)
    assert _rel_err(on, off) <= 1e-5


def test_trace_records_the_equation_even_with_fused_attention_on() -> None:
    """SPEC K-9: torch.jit.trace (TorchScript, CoreML, NCNN) keeps the primitive math."""
    torch.manual_seed(0)
    net = families()["swin"].build_net(size="t", nc=3, task="classify", fused_attn=True).eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        traced = torch.jit.trace(net, (x,), check_trace=False)
        graph = str(traced.inlined_graph)
        assert "scaled_dot_product_attention" not in graph and "aten::softmax" in graph
        set_fused_attention(net, enabled=False)
        assert torch.equal(traced(x), net(x))


def test_train_then_val_on_demo_data(tiny_cls: Path, tmp_path: Path) -> None:
    """Swin-T on the built-in shapes-cls crops at 32 px (stage grids 8, 4, 2, 1, padded to 7 x 7
    windows): the head is rebuilt for six classes with fused attention kept on, best.pt reloads,
    val reports top-1 / top-5, predict fills Results.probs, plots and saves."""
    torch.manual_seed(0)
    model = LibreYOLO("LibreSwint-cls.pt", pretrained=False, nc=3)
    assert model.family.TRAIN_DEFAULTS["optimizer"] == "AdamW"
    model.family.set_arch(fused_attn=True)
    out = model.train(data=str(tiny_cls), epochs=1, imgsz=32, batch=12, workers=0, project=str(tmp_path / "runs"),
                      verbose=False, tensorboard=False, plots=False, amp=False)
    assert model.nc == 6 and model.family.arch == {"fused_attn": True}
    assert 0.0 <= out["top1"] <= out["top5"] <= 1.0 and Path(out["best"]).is_file()
    loaded = LibreYOLO(out["best"])
    assert loaded.FAMILY == "swin" and loaded.nc == 6 and loaded.family.arch == {"fused_attn": True}
    m = loaded.val(data=str(tiny_cls), imgsz=32, batch=4, workers=0, verbose=False)
    assert set(m) >= {"top1", "top5", "fitness"} and math.isclose(m["top1"], out["top1"], abs_tol=1e-6)
    from libreyolo import SAMPLE_IMAGE

    r = loaded(SAMPLE_IMAGE, imgsz=32, save=True, save_dir=tmp_path / "pred")[0]
    assert r.boxes is None and r.probs is not None and r.probs.data.shape == (6,)
    assert r.save_path is not None and r.save_path.is_file() and r.plot().shape == (*r.orig_shape, 3)
