"""transformers ``DepthAnythingForDepthEstimation`` weights (``model_type`` ``depth_anything``; the
Depth Anything V2 checkpoints on the Hub use it) onto :class:`~.nn.DepthAnything`.

- Encoder (``backbone.``, a transformers DINOv2 backbone): ``embeddings.{cls_token,
  position_embeddings, patch_embeddings.projection}`` -> ``encoder.{cls_token, pos_embed,
  patch_embed.proj}``; per layer ``norm1``, ``norm2``, ``mlp.fc1``, ``mlp.fc2`` keep their names,
  ``layer_scale{1,2}.lambda1`` -> ``ls{1,2}.gamma``, query / key / value (``attention.{q,k,v}_proj``
  or the older ``attention.attention.{query,key,value}``) are concatenated into ``attn.qkv`` and the
  output projection (``attention.o_proj`` / ``attention.output.dense``) is ``attn.proj``;
  ``layernorm`` -> ``encoder.norm``. The mask token (masked pretraining only) is dropped.
- Neck: ``reassemble_stage.layers.<i>.{projection,resize}`` -> ``reassemble.<i>.{proj,resize}``,
  ``convs`` as is, ``fusion_stage.layers.<i>.{projection, residual_layer<n>.convolution<m>}`` ->
  ``fusion.<i>.{proj, res<n>.conv<m>}``. The reference's first fusion layer carries a residual unit
  its forward never runs (there is no coarser map to add): those tensors are dropped.
- Head: ``head.conv{1,2,3}`` as is. Every kept tensor keeps its shape.

The network is the relative-depth one (``depth_estimation_type="relative"``: ReLU output). A metric
checkpoint (sigmoid times ``max_depth``) has the same tensors and the config is not read, so it would
load and predict ReLU outputs: convert relative checkpoints only (docs/depth.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all
from .nn import SPECS

SOURCES = ("transformers",)
WIDTHS = {spec.vit.dim: size for size, spec in SPECS.items()}  # encoder width -> size
_TOP = {"backbone.embeddings.cls_token": "encoder.cls_token",
        "backbone.embeddings.position_embeddings": "encoder.pos_embed",
        "backbone.embeddings.patch_embeddings.projection.weight": "encoder.patch_embed.proj.weight",
        "backbone.embeddings.patch_embeddings.projection.bias": "encoder.patch_embed.proj.bias",
        "backbone.layernorm.weight": "encoder.norm.weight", "backbone.layernorm.bias": "encoder.norm.bias"}
_QKV = {"attention.q_proj": 0, "attention.k_proj": 1, "attention.v_proj": 2,
        "attention.attention.query": 0, "attention.attention.key": 1, "attention.attention.value": 2}
_LAYER = re.compile(r"backbone\.encoder\.layer\.(\d+)\.(.+)\.(weight|bias|lambda1)")
_IN_LAYER = {"norm1": "norm1", "norm2": "norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2",
             "attention.o_proj": "attn.proj", "attention.output.dense": "attn.proj",
             "layer_scale1": "ls1", "layer_scale2": "ls2"}


def rename_key(k: str) -> str | None:
    """Our name for one reference key other than query / key / value (``None``: dropped).

    Example:
        >>> rename_key("neck.fusion_stage.layers.2.residual_layer1.convolution2.bias")
        'neck.fusion.2.res1.conv2.bias'
        >>> rename_key("backbone.encoder.layer.4.layer_scale2.lambda1")
        'encoder.blocks.4.ls2.gamma'
    """
    if k in _TOP:
        return _TOP[k]
    if k == "backbone.embeddings.mask_token" or k.startswith("neck.fusion_stage.layers.0.residual_layer1."):
        return None
    if m := _LAYER.fullmatch(k):
        part, leaf = m[2], m[3]
        if part in _IN_LAYER and (leaf == "lambda1") == part.startswith("layer_scale"):
            return f"encoder.blocks.{m[1]}.{_IN_LAYER[part]}.{'gamma' if leaf == 'lambda1' else leaf}"
    if m := re.fullmatch(r"neck\.reassemble_stage\.layers\.(\d+)\.(projection|resize)\.(weight|bias)", k):
        return f"neck.reassemble.{m[1]}.{'proj' if m[2] == 'projection' else 'resize'}.{m[3]}"
    if m := re.fullmatch(r"neck\.convs\.(\d+)\.weight", k):
        return k
    if m := re.fullmatch(r"neck\.fusion_stage\.layers\.(\d+)\.projection\.(weight|bias)", k):
        return f"neck.fusion.{m[1]}.proj.{m[2]}"
    if m := re.fullmatch(r"neck\.fusion_stage\.layers\.(\d+)\.residual_layer([12])\.convolution([12])\.(weight|bias)", k):
        return f"neck.fusion.{m[1]}.res{m[2]}.conv{m[3]}.{m[4]}"
    if re.fullmatch(r"head\.conv[123]\.(weight|bias)", k):
        return k
    raise CheckpointError(f"reference key {k!r} is not part of a transformers Depth Anything (relative head, "
                          "DINOv2 encoder without register tokens) this converter knows.")


def merge_qkv(sd: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The reference state dict with each layer's query / key / value concatenated (in that order)
    into one ``backbone.encoder.layer.<i>.qkv.<leaf>`` tensor, the other keys unchanged.

    Example:
        >>> sd = {f"backbone.encoder.layer.0.attention.{n}_proj.bias": torch.full((2,), float(i))
        ...       for i, n in enumerate("qkv")}
        >>> merge_qkv(sd)["backbone.encoder.layer.0.qkv.bias"].tolist()
        [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    """
    out: dict[str, Tensor] = {}
    parts: dict[str, list[Tensor | None]] = {}
    for k, v in sd.items():
        m = _LAYER.fullmatch(k)
        if m and m[2] in _QKV and m[3] in ("weight", "bias"):
            parts.setdefault(f"backbone.encoder.layer.{m[1]}.qkv.{m[3]}", [None, None, None])[_QKV[m[2]]] = v
        else:
            out[k] = v
    for k, p in parts.items():
        if any(t is None for t in p):
            raise CheckpointError(f"the reference state dict lacks one of query/key/value for {k!r}")
        out[k] = torch.cat(p, dim=0)  # type: ignore[arg-type]
    return out


def _rename(k: str) -> str | None:
    if m := re.fullmatch(r"backbone\.encoder\.layer\.(\d+)\.qkv\.(weight|bias)", k):
        return f"encoder.blocks.{m[1]}.attn.qkv.{m[2]}"
    return rename_key(k)


def match(fw: Any) -> tuple[str, int] | None:
    """``(size, 1)`` for a transformers Depth Anything checkpoint, else ``None``."""
    if str(getattr(fw, "arch", "")).lower().replace("-", "_") != "depth_anything":
        return None
    sd = getattr(fw, "state_dict", {})
    cls = sd.get("backbone.embeddings.cls_token")
    size = WIDTHS.get(int(cls.shape[-1])) if cls is not None else None
    if size is None:
        raise CheckpointError(f"this Depth Anything (encoder width {None if cls is None else int(cls.shape[-1])}) is "
                              f"none of the sizes {', '.join(SPECS)} (widths {', '.join(map(str, WIDTHS))})")
    return size, 1


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """transformers Depth Anything state dict -> ours (first misfit named)."""
    return fit(rename_all(merge_qkv(src), _rename), own)
