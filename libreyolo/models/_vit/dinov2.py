"""The DINOv2 backbone shared by the ``dinov2`` and ``dinov2_reg`` families: the size table, the
family base (14 px patches, ``fused_attn`` off by default) and the weight-name rules both
converters use (transformers names onto timm's, the head fitted to ours).

- :data:`DINOV2_SPECS`: ViT-S/14, ViT-B/14, ViT-L/14 with LayerScale (1e-5), a 518 px position
  grid and the class token + patch-mean head (``pool="token_mean"``).
- :func:`hf_to_timm`: a transformers DINOv2 state dict under timm's names (either prefix, the Hub
  files' ``attention.attention.{query,key,value}`` / ``attention.output.dense`` or transformers 5's
  ``attention.{q,k,v,o}_proj``; query/key/value concatenated into one ``qkv``; the mask token dropped).
- :func:`fit_head`: a new head for a backbone-only checkpoint, a class-token head widened with zeros;
  :func:`match_dinov2`: which size and class count a checkpoint is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import base_arch
from .family import VisionTransformerFamily
from .net import ViTSpec

logger = logging.getLogger(__name__)

BACKBONE_NC = 1000  # the class count of a new head for a backbone-only checkpoint (ImageNet-1k)
_DINO = {"patch": 14, "img_size": 518, "layer_scale": 1e-5, "pool": "token_mean"}
DINOV2_SPECS: dict[str, ViTSpec] = {
    "s14": ViTSpec(dim=384, depth=12, heads=6, **_DINO),
    "b14": ViTSpec(dim=768, depth=12, heads=12, **_DINO),
    "l14": ViTSpec(dim=1024, depth=24, heads=16, **_DINO),
}


class DINOv2Family(VisionTransformerFamily):
    """Base of the DINOv2 classify families: 14 px patches (224 px, the linear-evaluation size, is
    16 x 16 patches) and, per SPEC K-9, the explicit attention equation until a byte-exact SDPA
    parity run (the flag flips it)."""

    STRIDE: ClassVar[int] = 14
    FUSED_ATTN_DEFAULT: ClassVar[bool] = False


_HF_LAYER = re.compile(r"encoder\.layer\.(\d+)\.(.+)")
_HF_IN_LAYER = {
    "norm1": "norm1", "norm2": "norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2",
    "attention.output.dense": "attn.proj", "attention.o_proj": "attn.proj",
}
_HF_QKV = {"attention.attention.query": 0, "attention.attention.key": 1, "attention.attention.value": 2,
           "attention.q_proj": 0, "attention.k_proj": 1, "attention.v_proj": 2}
_HF_TOP = {"embeddings.cls_token": "cls_token", "embeddings.position_embeddings": "pos_embed",
           "embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
           "embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
           "layernorm.weight": "norm.weight", "layernorm.bias": "norm.bias",
           "classifier.weight": "head.weight", "classifier.bias": "head.bias"}


def is_hf(sd: Mapping[str, Tensor]) -> bool:
    return any(k.startswith(("embeddings.", "dinov2.embeddings.")) for k in sd)


def hf_to_timm(sd: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A transformers DINOv2 state dict under timm's names (module docstring).

    Example:
        >>> hf = {f"dinov2.encoder.layer.0.attention.attention.{n}.bias": torch.full((2,), float(i))
        ...       for i, n in enumerate(("query", "key", "value"))}
        >>> hf_to_timm(hf)["blocks.0.attn.qkv.bias"].tolist()
        [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    """
    out: dict[str, Tensor] = {}
    qkv: dict[str, list[Tensor | None]] = {}
    for key, v in sd.items():
        k = key.removeprefix("dinov2.")
        if k == "embeddings.mask_token":
            continue
        if k in _HF_TOP:
            out[_HF_TOP[k]] = v
            continue
        m = _HF_LAYER.fullmatch(k)
        part, _, leaf = (m.group(2).rpartition(".") if m else ("", "", ""))
        if m and part in _HF_QKV and leaf in ("weight", "bias"):
            qkv.setdefault(f"blocks.{m.group(1)}.attn.qkv.{leaf}", [None, None, None])[_HF_QKV[part]] = v
        elif m and part in _HF_IN_LAYER and leaf in ("weight", "bias"):
            out[f"blocks.{m.group(1)}.{_HF_IN_LAYER[part]}.{leaf}"] = v
        elif m and m.group(2) in ("layer_scale1.lambda1", "layer_scale2.lambda1"):
            out[f"blocks.{m.group(1)}.ls{m.group(2)[11]}.gamma"] = v
        else:
            raise CheckpointError(f"reference key {key!r} is not part of a DINOv2 ViT this converter knows "
                                  "(no register tokens, no SwiGLU MLP).")
    for name, parts in qkv.items():
        if any(p is None for p in parts):
            raise CheckpointError(f"the reference state dict lacks one of query/key/value for {name!r}.")
        out[name] = torch.cat(parts, dim=0)  # type: ignore[arg-type]
    return out


def fit_head(sd: dict[str, Tensor], own: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``sd`` (timm names) with a head of ours: a new one for a backbone-only checkpoint (a
    warning says so), a class-token head widened with zeros on the patch-mean half."""
    w_own = own["body.head.weight"]
    if "head.weight" not in sd:
        logger.warning("the DINOv2 checkpoint has no classification head: the linear head (%d classes) is newly "
                       "initialised; train it with model.train(data=...)", w_own.shape[0])
        sd["head.weight"], sd["head.bias"] = w_own, own["body.head.bias"]
    elif sd["head.weight"].shape[-1] * 2 == w_own.shape[-1]:  # a class-token head (timm global_pool="token")
        w = sd["head.weight"]
        sd["head.weight"] = torch.cat([w, torch.zeros_like(w)], dim=1)
    return sd


def match_dinov2(fw: Any, *, timm_archs: Mapping[str, str], hf_model_type: str,
                 widths: Mapping[int, str]) -> tuple[str, int] | None:
    """(size, nc) of a timm checkpoint whose architecture is in ``timm_archs`` or a transformers one
    of ``hf_model_type`` (size by the class token's width), else None; nc is the head's row count,
    :data:`BACKBONE_NC` for a backbone without one."""
    sd = fw.state_dict
    if fw.source == "timm":
        size = timm_archs.get(base_arch(str(getattr(fw, "arch", ""))))
        head = sd.get("head.weight")
    elif fw.source == "transformers" and str(getattr(fw, "arch", "")) == hf_model_type:
        cls = next((v for k, v in sd.items() if k.endswith("embeddings.cls_token")), None)
        size = widths.get(int(cls.shape[-1])) if cls is not None else None
        head = sd.get("classifier.weight")
    else:
        return None
    if size is None:
        return None
    return size, (int(head.shape[0]) if head is not None else BACKBONE_NC)
