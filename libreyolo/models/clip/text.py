"""CLIP's text tower (Radford et al., 2021): token ids -> text embeddings, and its loading.

Token ids Tensor[B, L] int64 (L <= ``context``, from :class:`~.tokenizer.CLIPTokenizer`) ->
embeddings Tensor[B, ``embed_dim``], not normalised:

1. token embedding (``vocab_size`` x ``width``) + learned positions (``context`` x ``width``);
2. ``depth`` pre-norm blocks of the ViT lineage (:class:`~libreyolo.models._vit.net.Block`:
   fused qkv attention through :class:`~libreyolo.layers.attention.Attention`, QuickGELU MLP,
   LayerNorm eps 1e-5) under a **causal** mask (an additive ``-inf`` above the diagonal);
3. final LayerNorm, then the features of ONE token per text: the first end-of-text token
   (``eos_token_id``), or, when the checkpoint's config carries the old ``eos_token_id`` 2, the
   position of the largest id (CLIP's own rule: ``<|endoftext|>`` is the last vocabulary entry);
4. a bias-free projection to ``embed_dim``.

Conversion: the text half of a transformers ``CLIPModel`` or ``CLIPTextModelWithProjection``
state dict (:func:`convert_text_state_dict`; q/k/v concatenated into one qkv, the position
table gains a batch axis, the vision keys are ignored). :func:`load_text_tower` reads a local
checkpoint folder (``config.json``, ``model.safetensors`` or ``pytorch_model.bin``, ``vocab.json``,
``merges.txt``) into a :class:`TextTower`, which embeds class names for
:meth:`~libreyolo.models._vit.zero_shot.ZeroShotFamily.set_classes`. The tower is eager-only,
never part of the image network that CUDA graphs capture or checkpoints save.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import CheckpointError, ConfigError
from .._vit.net import Block
from .._vit.towers import QuickGELU
from .tokenizer import CONTEXT, CLIPTokenizer

LEGACY_EOS = 2  # configs written before transformers' fix carry this: pool at the argmax id
_ACTS = {"quick_gelu": QuickGELU, "gelu": nn.GELU, "gelu_new": lambda: nn.GELU(approximate="tanh"),
         "gelu_pytorch_tanh": lambda: nn.GELU(approximate="tanh")}
_LAYER = re.compile(r"text_model\.encoder\.layers\.(\d+)\.(layer_norm1|layer_norm2|self_attn\.out_proj|mlp\.fc1"
                    r"|mlp\.fc2|self_attn\.q_proj|self_attn\.k_proj|self_attn\.v_proj)\.(weight|bias)")
_IN_LAYER = {"layer_norm1": "norm1", "layer_norm2": "norm2", "self_attn.out_proj": "attn.proj",
             "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
_QKV = {"self_attn.q_proj": 0, "self_attn.k_proj": 1, "self_attn.v_proj": 2}
_TOP = {"text_model.embeddings.token_embedding.weight": "token_embed.weight",
        "text_model.final_layer_norm.weight": "norm.weight", "text_model.final_layer_norm.bias": "norm.bias",
        "text_projection.weight": "proj.weight"}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True, kw_only=True)
class TextSpec:
    """One text tower: ``vocab_size``, ``width``, ``depth`` blocks, ``heads``, MLP width ``mlp``,
    ``context`` positions, projection ``embed_dim``, MLP ``act`` (``quick_gelu``, ``gelu``,
    ``gelu_new``), LayerNorm ``ln_eps`` and ``eos_token_id`` (None: pool at the argmax id).
    The defaults are CLIP ViT-B/16's text tower (63.43 M parameters, tested equal to transformers)."""

    vocab_size: int = 49408
    width: int = 512
    depth: int = 12
    heads: int = 8
    mlp: int = 2048
    context: int = CONTEXT
    embed_dim: int = 512
    act: str = "quick_gelu"
    ln_eps: float = 1e-5
    eos_token_id: int | None = 49407


class TextTransformer(nn.Module):
    """The text tower, steps 1-4 of the module docstring: ids Tensor[B, L] -> Tensor[B, embed_dim].

    Example:
        >>> net = TextTransformer(TextSpec(vocab_size=10, width=16, depth=1, heads=2, mlp=32, context=8,
        ...                                embed_dim=4, eos_token_id=9))
        >>> tuple(net(torch.tensor([[8, 3, 9, 9], [8, 9, 9, 9]])).shape)
        (2, 4)
    """

    def __init__(self, spec: TextSpec, *, fused_attn: bool = False) -> None:
        super().__init__()
        if spec.act not in _ACTS:
            raise ConfigError(f"CLIP text tower act={spec.act!r} unknown; known: {', '.join(_ACTS)}")
        self.spec = spec
        self.token_embed = nn.Embedding(spec.vocab_size, spec.width)
        self.pos_embed = nn.Parameter(torch.zeros(1, spec.context, spec.width))
        self.blocks = nn.ModuleList()
        for _ in range(spec.depth):
            blk = Block(spec.width, spec.heads, spec.mlp / spec.width, drop_path=0.0, fused_attn=fused_attn,
                        ln_eps=spec.ln_eps, act=_ACTS[spec.act]())
            if blk.mlp.fc1.out_features != spec.mlp:  # a width the ratio does not reproduce exactly
                blk.mlp = type(blk.mlp)(spec.width, spec.mlp, _ACTS[spec.act]())
            self.blocks.append(blk)
        self.norm = nn.LayerNorm(spec.width, eps=spec.ln_eps)
        self.proj = nn.Linear(spec.width, spec.embed_dim, bias=False)
        nn.init.normal_(self.pos_embed, std=0.01)

    def forward(self, ids: Tensor) -> Tensor:
        b, n = ids.shape
        if n > self.spec.context:
            raise ConfigError(f"{n} tokens exceed the text tower's context of {self.spec.context}; "
                              "tokenize with truncation (CLIPTokenizer does)")
        x = self.token_embed(ids) + self.pos_embed[:, :n].to(self.token_embed.weight.dtype)  # (B, L, D)
        causal = torch.full((n, n), float("-inf"), dtype=x.dtype, device=x.device).triu(1)  # (L, L)
        for blk in self.blocks:
            x = blk(x, attn_bias=causal)
        x = self.norm(x)
        eos = self.spec.eos_token_id
        at = ids.argmax(dim=-1) if eos is None else (ids == eos).int().argmax(dim=-1)  # (B,)
        return self.proj(x[torch.arange(b, device=x.device), at])


class TextTower(nn.Module):
    """A tokenizer and its :class:`TextTransformer`: texts -> embeddings. ``embed_classes`` is what
    :meth:`~libreyolo.models._vit.zero_shot.ZeroShotFamily.set_classes` calls.

    Example:
        >>> from libreyolo.models.clip.tokenizer import BOS, EOS
        >>> vocab = {c: i for i, c in enumerate(["c", "a", "t", "d", "o", "g", "t</w>", "g</w>", BOS, EOS])}
        >>> spec = TextSpec(vocab_size=10, width=16, depth=1, heads=2, mlp=32, context=8, embed_dim=4, eos_token_id=9)
        >>> tower = TextTower(CLIPTokenizer(vocab, [], context=8), TextTransformer(spec))
        >>> tuple(tower.embed_classes(["cat", "dog"], template=["{}", "a {}"]).shape)
        (2, 4)
    """

    def __init__(self, tokenizer: CLIPTokenizer, transformer: TextTransformer) -> None:
        super().__init__()
        if tokenizer.context > transformer.spec.context:
            raise ConfigError(f"tokenizer context {tokenizer.context} exceeds the text tower's "
                              f"{transformer.spec.context} positions")
        self.tokenizer = tokenizer
        self.transformer = transformer.eval()

    @property
    def embed_dim(self) -> int:
        """Width of the text embeddings."""
        return self.transformer.spec.embed_dim

    @torch.no_grad()
    def embed(self, texts: str | Sequence[str]) -> Tensor:
        """Texts -> embeddings Tensor[B, ``embed_dim``] float32 (not normalised), on the tower's device."""
        ids = self.tokenizer(texts).to(self.transformer.token_embed.weight.device)
        return self.transformer(ids).float()

    def embed_classes(self, names: Sequence[str], *, template: str | Sequence[str] = "a photo of a {}.") -> Tensor:
        """One embedding per class name, Tensor[nc, ``embed_dim``]: ``template.format(name)``
        embedded; several templates are averaged after L2 normalisation (CLIP's prompt ensembling)."""
        templates = [template] if isinstance(template, str) else list(template)
        if not names or not templates:
            raise ConfigError("embed_classes needs at least one class name and one template")
        for t in templates:
            if "{}" not in t:
                raise ConfigError(f"template {t!r} has no '{{}}' for the class name, e.g. 'a photo of a {{}}.'")
        emb = torch.stack([F.normalize(self.embed([t.format(n) for n in names]), dim=-1) for t in templates])
        return emb.mean(dim=0) if len(templates) > 1 else emb[0]


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The text part of a transformers CLIP ``config.json`` (``text_config`` of a ``CLIPModel``, the
    file itself for a ``CLIPTextModelWithProjection``); ``projection_dim`` of the outer config kept."""
    sub = config.get("text_config")
    if isinstance(sub, dict):
        return {**({"projection_dim": config["projection_dim"]} if "projection_dim" in config else {}), **sub}
    return dict(config)


def spec_from(sd: Mapping[str, Tensor], config: Mapping[str, Any]) -> TextSpec:
    """The :class:`TextSpec` of a transformers CLIP state dict: shapes from its tensors, heads /
    activation / eps / end-of-text id from ``config`` (:func:`text_config`; CLIP's defaults where absent).

    Raises:
        CheckpointError: the state dict has no CLIP text tower.
    """
    tok = sd.get("text_model.embeddings.token_embedding.weight")
    pos = sd.get("text_model.embeddings.position_embedding.weight")
    proj = sd.get("text_projection.weight")
    if tok is None or pos is None or proj is None:
        raise CheckpointError("the state dict has no CLIP text tower with projection (text_model.embeddings.* and "
                              "text_projection.weight); a vision-only checkpoint cannot embed class names")
    cfg = text_config(config)
    depth = 1 + max((int(m.group(1)) for k in sd if (m := _LAYER.fullmatch(k))), default=-1)
    fc1 = sd.get("text_model.encoder.layers.0.mlp.fc1.weight")
    eos = cfg.get("eos_token_id", TextSpec.eos_token_id)
    return TextSpec(vocab_size=int(tok.shape[0]), width=int(tok.shape[1]), depth=depth,
                    heads=int(cfg.get("num_attention_heads", TextSpec.heads)),
                    mlp=int(fc1.shape[0]) if fc1 is not None else 4 * int(tok.shape[1]),
                    context=int(pos.shape[0]), embed_dim=int(proj.shape[0]),
                    act=str(cfg.get("hidden_act", TextSpec.act)), ln_eps=float(cfg.get("layer_norm_eps", TextSpec.ln_eps)),
                    eos_token_id=None if eos is None or int(eos) == LEGACY_EOS else int(eos))


def convert_text_state_dict(sd: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The text half of a transformers ``CLIPModel`` / ``CLIPTextModelWithProjection`` state dict ->
    :class:`TextTransformer` keys (module docstring); vision keys and ``logit_*`` are ignored.

    Example:
        >>> sd = {f"text_model.encoder.layers.0.self_attn.{n}_proj.bias": torch.full((2,), float(i))
        ...       for i, n in enumerate("qkv")}
        >>> convert_text_state_dict(sd)["blocks.0.attn.qkv.bias"].tolist()
        [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    """
    out: dict[str, Tensor] = {}
    qkv: dict[str, list[Tensor | None]] = {}
    for k, v in sd.items():
        if not (k.startswith("text_model.") or k == "text_projection.weight") or k.endswith("position_ids"):
            continue
        if k in _TOP:
            out[_TOP[k]] = v
        elif k == "text_model.embeddings.position_embedding.weight":
            out["pos_embed"] = v.unsqueeze(0)
        elif (m := _LAYER.fullmatch(k)) is not None:
            i, part, leaf = m.groups()
            if part in _QKV:
                qkv.setdefault(f"blocks.{i}.attn.qkv.{leaf}", [None, None, None])[_QKV[part]] = v
            else:
                out[f"blocks.{i}.{_IN_LAYER[part]}.{leaf}"] = v
        else:
            raise CheckpointError(f"reference key {k!r} is not part of a CLIP text tower this converter knows")
    for name, parts in qkv.items():
        if any(p is None for p in parts):
            raise CheckpointError(f"the reference state dict lacks one of q/k/v_proj for {name!r}")
        out[name] = torch.cat(parts, dim=0)  # type: ignore[arg-type]
    return out


def build_text_tower(sd: Mapping[str, Tensor], config: Mapping[str, Any], tokenizer: CLIPTokenizer) -> TextTower:
    """A :class:`TextTower` from a transformers CLIP state dict, its ``config.json`` contents and the
    checkpoint's ``tokenizer`` (its context is cut to the tower's positions when longer).

    Raises:
        CheckpointError: no text tower in ``sd``, or a tensor does not fit (named).
    """
    spec = spec_from(sd, config)
    net = TextTransformer(spec)
    tokenizer.context = min(tokenizer.context, spec.context)
    want = net.state_dict()
    got = convert_text_state_dict(sd)
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        raise CheckpointError(f"the CLIP text tower does not fit: missing {missing[:3]}, unexpected {extra[:3]}")
    for k, v in got.items():
        if tuple(v.shape) != tuple(want[k].shape):
            raise CheckpointError(f"CLIP text tensor {k!r} has shape {tuple(v.shape)}, expected {tuple(want[k].shape)}")
    net.load_state_dict({k: v.float() for k, v in got.items()}, strict=True)
    return TextTower(tokenizer, net)


def _read_weights(folder: Path) -> dict[str, Tensor]:
    for name in WEIGHT_FILES:
        p = folder / name
        if p.is_file():
            try:
                if p.suffix == ".safetensors":
                    from safetensors.torch import load_file

                    return dict(load_file(str(p)))
                return dict(torch.load(p, map_location="cpu", weights_only=True))
            except Exception as e:  # noqa: BLE001 - every read failure becomes one sentence
                raise CheckpointError(f"'{p}' is not a readable weights file ({type(e).__name__}); "
                                      "use another copy") from e
    raise CheckpointError(f"'{folder}' has no {' or '.join(WEIGHT_FILES)} with the CLIP text tower")


def load_text_tower(folder: str | Path) -> TextTower:
    """The CLIP text tower of a local transformers checkpoint folder (``CLIPModel`` or
    ``CLIPTextModelWithProjection``: ``config.json``, ``model.safetensors`` or ``pytorch_model.bin``,
    ``vocab.json``, ``merges.txt``), on the CPU, without transformers or network access.

    Raises:
        ConfigError: the folder or its tokenizer files are missing; CheckpointError: no text tower.

    Example:
        >>> load_text_tower("/no/such/folder")
        Traceback (most recent call last):
        ...
        libreyolo.errors.ConfigError: CLIP text-tower folder '/no/such/folder' does not exist; pass a local ...
    """
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"CLIP text-tower folder '{folder}' does not exist; pass a local transformers CLIP "
                          "checkpoint folder (config.json, model.safetensors, vocab.json, merges.txt)")
    tokenizer = CLIPTokenizer.from_folder(path)  # the clear error for missing tokenizer files comes first
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"'{path / 'config.json'}' is missing or not JSON; the text tower needs the "
                          "checkpoint's config.json (heads, activation, end-of-text id)") from e
    return build_text_tower(_read_weights(path), config, tokenizer)


def save_text_tower(tower: TextTower, folder: str | Path) -> Path:
    """Write ``tower`` as a transformers ``CLIPTextModelWithProjection`` folder (``config.json``,
    ``model.safetensors``, ``vocab.json``, ``merges.txt``): the inverse of :func:`load_text_tower`,
    readable by transformers too. Returns the folder.

    Example:
        >>> import tempfile
        >>> from libreyolo.models.clip.tokenizer import BOS, EOS
        >>> vocab = {c: i for i, c in enumerate(["c", "a", "t</w>", "ca", BOS, EOS])}
        >>> spec = TextSpec(vocab_size=6, width=16, depth=1, heads=2, mlp=32, context=8, embed_dim=4, eos_token_id=5)
        >>> tower = TextTower(CLIPTokenizer(vocab, [("c", "a")], context=8), TextTransformer(spec))
        >>> back = load_text_tower(save_text_tower(tower, Path(tempfile.mkdtemp()) / "tiny"))
        >>> torch.equal(back.embed(["cat"]), tower.embed(["cat"])), back.tokenizer.encode("cat")
        (True, [4, 3, 2, 5])
    """
    from safetensors.torch import save_file

    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    spec, tok = tower.transformer.spec, tower.tokenizer
    top = {v: k for k, v in _TOP.items()}
    layer = {v: k for k, v in _IN_LAYER.items()}
    sd: dict[str, Tensor] = {}
    for k, v in tower.transformer.state_dict().items():
        v = v.detach().float().cpu().contiguous()
        if k in top:
            sd[top[k]] = v
        elif k == "pos_embed":
            sd["text_model.embeddings.position_embedding.weight"] = v[0].contiguous()
        else:  # blocks.<i>.<part>.<leaf>
            _, i, rest = k.split(".", 2)
            part, leaf = rest.rsplit(".", 1)
            pre = f"text_model.encoder.layers.{i}."
            if part == "attn.qkv":
                for name, chunk in zip(("q", "k", "v"), v.chunk(3, dim=0), strict=True):
                    sd[f"{pre}self_attn.{name}_proj.{leaf}"] = chunk.contiguous()
            else:
                sd[f"{pre}{layer[part]}.{leaf}"] = v
    save_file(sd, str(path / "model.safetensors"))
    config = {"model_type": "clip_text_model", "architectures": ["CLIPTextModelWithProjection"],
              "vocab_size": spec.vocab_size, "hidden_size": spec.width, "intermediate_size": spec.mlp,
              "num_hidden_layers": spec.depth, "num_attention_heads": spec.heads,
              "max_position_embeddings": spec.context, "projection_dim": spec.embed_dim, "hidden_act": spec.act,
              "layer_norm_eps": spec.ln_eps, "bos_token_id": tok.bos_id, "pad_token_id": tok.pad_id,
              "eos_token_id": LEGACY_EOS if spec.eos_token_id is None else spec.eos_token_id}
    (path / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (path / "vocab.json").write_text(json.dumps(tok.vocab, ensure_ascii=False), encoding="utf-8")
    merges = sorted(tok.ranks, key=tok.ranks.__getitem__)
    (path / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    return path
