"""DINOv2 weights from timm (``vit_{small,base,large}_patch14_dinov2``, any pretrained tag; the
official ``dinov2_vit*14_pretrain.pth`` files use the same tensor names) and from transformers
(``Dinov2Model`` / ``Dinov2ForImageClassification``, ``model_type`` ``"dinov2"``).

- timm names are the lineage's (:mod:`libreyolo.models._vit.convert`). The published backbones
  have no head: ours is then freshly initialised for :data:`BACKBONE_NC` classes (train it, the
  linear probe, with ``model.train``). A timm head reads the class token only (``global_pool=
  "token"``): it becomes ours with zero weights on the patch-mean half, the same logits.
- transformers names (either prefix, the Hub files' ``attention.attention.{query,key,value}`` /
  ``attention.output.dense`` or the newer ``attention.{q,k,v,o}_proj``) are renamed to timm's,
  query/key/value concatenated into one ``qkv`` projection. ``classifier`` reads the class token
  and the patch-token mean, as our head: copied as is.
- The mask token (used only by DINOv2's masked-image pretraining) is dropped; register tokens and
  the SwiGLU MLP (ViT-g/14) have no place here and are named in the error.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import base_arch
from .._vit.convert import convert_state_dict as convert_timm_names
from .nn import SPECS

logger = logging.getLogger(__name__)

SOURCES = ("timm", "transformers")
ARCHS = {"vit_small_patch14_dinov2": "s14", "vit_base_patch14_dinov2": "b14", "vit_large_patch14_dinov2": "l14"}
WIDTHS = {spec.dim: size for size, spec in SPECS.items()}  # transformers configs: hidden_size -> size
BACKBONE_NC = 1000  # the class count of a new head for a backbone-only checkpoint (ImageNet-1k)
__all__ = ["SOURCES", "ARCHS", "BACKBONE_NC", "match", "convert_state_dict", "hf_to_timm"]

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


def _is_hf(sd: Mapping[str, Tensor]) -> bool:
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


def match(fw: Any) -> tuple[str, int] | None:
    """(size, nc) of a timm DINOv2 architecture or a transformers ``dinov2`` checkpoint, else None;
    nc is the head's row count, :data:`BACKBONE_NC` for a backbone without one."""
    sd = fw.state_dict
    if fw.source == "timm":
        size = ARCHS.get(base_arch(str(getattr(fw, "arch", ""))))
        head = sd.get("head.weight")
    elif fw.source == "transformers" and str(getattr(fw, "arch", "")) == "dinov2":
        cls = sd.get("dinov2.embeddings.cls_token", sd.get("embeddings.cls_token"))
        size = WIDTHS.get(int(cls.shape[-1])) if cls is not None else None
        head = sd.get("classifier.weight")
    else:
        return None
    if size is None:
        return None
    return size, (int(head.shape[0]) if head is not None else BACKBONE_NC)


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """timm or transformers DINOv2 state dict -> ours (first misfit named; module docstring)."""
    sd = hf_to_timm(src) if _is_hf(src) else {k: v for k, v in src.items() if k != "mask_token"}
    w_own = own["body.head.weight"]
    if "head.weight" not in sd:
        logger.warning("the DINOv2 checkpoint has no classification head: the linear head (%d classes) is newly "
                       "initialised; train it with model.train(data=...)", w_own.shape[0])
        sd["head.weight"], sd["head.bias"] = w_own, own["body.head.bias"]
    elif sd["head.weight"].shape[-1] * 2 == w_own.shape[-1]:  # a class-token head (timm global_pool="token")
        w = sd["head.weight"]
        sd["head.weight"] = torch.cat([w, torch.zeros_like(w)], dim=1)
    return convert_timm_names(sd, own)
