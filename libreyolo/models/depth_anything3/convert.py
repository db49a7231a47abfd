"""Depth Anything 3 reference weights (the ``depth_anything_3`` package's ``DepthAnything3Net``,
as the Hub's ``model.safetensors`` holds them under ``model.``, with a ``config.json`` naming
``"model_name"``: ``da3-small``, ``da3-base``, ``da3mono-large``, ``da3metric-large``) onto
:class:`~.nn.DepthAnything3`.

- Encoder: ``backbone.pretrained.`` -> ``encoder.``; the names inside (``patch_embed.proj``,
  ``cls_token``, ``camera_token``, ``pos_embed``, ``blocks.<i>.{norm1, attn.qkv, attn.q_norm,
  attn.k_norm, attn.proj, ls1.gamma, norm2, mlp.fc1, mlp.fc2, ls2.gamma}``, ``norm``) are ours.
- Head (``head.``): ``norm`` -> ``token_norm``; ``projects.<i>`` / ``resize_layers.<i>`` ->
  ``neck.reassemble.<i>.{proj, resize}``; ``scratch.layer<n>_rn`` -> ``neck.convs.<n-1>``;
  ``scratch.refinenet<n>.{resConfUnit<m>.conv<k>, out_conv}`` -> ``neck.fusion.<4-n>.{res<m>.conv<k>,
  proj}``; ``scratch.output_conv1`` -> ``head.conv1``; ``scratch.output_conv2.{0,2}`` ->
  ``head.conv{2,3}``; ``scratch.sky_output_conv2.{0,2}`` -> ``head.sky_conv{2,3}``.
- Dropped (not part of one-image depth): the ray branch of the any-view head (``scratch.*_aux``),
  the camera encoder / decoder (``cam_enc.``, ``cam_dec.``) and a 3DGS head (``gs_head.``,
  ``gs_adapter.``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all

SOURCES = ("depth_anything_3",)
MODEL_NAMES = {"da3-small": "s", "da3-base": "b", "da3mono-large": "mono_l", "da3metric-large": "metric_l"}
_DROP = re.compile(r"(head\.scratch\.\w+_aux(\.|$)|cam_enc\.|cam_dec\.|gs_head\.|gs_adapter\.)")
_HEAD = {"scratch.output_conv1": "head.conv1", "scratch.output_conv2.0": "head.conv2",
         "scratch.output_conv2.2": "head.conv3", "scratch.sky_output_conv2.0": "head.sky_conv2",
         "scratch.sky_output_conv2.2": "head.sky_conv3"}


def rename_key(key: str) -> str | None:
    """Our name for one reference key (``None``: dropped; module docstring).

    Example:
        >>> rename_key("model.head.scratch.refinenet4.resConfUnit2.conv1.weight")
        'neck.fusion.0.res2.conv1.weight'
        >>> rename_key("model.backbone.pretrained.blocks.5.attn.q_norm.bias")
        'encoder.blocks.5.attn.q_norm.bias'
        >>> rename_key("model.cam_dec.fc_t.weight") is None
        True
    """
    k = key.removeprefix("model.")
    if _DROP.match(k):
        return None
    if k.startswith("backbone.pretrained."):
        return "encoder." + k.removeprefix("backbone.pretrained.")
    if not k.startswith("head."):
        raise CheckpointError(f"reference key {key!r} is not part of a Depth Anything 3 network this converter knows")
    k = k.removeprefix("head.")
    if m := re.fullmatch(r"norm\.(weight|bias)", k):
        return f"token_norm.{m[1]}"
    if m := re.fullmatch(r"projects\.(\d)\.(weight|bias)", k):
        return f"neck.reassemble.{m[1]}.proj.{m[2]}"
    if m := re.fullmatch(r"resize_layers\.(\d)\.(weight|bias)", k):
        return f"neck.reassemble.{m[1]}.resize.{m[2]}"
    if m := re.fullmatch(r"scratch\.layer([1-4])_rn\.weight", k):
        return f"neck.convs.{int(m[1]) - 1}.weight"
    if m := re.fullmatch(r"scratch\.refinenet([1-4])\.resConfUnit([12])\.conv([12])\.(weight|bias)", k):
        return f"neck.fusion.{4 - int(m[1])}.res{m[2]}.conv{m[3]}.{m[4]}"
    if m := re.fullmatch(r"scratch\.refinenet([1-4])\.out_conv\.(weight|bias)", k):
        return f"neck.fusion.{4 - int(m[1])}.proj.{m[2]}"
    stem, _, leaf = k.rpartition(".")
    if stem in _HEAD and leaf in ("weight", "bias"):
        return f"{_HEAD[stem]}.{leaf}"
    raise CheckpointError(f"reference key {key!r} is not part of a Depth Anything 3 head this converter knows")


def match(fw: Any) -> tuple[str, int] | None:
    """``(size, 1)`` for a Depth Anything 3 checkpoint of a size built here, else ``None``."""
    if fw.source not in SOURCES:
        return None
    name = str(getattr(fw, "arch", "")).lower()
    if name not in MODEL_NAMES:
        raise CheckpointError(f"Depth Anything 3 model {name!r} is not built here; the sizes are "
                              f"{', '.join(f'{k} ({v})' for k, v in MODEL_NAMES.items())}")
    return MODEL_NAMES[name], 1


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> ours (first misfit named)."""
    return fit(rename_all(src, rename_key), own)
