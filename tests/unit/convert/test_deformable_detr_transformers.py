"""Deformable DETR against Hugging Face ``transformers`` (``DeformableDetrForObjectDetection``):
both built offline from the same configuration (random init, fixed seed, every weight and frozen
BatchNorm statistic perturbed so a swapped tensor cannot hide), ours converted from theirs, both
run in eval mode in fp32 on the CPU; logits and boxes agree within 1e-5 relative. The reference
takes ImageNet-normalised pixels, ours [0, 1] RGB (the normalisation is inside our backbone)."""

from __future__ import annotations

import pytest
import torch
from _convert_helpers import assert_rel_close

transformers = pytest.importorskip("transformers")

from libreyolo import LibreYOLO  # noqa: E402
from libreyolo.convert import ForeignWeights, convert_foreign  # noqa: E402
from libreyolo.errors import CheckpointError  # noqa: E402
from libreyolo.layers.classify import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from libreyolo.models.deformable_detr.convert import convert_state_dict  # noqa: E402
from libreyolo.models.deformable_detr.nn import DeformableDETRConfig, DeformableDETRNet  # noqa: E402


@pytest.fixture(autouse=True)
def _portable_attention(monkeypatch: pytest.MonkeyPatch):
    from libreyolo.kernels import registry

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    registry.clear_cache()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
    registry.clear_cache()


TINY = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=20)


def _reference(*, nc: int = 5, backbone: str = "resnet18", **kw):
    from transformers import DeformableDetrConfig, DeformableDetrForObjectDetection

    torch.manual_seed(0)
    cfg = DeformableDetrConfig(num_labels=nc, use_pretrained_backbone=False, backbone=backbone, **kw)
    ref = DeformableDetrForObjectDetection(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, buf in ref.named_buffers():  # frozen BatchNorm: weight, bias, running statistics
            if name.endswith("running_var"):
                buf.copy_(torch.rand(buf.shape, generator=g) * 0.5 + 0.75)
            elif name.endswith("running_mean"):
                buf.copy_(torch.randn(buf.shape, generator=g) * 0.1)
            elif name.endswith(".weight"):
                buf.copy_(torch.rand(buf.shape, generator=g) * 0.25 + 0.5)
            elif name.endswith(".bias"):
                buf.copy_(torch.randn(buf.shape, generator=g) * 0.1)
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    return ref


def _outputs(ref, x):
    """(logits, boxes xyxy pixels) of the reference for our [0, 1] input x."""
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    h, w = x.shape[-2:]
    with torch.no_grad():
        out = ref(pixel_values=(x - mean) / std)
    cx, cy, bw, bh = out.pred_boxes.unbind(-1)
    return out.logits, torch.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h], -1)


def _compare(ours, ref, x) -> None:
    with torch.no_grad():
        lo, bo = ours(x)
    lr, br = _outputs(ref, x)
    assert_rel_close(lo, lr, what="logits")
    assert_rel_close(bo, br, what="boxes")
    assert lr.std() > 1e-3 and br.std() > 1e-3  # non-trivial outputs (a constant would compare equal)


def _tiny_ours(*, refine: bool = False, two_stage: bool = False, queries: int = 20) -> DeformableDETRNet:
    return DeformableDETRNet(cfg=DeformableDETRConfig(depth=18, hidden=64, enc_layers=2, dec_layers=2, ffn=128,
                                                      num_queries=queries, box_refine=refine, two_stage=two_stage), nc=5)


@pytest.mark.parametrize("refine", [False, True], ids=["plain", "box_refine"])
def test_tiny_config_converted_weights_give_the_same_outputs(refine: bool) -> None:
    ref = _reference(**TINY, with_box_refine=refine)
    ours = _tiny_ours(refine=refine).eval()
    ours.load_state_dict(convert_state_dict(ref.state_dict(), ours.state_dict()), strict=True)
    x = torch.rand(2, 3, 96, 160)  # levels 12x20, 6x10, 3x5, 2x3 (the stride-64 level is padded)
    _compare(ours, ref, x)


def test_r50_checkpoint_converts_through_the_dispatcher_and_from_a_hub_folder(tmp_path) -> None:
    ref = _reference(nc=91, backbone="resnet50")
    model = convert_foreign(ForeignWeights(source="transformers", arch="deformable_detr", state_dict=ref.state_dict(),
                                           path="mem"))
    assert (model.FAMILY, model.size, model.nc) == ("deformable_detr", "r50", 91)
    x = torch.rand(1, 3, 64, 96)
    _compare(model.net.eval(), ref, x)
    folder = tmp_path / "deformable-detr"
    ref.save_pretrained(str(folder))  # the Hub layout: config.json + model.safetensors
    loaded = LibreYOLO(str(folder))
    assert loaded.family.FAMILY == "deformable_detr" and loaded.nc == 91
    _compare(loaded.net.eval(), ref, x)


def test_two_stage_converted_weights_give_the_same_outputs() -> None:
    """Every token is a proposal query (k = S), so both sides select the same set; their top-k may
    order near-ties differently, so each of our queries is paired with the reference's nearest."""
    x = torch.rand(1, 3, 96, 160)
    tokens = 12 * 20 + 6 * 10 + 3 * 5 + 2 * 3
    ref = _reference(**{**TINY, "num_queries": tokens}, two_stage=True, with_box_refine=True,
                     two_stage_num_proposals=tokens)
    ours = _tiny_ours(two_stage=True, queries=tokens).eval()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    ours.load_state_dict(convert_state_dict(ref.state_dict(), ours.state_dict()), strict=True)
    with torch.no_grad():
        lo, bo = ours(x)
    lr, br = _outputs(ref, x)
    fo, fr = torch.cat([lo, bo / 160], -1)[0], torch.cat([lr, br / 160], -1)[0]
    j = torch.cdist(fo, fr).argmin(1)
    assert len(set(j.tolist())) == tokens  # one to one
    assert_rel_close(lo[0], lr[0, j], what="logits")
    assert_rel_close(bo[0], br[0, j], what="boxes")
    assert lr.std() > 1e-3 and br.std() > 1e-3


def test_mismatched_variants_are_refused() -> None:
    two_stage = _reference(**TINY, two_stage=True, with_box_refine=True).state_dict()
    with pytest.raises(CheckpointError, match="two-stage Deformable DETR checkpoint"):
        convert_state_dict(two_stage, _tiny_ours(refine=True).state_dict())
    refine = _reference(**TINY, with_box_refine=True).state_dict()
    with pytest.raises(CheckpointError, match="box-refinement Deformable DETR checkpoint"):
        convert_state_dict(refine, _tiny_ours().state_dict())
    plain = _reference(**TINY).state_dict()
    with pytest.raises(CheckpointError, match="plain Deformable DETR checkpoint"):
        convert_state_dict(plain, _tiny_ours(refine=True).state_dict())
    untied = dict(plain)
    untied["class_embed.1.bias"] = untied["class_embed.1.bias"] + 1.0
    with pytest.raises(CheckpointError, match="differs from"):
        convert_state_dict(untied, _tiny_ours().state_dict())


def test_other_architectures_do_not_match() -> None:
    from libreyolo.models.deformable_detr.convert import match

    assert match(ForeignWeights(source="transformers", arch="rt_detr", state_dict={}, path="x")) is None
    # the size follows the checkpoint: the box-refinement keys make it r50refine (names only, no tensors needed)
    names = [f"model.backbone.model.layer3.{i}.conv3.weight" for i in range(6)]
    names += [f"model.{part}.layers.{i}.x" for part in ("encoder", "decoder") for i in range(6)]
    sd = {k: torch.zeros(1) for k in names} | {"class_embed.0.weight": torch.zeros(7, 256)}
    assert match(ForeignWeights(source="transformers", arch="deformable_detr", state_dict=sd, path="x")) == ("r50", 7)
    sd["model.decoder.bbox_embed.0.layers.0.weight"] = torch.zeros(1)
    assert match(ForeignWeights(source="transformers", arch="deformable_detr", state_dict=sd, path="x")) == (
        "r50refine", 7)
    sd["model.enc_output.weight"] = torch.zeros(1)
    assert match(ForeignWeights(source="transformers", arch="deformable_detr", state_dict=sd, path="x")) == (
        "r50twostage", 7)
    with pytest.raises(CheckpointError, match="matches none"):
        match(ForeignWeights(source="transformers", arch="deformable_detr", state_dict=_reference(**TINY).state_dict(),
                             path="x"))


def test_transformers_4_key_names_convert_to_the_same_tensors() -> None:
    """transformers 4.x named the backbone ``backbone.conv_encoder.model``, the layers' FFN ``fc1``/``fc2``
    and the decoder's self-attention output ``out_proj``; those files convert to the same state dict."""
    import re

    sd5 = _reference(**TINY).state_dict()
    sd4 = {}
    for k, v in sd5.items():
        k4 = k.replace("model.backbone.model.", "model.backbone.conv_encoder.model.")
        k4 = re.sub(r"(layers\.\d+)\.mlp\.(fc[12])\.", r"\1.\2.", k4)
        k4 = k4.replace(".self_attn.o_proj.", ".self_attn.out_proj.")
        sd4[k4] = v
    assert sd4.keys() != sd5.keys()
    own = _tiny_ours().state_dict()
    a, b = convert_state_dict(sd5, own), convert_state_dict(sd4, own)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
