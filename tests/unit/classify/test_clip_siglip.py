"""CLIP and SigLIP 2 image towers: fidelity to transformers, the zero-shot head, save/load.

The references are built from configs constructed here (random init, no Hub download): a reduced
config for the numeric check at a small image size, the base config only for parameter counts.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from libreyolo.errors import ConfigError
from libreyolo.models._vit.towers import ImageTower, TowerClassifier, TowerSpec
from libreyolo.registry import families

SMALL = {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
         "image_size": 32, "patch_size": 16}


def _ref_clip(base: bool):
    tf = pytest.importorskip("transformers")
    kw = {"patch_size": 16} if base else {**SMALL, "projection_dim": 32}
    return tf.CLIPVisionModelWithProjection(tf.CLIPVisionConfig(**kw)).eval()


def _ref_siglip(base: bool):
    tf = pytest.importorskip("transformers")
    return tf.SiglipVisionModel(tf.SiglipVisionConfig(**({} if base else SMALL))).eval()


def _small(name: str) -> TowerClassifier:
    base = families()[name].SPECS["b16"]
    kw = dict(dim=64, depth=2, heads=4, img_size=32, embed_dim=32 if base.pool == "cls" else 64)
    return TowerClassifier(ImageTower(TowerSpec(**{**base.__dict__, **kw}), nc=3))


def _convert(name: str, ref: torch.nn.Module, ours: TowerClassifier) -> None:
    from libreyolo.models._vit.tower_convert import convert_state_dict

    sd = convert_state_dict(ref.state_dict(), ours.state_dict(), arch=name)
    ours.load_state_dict(sd, strict=True)


@pytest.mark.parametrize("name", ["clip", "siglip2"])
def test_small_tower_embeddings_equal_transformers(name: str) -> None:
    torch.manual_seed(0)
    ref = _ref_clip(False) if name == "clip" else _ref_siglip(False)
    for p in ref.parameters():  # move the LayerNorms and biases off their 1/0 init so the check bites
        p.data.add_(0.02 * torch.randn_like(p))
    ours = _small(name).eval()
    _convert(name, ref, ours)
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        out = ref(pixel_values=(x - ours.mean) / ours.std)  # transformers takes standardised pixels
        want = out.image_embeds if name == "clip" else out.pooler_output
        got = ours.embed(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # both attention paths (explicit equation and SDPA) agree with the reference
    from libreyolo.kernels.attention import set_fused_attention

    assert set_fused_attention(ours, enabled=True) == (2 if name == "clip" else 3)
    with torch.no_grad():
        torch.testing.assert_close(ours.embed(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["clip", "siglip2"])
def test_base_tower_parameter_count_equals_transformers(name: str) -> None:
    ref = _ref_clip(True) if name == "clip" else _ref_siglip(True)
    fam = families()[name](size="b16", nc=2)
    ours = sum(p.numel() for p in fam.net.body.encoder.parameters())
    assert ours == sum(p.numel() for p in ref.parameters())
    assert fam.embed_dim == (512 if name == "clip" else 768)
    # the family converter recognises the base checkpoint and every tensor lands (strict load)
    import importlib
    from types import SimpleNamespace

    conv = importlib.import_module(f"libreyolo.models.{name}.convert")
    sd = ref.state_dict()
    fw = SimpleNamespace(source="transformers", arch=ref.config.model_type, state_dict=sd)
    assert conv.match(fw) == ("b16", conv.NO_CLASSES_NC)
    assert conv.match(SimpleNamespace(source="transformers", arch="dinov2", state_dict=sd)) is None
    fam.net.load_state_dict(conv.convert_state_dict(sd, fam.net.state_dict(), arch=fw.arch), strict=True)
    key = "vision_model.post_layernorm.weight" if name == "clip" else "post_layernorm.weight"
    assert torch.equal(fam.net.body.encoder.norm.weight, sd[key])


def test_siglip_logit_scale_and_bias_convert() -> None:
    from libreyolo.models._vit.tower_convert import convert_state_dict

    ours = _small("siglip2")
    src = {f"vision_model.{k}": v for k, v in _ref_siglip(False).state_dict().items()}
    src["logit_scale"], src["logit_bias"] = torch.tensor([2.0]), torch.tensor([-3.0])
    src["text_model.embeddings.token_embedding.weight"] = torch.zeros(4, 64)  # a full SiglipModel: dropped
    sd = convert_state_dict(src, ours.state_dict(), arch="siglip")
    assert float(sd["body.head.scale"]) == pytest.approx(torch.e ** 2) and float(sd["body.head.bias"]) == -3.0
    from libreyolo.errors import CheckpointError

    with pytest.raises(CheckpointError, match="vision_model.registers"):
        convert_state_dict({**src, "vision_model.registers": torch.zeros(1)}, ours.state_dict())


@pytest.mark.parametrize("name", ["siglip2"])  # the code is shared; SigLIP's head has a non-zero bias
def test_zero_shot_head_survives_save_and_load(name: str, tmp_path) -> None:
    from libreyolo import LibreYOLO
    from libreyolo.model import Model

    torch.manual_seed(0)
    model = Model(families()[name](size="t16", nc=2))
    d = model.embed_dim
    emb = torch.randn(4, d)
    model.set_class_embeddings(emb, ["cat", "dog", "car", "tree"], scale=50.0)
    x = torch.rand(1, 3, 32, 32)
    img = model.embed(x)
    want = 50.0 * F.normalize(img, dim=-1) @ F.normalize(emb, dim=-1).t() + model.net.body.head.bias
    with torch.no_grad():
        logits = model.net(x)
    torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-5)
    path = model.save(tmp_path / f"Libre{model.NAME_TOKEN}t16-cls.pt")
    back = LibreYOLO(path)
    assert back.nc == 4 and back.names[3] == "tree"
    with torch.no_grad():
        assert torch.equal(back.net(x), logits)


def test_class_embeddings_of_the_wrong_width_are_refused() -> None:
    fam = families()["clip"](size="t16", nc=2)
    with pytest.raises(ConfigError, match=r"Tensor\[nc, 512\]"):
        fam.set_class_embeddings(torch.randn(3, 768))


def test_freezing_the_encoder_leaves_only_the_head_trainable() -> None:
    from libreyolo.training.optim import freeze_modules

    net = families()["siglip2"](size="t16", nc=5).net
    frozen, total = freeze_modules(net, "body.encoder")
    assert [n for n, p in net.named_parameters() if p.requires_grad] == ["body.head.weight"]
    assert total - frozen == 5 * 192


def test_class_text_embeddings_are_the_reference_text_embeds() -> None:
    tf = pytest.importorskip("transformers")
    from libreyolo.models._vit.text_embeddings import class_text_embeddings

    torch.manual_seed(0)
    small = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    cfg = tf.CLIPConfig(text_config={**small, "vocab_size": 50, "max_position_embeddings": 16, "eos_token_id": 2,
                                     "bos_token_id": 1},
                        vision_config={**small, "image_size": 32, "patch_size": 16}, projection_dim=16)
    ref = tf.CLIPModel(cfg).eval()
    ids = torch.tensor([[1, 5, 7, 2], [1, 9, 2, 0]])

    def tok(texts, **kw):  # stands in for the tokenizer of a checkpoint folder
        assert texts == ["a photo of a cat.", "a photo of a dog."] and kw["padding"] is True
        return {"input_ids": ids, "attention_mask": (ids > 0).long()}

    emb, scale, bias = class_text_embeddings(ref, tok, ["cat", "dog"])
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=(ids > 0).long(), pixel_values=torch.rand(1, 3, 32, 32)).text_embeds
    torch.testing.assert_close(F.normalize(emb, dim=-1), want)
    assert scale == pytest.approx(float(ref.logit_scale.detach().exp())) and bias == 0.0
    fam = families()["clip"](size="t16", nc=2)
    with pytest.raises(ConfigError, match="Tensor\\[nc, 512\\]"):  # a 16-wide toy text tower does not fit b16
        fam.set_class_embeddings(emb, ["cat", "dog"])
