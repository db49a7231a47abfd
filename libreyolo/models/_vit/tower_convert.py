"""transformers CLIP / SigLIP vision tensor names onto :class:`~libreyolo.models._vit.towers.ImageTower`.

Reads a vision model (``CLIPVisionModel[WithProjection]``, ``SiglipVisionModel``) or a whole
contrastive model (``CLIPModel``, ``SiglipModel``; the SigLIP 2 fixed-resolution checkpoints use
the SigLIP layout): the ``vision_model.`` prefix is optional, the text tower is dropped.

- ``embeddings.class_embedding`` (D,) -> ``encoder.cls_token`` (1, 1, D); ``embeddings.
  position_embedding.weight`` (P, D) -> ``encoder.pos_embed`` (1, P, D); ``embeddings.
  patch_embedding`` -> ``encoder.patch_embed.proj``; ``pre_layrnorm`` -> ``encoder.norm_pre``;
  ``post_layernorm`` -> ``encoder.norm``; ``visual_projection`` -> ``encoder.proj``;
- per layer ``layer_norm{1,2}`` -> ``norm{1,2}``, ``self_attn.{q,k,v}_proj`` concatenated into
  ``attn.qkv``, ``self_attn.out_proj`` -> ``attn.proj``, ``mlp.fc{1,2}`` as named;
- SigLIP's pooling head: ``head.probe`` -> ``encoder.pool.probe``, ``head.attention.in_proj_*``
  split into the query rows (``pool.q``) and the key/value rows (``pool.kv``), ``head.attention.
  out_proj`` -> ``pool.proj``, ``head.layernorm`` -> ``pool.norm``, ``head.mlp`` -> ``pool.mlp``;
- ``logit_scale`` (stored as a log) -> the head's ``scale`` = exp(it), ``logit_bias`` -> ``bias``.

The class head itself (the class text embeddings) is not in these files: it keeps the value it
has in ``own`` (random unit rows) until :meth:`set_class_embeddings` fills it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit

logger = logging.getLogger(__name__)
NO_CLASSES_NC = 1000  # class count of the placeholder head of a checkpoint without class embeddings

_TOP = {"embeddings.patch_embedding.weight": "patch_embed.proj.weight",
        "embeddings.patch_embedding.bias": "patch_embed.proj.bias",
        "pre_layrnorm.weight": "norm_pre.weight", "pre_layrnorm.bias": "norm_pre.bias",
        "post_layernorm.weight": "norm.weight", "post_layernorm.bias": "norm.bias",
        "head.probe": "pool.probe", "head.attention.out_proj.weight": "pool.proj.weight",
        "head.attention.out_proj.bias": "pool.proj.bias", "head.layernorm.weight": "pool.norm.weight",
        "head.layernorm.bias": "pool.norm.bias", "head.mlp.fc1.weight": "pool.mlp.fc1.weight",
        "head.mlp.fc1.bias": "pool.mlp.fc1.bias", "head.mlp.fc2.weight": "pool.mlp.fc2.weight",
        "head.mlp.fc2.bias": "pool.mlp.fc2.bias", "visual_projection.weight": "proj.weight"}
_LAYER = re.compile(r"encoder\.layers\.(\d+)\.(layer_norm1|layer_norm2|self_attn\.out_proj|mlp\.fc1|mlp\.fc2"
                    r"|self_attn\.q_proj|self_attn\.k_proj|self_attn\.v_proj)\.(weight|bias)")
_IN_LAYER = {"layer_norm1": "norm1", "layer_norm2": "norm2", "self_attn.out_proj": "attn.proj",
             "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
_QKV = {"self_attn.q_proj": 0, "self_attn.k_proj": 1, "self_attn.v_proj": 2}
_DROP = re.compile(r"(text_model\..*|text_projection\..*|.*position_ids)")


def vision_key(k: str) -> str:
    """A key without its ``vision_model.`` prefix (``visual_projection`` and the logit keys have none).

    Example:
        >>> vision_key("vision_model.post_layernorm.weight")
        'post_layernorm.weight'
    """
    return k.removeprefix("vision_model.")


def patch_conv(sd: Mapping[str, Tensor]) -> Tensor | None:
    """The patch-embedding weight (D, 3, p, p) of a transformers CLIP/SigLIP state dict, or None."""
    return sd.get("vision_model.embeddings.patch_embedding.weight", sd.get("embeddings.patch_embedding.weight"))


def match_tower(fw: Any, model_types: tuple[str, ...], sizes: Mapping[tuple[int, int], str]) -> tuple[str, int] | None:
    """(size, :data:`NO_CLASSES_NC`) when ``fw`` is a transformers checkpoint of one of
    ``model_types`` whose (width, patch) is a key of ``sizes``, else None."""
    if fw.source != "transformers" or str(getattr(fw, "arch", "")) not in model_types:
        return None
    w = patch_conv(fw.state_dict)
    size = sizes.get((int(w.shape[0]), int(w.shape[-1]))) if w is not None else None
    return None if size is None else (size, NO_CLASSES_NC)


def hf_to_ours(src: Mapping[str, Tensor]) -> dict[str, tuple[str, Tensor]]:
    """``{our key: (reference key, tensor)}`` for a transformers CLIP/SigLIP vision state dict.

    Example:
        >>> sd = {f"vision_model.encoder.layers.0.self_attn.{n}_proj.bias": torch.full((2,), float(i))
        ...       for i, n in enumerate("qkv")}
        >>> hf_to_ours(sd)["body.encoder.blocks.0.attn.qkv.bias"][1].tolist()
        [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    """
    out: dict[str, tuple[str, Tensor]] = {}
    qkv: dict[str, list[Tensor | None]] = {}

    def put(ours: str, ref: str, v: Tensor) -> None:
        out[f"body.{ours}"] = (ref, v)

    for ref, v in src.items():
        k = vision_key(ref)
        if _DROP.fullmatch(k):
            continue
        if k in _TOP:
            put(f"encoder.{_TOP[k]}", ref, v)
        elif k == "embeddings.class_embedding":
            put("encoder.cls_token", ref, v.reshape(1, 1, -1))
        elif k == "embeddings.position_embedding.weight":
            put("encoder.pos_embed", ref, v.unsqueeze(0))
        elif k in ("head.attention.in_proj_weight", "head.attention.in_proj_bias"):
            d = v.shape[0] // 3
            leaf = k.rsplit("_", 1)[-1]
            put(f"encoder.pool.q.{leaf}", ref, v[:d])
            put(f"encoder.pool.kv.{leaf}", ref, v[d:])
        elif k == "logit_scale":
            put("head.scale", ref, v.float().exp().reshape(()))
        elif k == "logit_bias":
            put("head.bias", ref, v.float().reshape(()))
        elif (m := _LAYER.fullmatch(k)) is not None:
            i, part, leaf = m.groups()
            if part in _QKV:
                qkv.setdefault(f"encoder.blocks.{i}.attn.qkv.{leaf}", [None, None, None])[_QKV[part]] = v
            else:
                put(f"encoder.blocks.{i}.{_IN_LAYER[part]}.{leaf}", ref, v)
        else:
            raise CheckpointError(f"reference key {ref!r} is not part of a CLIP/SigLIP vision tower this "
                                  "converter knows (NaFlex SigLIP 2 and text-only files are not read).")
    for name, parts in qkv.items():
        if any(p is None for p in parts):
            raise CheckpointError(f"the reference state dict lacks one of q/k/v_proj for {name!r}.")
        put(name, name, torch.cat(parts, dim=0))  # type: ignore[arg-type]
    return out


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """transformers CLIP/SigLIP vision state dict -> ours (first misfit named; module docstring)."""
    renamed = hf_to_ours(src)
    for key in ("body.head.weight", "body.head.scale", "body.head.bias"):
        if key not in renamed:
            renamed[key] = (key, own[key])
    if "body.head.weight" in own and renamed["body.head.weight"][1] is own["body.head.weight"]:
        logger.warning("the %s checkpoint has no class embeddings: the zero-shot head (%d classes) is a "
                       "placeholder; call set_class_embeddings(embeddings, names)", arch or "tower",
                       own["body.head.weight"].shape[0])
    return fit(renamed, own)
