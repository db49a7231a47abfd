"""DINOv2 with registers (``dinov2_reg``): parameter counts, fidelity to timm's
``vit_*_patch14_reg4_dinov2`` and transformers' ``Dinov2WithRegisters*``, checkpoint files, and
the demo-data path."""

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
from libreyolo.registry import families

TIMM_ARCH = {"s14": "vit_small_patch14_reg4_dinov2", "b14": "vit_base_patch14_reg4_dinov2",
             "l14": "vit_large_patch14_reg4_dinov2"}
PUBLISHED = {"s14": 22.1, "b14": 86.6, "l14": 304.4}  # timm model cards, millions


def _timm_reference(nc: int = 0) -> nn.Module:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    ref = timm.create_model("vit_small_patch14_reg4_dinov2", pretrained=False, num_classes=nc).eval()
    return _randomise(ref)


def _hf_reference(nc: int = 7) -> nn.Module:
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tf.Dinov2WithRegistersConfig(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, patch_size=14,
                                       image_size=518, layerscale_value=1e-5, num_register_tokens=4,
                                       num_labels=nc, attn_implementation="eager")
    ref = tf.Dinov2WithRegistersForImageClassification(cfg).eval()
    return _randomise(ref)


@pytest.mark.parametrize("size", ["s14", "b14", "l14"])
def test_parameter_count_equals_timm_and_published(size: str) -> None:
    """Backbone = timm's tensors + one position row: timm builds these models without a class-token
    position (``no_embed_class``), ours keeps the official checkpoint's row (D values)."""
    timm = pytest.importorskip("timm")
    with torch.device("meta"):
        net = families()["dinov2_reg"].build_net(size=size, nc=1000, task="classify")
        ref = timm.create_model(TIMM_ARCH[size], pretrained=False, num_classes=0)
    dim = net.body.spec.dim
    head = sum(p.numel() for p in net.body.head.parameters())
    backbone = sum(p.numel() for p in net.parameters()) - head
    assert net.body.reg_token.shape == (1, 4, dim) and head == (2 * dim + 1) * 1000
    assert backbone == sum(p.numel() for p in ref.parameters()) + dim
    assert abs(backbone / 1e6 / PUBLISHED[size] - 1) < 0.03, f"{size}: {backbone / 1e6:.3f} M"


@torch.no_grad()
def test_timm_tokens_and_head_equal_ours() -> None:
    """timm's ViT-S/14-reg4 at 518 px: its final-norm tokens (class, 4 registers, patches) equal
    ours, and its class-token head converts to the same logits."""
    ref = _timm_reference(nc=5)
    model = convert_foreign(ForeignWeights(source="timm", arch="timm/vit_small_patch14_reg4_dinov2.lvd142m",
                                           state_dict=dict(ref.state_dict()), path="<memory>"))
    assert (model.FAMILY, model.size, model.nc) == ("dinov2_reg", "s14", 5)
    assert torch.equal(model.net.body.pos_embed[:, 0], torch.zeros(1, 384))
    x = torch.rand(1, 3, 518, 518, generator=torch.Generator().manual_seed(5))
    feats = ref.forward_features(_standardise(x))
    body = model.net.eval().body
    tokens = body.tokens(_standardise(x))
    assert tokens.shape == feats.shape == (1, 1 + 4 + 37 * 37, 384) and float(feats[:, 1:5].std()) > 0.1
    assert _rel_err(tokens, feats) <= 1e-5
    want = ref.forward_head(feats)
    assert float(want.std()) > 0.1 and _rel_err(body.head(body.features(_standardise(x))), want) <= 1e-5


@pytest.mark.parametrize("hw", [(112, 112), (98, 126)], ids=["112", "98x126"])
@torch.no_grad()
def test_transformers_logits_equal_ours(hw: tuple[int, int]) -> None:
    """transformers' Dinov2WithRegistersForImageClassification (class token + mean of the patch
    tokens, registers excluded) equals ours with the position embedding resampled (antialiased) to 8 x 8 and 7 x 9 patches."""
    ref = _hf_reference()
    model = convert_foreign(ForeignWeights(source="transformers", arch="dinov2_with_registers",
                                           state_dict=ref.state_dict(), path="<memory>"))
    assert (model.FAMILY, model.size, model.nc) == ("dinov2_reg", "s14", 7)
    x = torch.rand(2, 3, *hw, generator=torch.Generator().manual_seed(6))
    want = ref(pixel_values=_standardise(x)).logits
    assert float(want.std()) > 0.1
    assert _rel_err(model.net.eval()(x), want) <= 1e-5


def test_the_registers_change_the_logits_and_plain_dinov2_refuses_them() -> None:
    """The registers take part (zeroing them moves the logits), and a register checkpoint is not a
    plain DINOv2's: asked for that family by name it fails naming the register tensor."""
    ref = _timm_reference(nc=3)
    sd = dict(ref.state_dict())
    model = convert_foreign(ForeignWeights(source="timm", arch="vit_small_patch14_reg4_dinov2", state_dict=sd,
                                           path="<memory>"))
    x = torch.rand(1, 3, 56, 56, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        a = model.net.eval()(x)
        model.net.body.reg_token.zero_()
        b = model.net(x)
    assert _rel_err(a, b) > 1e-3
    with pytest.raises(CheckpointError, match="matches no family 'dinov2'"):
        convert_foreign(ForeignWeights(source="timm", arch="vit_small_patch14_reg4_dinov2", state_dict=sd,
                                       path="<memory>"), family="dinov2")


def test_libreyolo_loads_timm_official_and_transformers_files(tmp_path: Path) -> None:
    """A timm backbone file (with its config.json), the official checkpoint layout
    (``register_tokens``, a class-token position row, ``mask_token``) and a transformers classifier."""
    from safetensors.torch import save_file

    ref = _timm_reference()
    sd = {k: v.contiguous() for k, v in ref.state_dict().items()}
    save_file(sd, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_small_patch14_reg4_dinov2",
                                                      "num_classes": 0}))
    model = LibreYOLO(str(tmp_path / "model.safetensors"))
    assert (model.FAMILY, model.size, model.nc) == ("dinov2_reg", "s14", 1000)
    x = torch.rand(1, 3, 70, 70, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        ours = model.net.eval().body.tokens(_standardise(x))
    official = {"register_tokens": sd["reg_token"], "mask_token": torch.zeros(1, 384),
                "cls_token": torch.zeros_like(sd["cls_token"]),
                "pos_embed": torch.cat([sd["cls_token"], sd["pos_embed"]], dim=1),  # the class token's row
                **{k: v for k, v in sd.items() if k not in ("reg_token", "cls_token", "pos_embed")}}
    same = convert_foreign(ForeignWeights(source="timm", arch="vit_small_patch14_reg4_dinov2", state_dict=official,
                                          path="<memory>"))
    with torch.no_grad():
        assert torch.equal(same.net.eval().body.tokens(_standardise(x)), ours)
    assert model.predict(torch.rand(1, 3, 56, 56), imgsz=56)[0].probs.data.shape == (1000,)

    hf = _hf_reference(nc=3)
    d = tmp_path / "hf"
    d.mkdir()
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"model_type": "dinov2_with_registers",
                                               "architectures": ["Dinov2WithRegistersForImageClassification"],
                                               "id2label": {"0": "cat", "1": "dog", "2": "owl"}}))
    model = LibreYOLO(str(d / "model.safetensors"))
    assert (model.FAMILY, model.size, model.names) == ("dinov2_reg", "s14", {0: "cat", 1: "dog", 2: "owl"})
    x = torch.rand(1, 3, 112, 112, generator=torch.Generator().manual_seed(7))
    probs = model.predict(x, imgsz=112)[0].probs.data.float().cpu()
    with torch.no_grad():
        want = hf(pixel_values=_standardise(x)).logits.softmax(-1)[0]
    assert _rel_err(probs, want) <= 1e-4


def test_train_then_val_on_demo_data(tiny_cls: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LibreYOLO("LibreDINOv2regs14-cls.pt", pretrained=False, nc=3)
    out = model.train(data=str(tiny_cls), epochs=1, imgsz=32, batch=12, workers=0, project=str(tmp_path / "runs"),
                      verbose=False, tensorboard=False, plots=False, amp=False)
    assert model.nc == 6 and model.net.body.reg_token.shape == (1, 4, 384)
    assert 0.0 <= out["top1"] <= out["top5"] <= 1.0 and Path(out["best"]).is_file()
    loaded = LibreYOLO(out["best"])
    assert loaded.FAMILY == "dinov2_reg" and loaded.nc == 6
    m = loaded.val(data=str(tiny_cls), imgsz=28, batch=4, workers=0, verbose=False)
    assert math.isclose(loaded.val(data=str(tiny_cls), imgsz=28, batch=6, workers=0, verbose=False)["top1"],
                        m["top1"], abs_tol=1e-6)


@pytest.mark.parametrize(("trained", "grid"), [((37, 37), (16, 16)), ((37, 37), (7, 9)), ((14, 14), (37, 20))])
def test_antialiased_resampling_equals_torchs_and_exports_as_matmuls(trained, grid) -> None:
    """The antialiased position-embedding resize (two constant matrices) equals
    ``F.interpolate(bicubic, antialias=True)``, shrinking and growing; a trace records no resize op."""
    import torch.nn.functional as F

    from libreyolo.models._vit.net import resample_pos_embed

    th, tw = trained
    pos = torch.randn(1, 1 + th * tw, 16, generator=torch.Generator().manual_seed(3))
    ours = resample_pos_embed(pos, grid, trained=trained, antialias=True)
    body = pos[:, 1:].reshape(1, th, tw, 16).permute(0, 3, 1, 2)
    want = F.interpolate(body, size=grid, mode="bicubic", align_corners=False, antialias=True)
    assert torch.equal(ours[:, :1], pos[:, :1])
    assert _rel_err(ours[:, 1:], want.permute(0, 2, 3, 1).reshape(1, -1, 16)) <= 1e-5
    traced = torch.jit.trace(lambda p: resample_pos_embed(p, grid, trained=trained, antialias=True), (pos,))
    kinds = {n.kind() for n in traced.graph.nodes()}
    assert "aten::matmul" in kinds and not any("upsample" in k for k in kinds), kinds
