"""CLIP's own tokenizer and text tower against transformers (the measuring instrument), and the
``set_classes`` path of the ``clip`` family.

Nothing is downloaded: the vocabulary and merges are trained here with ``tokenizers`` (CLIP's
normalisation and pre-tokenisation, specials at the end of the vocabulary as in CLIP's), the
reference towers are transformers models built from reduced random configs.
"""

from __future__ import annotations

import json
import shutil
import unicodedata

import pytest
import torch
import torch.nn.functional as F

from libreyolo.errors import CheckpointError, ConfigError
from libreyolo.models.clip.tokenizer import (
    BOS,
    EOS,
    CLIPTokenizer,
    bytes_to_unicode,
    normalise,
    pre_tokenize,
)

CLIP_SPLIT = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
CORPUS = ["a photo of a cat.", "a photo of a dog!", "a photo of the car", "the quick brown fox jumps over the lazy dog",
          "café naïve résumé façade", "it's 2024 and we're here, they've gone", "numbers 123 4567 89.5%",
          "Größe straße Ελληνικά кириллица", "日本語 한국어 中文", "hello!!! what's up??", "$5.99 #tag @user"] * 30
TEXTS = ["A photo of a Cat's café 12 !!", "  hello\t\nWORLD  ", "it's we're they've I'm you'll he'd 'stuff",
         "naïve résumé Ångström ΟΔΟΣ ΣΑΣ", "İstanbul ß ǅ Ⅻ ½ ٣ 二 ①", "emoji 😀👍🏽 ok", "Cafe\u0301 e\u0301 combining",
         "a<|endoftext|>b <|ENDOFTEXT|> <|startoftext|>x", "x\x1cy\u200bz\u00a0w\u3000v\u2028u", "",
         "''s ...' --- $5.99 #tag @user 3.14159", "日本語のテキスト 한국어", "the " * 100, "don't STOP-me-now"]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    """vocab.json + merges.txt of a byte-level BPE trained on CORPUS, the CLIP way."""
    tk = pytest.importorskip("tokenizers")
    from tokenizers import Regex, normalizers, pre_tokenizers

    tok = tk.Tokenizer(tk.models.BPE(unk_token=EOS, end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CLIP_SPLIT), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    trainer = tk.trainers.BpeTrainer(vocab_size=600, special_tokens=[BOS, EOS], end_of_word_suffix="</w>",
                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    folder = tmp_path_factory.mktemp("cliptok")
    tok.model.save(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text())
    order = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t not in (BOS, EOS)] + [BOS, EOS]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(order)}))  # CLIP: specials last
    assert len((folder / "merges.txt").read_text().splitlines()) > 100  # the merges are not trivial
    return folder


@pytest.fixture(scope="module")
def ref_tok(tok_dir):
    tf = pytest.importorskip("transformers")
    return tf.CLIPTokenizer.from_pretrained(str(tok_dir))


def test_tokenizer_ids_equal_transformers(tok_dir, ref_tok) -> None:
    ours = CLIPTokenizer.from_folder(tok_dir)
    assert ours.eos_id == len(ours.vocab) - 1 == ref_tok.eos_token_id and ours.bos_id == ref_tok.bos_token_id
    for text in TEXTS:
        assert ours.encode(text) == ref_tok(text, truncation=True, max_length=77)["input_ids"], text
    assert len(ours.encode(TEXTS[-2])) == 77  # the long text was truncated, its end token kept
    want = ref_tok(TEXTS, padding="max_length", truncation=True, max_length=77, return_tensors="pt")["input_ids"]
    assert torch.equal(ours(TEXTS), want)
    unk = ours.encode("ü")  # bytes C3 BC: "Ã" is a symbol, "¼</w>" is not in the vocabulary (unknown)
    assert unk == ref_tok("ü")["input_ids"] and unk[2] == ours.unk_id and "¼</w>" not in ours.vocab


def _sample_code_points() -> list[int]:
    # blocks whose characters predate Unicode 13 (the tables of the tokenizers library may be older
    # than Python's unicodedata; characters assigned later can normalise or classify differently)
    blocks = [(0x0, 0x85F), (0x900, 0xDFF), (0x1680, 0x169F), (0x1E00, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x4EFF),
              (0xAC00, 0xACFF), (0xFF00, 0xFFEF), (0x1D400, 0x1D4FF), (0x1F300, 0x1F64F)]
    return [c for lo, hi in blocks for c in range(lo, hi + 1) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]


def test_normalisation_and_pre_tokenisation_equal_transformers_on_unicode(ref_tok) -> None:
    """The letter / number / whitespace classes without `regex`: every sampled character, in runs."""
    bt = ref_tok.backend_tokenizer
    b2u = bytes_to_unicode()
    cps = _sample_code_points()
    assert len(cps) > 7000
    for i in range(0, len(cps), 7):
        text = "".join(map(chr, cps[i:i + 7])) + " ab1 '" + chr(cps[i]) + "'s"
        norm = normalise(text)
        assert norm == bt.normalizer.normalize_str(text), [hex(c) for c in cps[i:i + 7]]
        ours = ["".join(b2u[b] for b in p.encode("utf-8")) for p in pre_tokenize(norm)]
        assert ours == [p for p, _ in bt.pre_tokenizer.pre_tokenize_str(norm)], [hex(c) for c in cps[i:i + 7]]


def test_missing_tokenizer_files_are_named(tmp_path, tok_dir) -> None:
    from libreyolo.models.clip.text import load_text_tower

    shutil.copy(tok_dir / "vocab.json", tmp_path / "vocab.json")
    with pytest.raises(ConfigError, match="lacks the CLIP tokenizer files merges.txt"):
        CLIPTokenizer.from_folder(tmp_path)
    with pytest.raises(ConfigError, match="lacks the CLIP tokenizer files merges.txt"):
        load_text_tower(tmp_path)
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b c\n")
    with pytest.raises(ConfigError, match="line 2 is not two symbols"):
        CLIPTokenizer.from_folder(tmp_path)
    with pytest.raises(ConfigError, match="no '<\\|startoftext\\|>' token"):
        CLIPTokenizer({EOS: 0}, [])


def _text_config(tok: CLIPTokenizer, **kw):
    base = {"vocab_size": len(tok.vocab), "hidden_size": 48, "intermediate_size": 100, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 77, "eos_token_id": tok.eos_id,
            "bos_token_id": tok.bos_id, "pad_token_id": tok.pad_id}
    return {**base, **kw}


def _perturb(model: torch.nn.Module) -> None:
    for p in model.parameters():  # move the LayerNorms and biases off their 1/0 init so the check bites
        p.data.add_(0.02 * torch.randn_like(p))


@pytest.mark.parametrize("eos", ["id", "legacy"])
def test_text_tower_embeddings_equal_transformers(tok_dir, ref_tok, eos: str) -> None:
    tf = pytest.importorskip("transformers")
    from libreyolo.kernels.attention import set_fused_attention
    from libreyolo.models.clip.text import (
        TextTower,
        TextTransformer,
        convert_text_state_dict,
        spec_from,
    )

    torch.manual_seed(0)
    tok = CLIPTokenizer.from_folder(tok_dir)
    cfg = _text_config(tok, **({"eos_token_id": 2} if eos == "legacy" else {}), projection_dim=24)
    ref = tf.CLIPTextModelWithProjection(tf.CLIPTextConfig(**cfg)).eval()
    _perturb(ref)
    sd = ref.state_dict()
    spec = spec_from(sd, ref.config.to_dict())
    assert (spec.width, spec.depth, spec.mlp, spec.heads, spec.embed_dim) == (48, 2, 100, 4, 24)
    assert spec.eos_token_id == (None if eos == "legacy" else tok.eos_id)  # None: CLIP's argmax pooling
    net = TextTransformer(spec).eval()
    net.load_state_dict(convert_text_state_dict(sd), strict=True)
    batch = ref_tok(TEXTS, padding="max_length", truncation=True, max_length=77, return_tensors="pt")
    with torch.no_grad():
        want = ref(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).text_embeds
        got = TextTower(tok, net).embed(TEXTS)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        short = ref_tok(TEXTS[:3], padding=True, return_tensors="pt")["input_ids"]  # no padding to 77
        torch.testing.assert_close(net(short), ref(input_ids=short).text_embeds, rtol=1e-5, atol=1e-5)
        assert set_fused_attention(net, enabled=True) == 2  # SDPA with the causal mask agrees too
        torch.testing.assert_close(net(batch["input_ids"]), want, rtol=1e-5, atol=1e-5)


def test_text_converter_names_a_stray_key() -> None:
    from libreyolo.models.clip.text import convert_text_state_dict, spec_from

    with pytest.raises(CheckpointError, match="text_model.encoder.layers.0.extra"):
        convert_text_state_dict({"text_model.encoder.layers.0.extra": torch.zeros(1)})
    with pytest.raises(CheckpointError, match="vision-only checkpoint"):
        spec_from({"vision_model.post_layernorm.weight": torch.zeros(2)}, {})


def _clip_folder(tmp_path, tok_dir, *, tokenizer: bool):
    """A whole CLIPModel whose image tower fits clip t16 and whose every image embeds to the
    reference's own text embedding of 'a photo of a dog.' (post-LayerNorm weight 0, so its output
    is the bias b for any image, and a rank-one projection mapping b onto that embedding)."""
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    tok = CLIPTokenizer.from_folder(tok_dir)
    vision = {"hidden_size": 192, "intermediate_size": 768, "num_hidden_layers": 12, "num_attention_heads": 3,
              "image_size": 224, "patch_size": 16}
    ref = tf.CLIPModel(tf.CLIPConfig(text_config=_text_config(tok), vision_config=vision, projection_dim=512)).eval()
    _perturb(ref.text_model)
    ref_tok = tf.CLIPTokenizer.from_pretrained(str(tok_dir))
    names = ["cat", "dog", "car", "tree"]
    with torch.no_grad():
        out = ref.get_text_features(**ref_tok([f"a photo of a {n}." for n in names], padding=True, return_tensors="pt"))
        text = out if isinstance(out, torch.Tensor) else out.pooler_output  # (4, 512)
        b = torch.randn(192)
        ref.vision_model.post_layernorm.weight.zero_()
        ref.vision_model.post_layernorm.bias.copy_(b)
        ref.visual_projection.weight.copy_(torch.outer(text[1], b) / b.dot(b))
    folder = tmp_path / "clip-tiny"
    ref.save_pretrained(str(folder))
    if tokenizer:
        for f in ("vocab.json", "merges.txt"):
            shutil.copy(tok_dir / f, folder / f)
    return folder, names, text, float(ref.logit_scale.detach().exp())


def test_set_classes_on_a_whole_clip_checkpoint_picks_the_matching_class(tmp_path, tok_dir) -> None:
    from libreyolo import SAMPLE_IMAGE, LibreYOLO

    folder, names, text, scale = _clip_folder(tmp_path, tok_dir, tokenizer=True)
    model = LibreYOLO(str(folder / "model.safetensors"))
    assert model.FAMILY == "clip" and model.size == "t16" and model.text_tower is not None
    assert not any(k.startswith("text") for k in model.net.state_dict())  # the text tower is not in the net
    model.set_classes(names)
    model.invalidate_graphs("class embeddings")
    r = model(SAMPLE_IMAGE)[0]
    assert r.names[1] == "dog" and r.probs.top1 == 1
    cos = F.normalize(text, dim=-1) @ F.normalize(text[1], dim=-1)  # what the reference's embeddings give
    torch.testing.assert_close(r.probs.data.float().cpu(), (scale * cos).softmax(-1), rtol=1e-4, atol=1e-4)
    # a template list averages the normalised prompts; one template equals the single-string call
    assert torch.allclose(model.text_tower.embed_classes(names, template=["a photo of a {}."]),
                          F.normalize(model.text_tower.embed_classes(names), dim=-1), atol=1e-6)
    with pytest.raises(ConfigError, match="no '\\{\\}'"):
        model.set_classes(names, template="a photo")


def test_set_classes_without_tokenizer_files_says_how_to_fix(tmp_path, tok_dir) -> None:
    from libreyolo import LibreYOLO
    from libreyolo.models.clip.text import load_text_tower

    folder, names, _, _ = _clip_folder(tmp_path, tok_dir, tokenizer=False)
    model = LibreYOLO(str(folder / "model.safetensors"))  # the image tower still loads
    assert model.text_tower is None
    with pytest.raises(ConfigError, match="vocab.json, merges.txt.*load_text_tower"):
        model.set_classes(names)
    with pytest.raises(ConfigError, match="lacks the CLIP tokenizer files vocab.json, merges.txt"):
        load_text_tower(folder)
    for f in ("vocab.json", "merges.txt"):  # the explicit loader once the files are there
        shutil.copy(tok_dir / f, folder / f)
    model.set_classes(names, text_tower=load_text_tower(folder))
    assert model.nc == 4 and model.names[3] == "tree"


def test_siglip2_set_classes_says_there_is_no_text_tower() -> None:
    from libreyolo.registry import families

    fam = families()["siglip2"](size="t16", nc=2)
    with pytest.raises(ConfigError, match="SentencePiece"):
        fam.set_classes(["cat", "dog"])


def test_saved_text_tower_is_a_transformers_checkpoint(tmp_path, tok_dir) -> None:
    """save_text_tower writes the transformers layout: transformers reads it and embeds alike."""
    tf = pytest.importorskip("transformers")
    from libreyolo.models.clip.text import (
        TextSpec,
        TextTower,
        TextTransformer,
        load_text_tower,
        save_text_tower,
    )

    torch.manual_seed(0)
    tok = CLIPTokenizer.from_folder(tok_dir)
    net = TextTransformer(TextSpec(vocab_size=len(tok.vocab), width=32, depth=2, heads=2, mlp=64, embed_dim=8,
                                   eos_token_id=tok.eos_id))
    _perturb(net)
    folder = save_text_tower(TextTower(tok, net), tmp_path / "text")
    ref = tf.CLIPTextModelWithProjection.from_pretrained(str(folder)).eval()
    ref_tok = tf.CLIPTokenizer.from_pretrained(str(folder))
    batch = ref_tok(TEXTS, padding=True, truncation=True, max_length=77, return_tensors="pt")
    back = load_text_tower(folder)
    assert back.tokenizer.ranks == tok.ranks and back.tokenizer.vocab == tok.vocab
    with torch.no_grad():
        want = ref(**batch).text_embeds
    torch.testing.assert_close(back.embed(TEXTS), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(back.embed(TEXTS), TextTower(tok, net).embed(TEXTS))


def test_base_text_tower_parameter_count_equals_transformers() -> None:
    tf = pytest.importorskip("transformers")
    from libreyolo.models.clip.text import (
        TextSpec,
        TextTransformer,
        convert_text_state_dict,
        spec_from,
    )

    ref = tf.CLIPTextModelWithProjection(tf.CLIPTextConfig())  # CLIP ViT-B's text tower
    sd = ref.state_dict()
    assert spec_from(sd, ref.config.to_dict()) == TextSpec()
    net = TextTransformer(TextSpec())
    assert sum(p.numel() for p in net.parameters()) == sum(p.numel() for p in ref.parameters()) == 63_428_096
    net.load_state_dict(convert_text_state_dict(sd), strict=True)
