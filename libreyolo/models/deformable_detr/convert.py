"""transformers ``DeformableDetrForObjectDetection`` weights (``model_type`` ``deformable_detr``)
onto our Deformable DETR.

Key mapping (transformers 5.x names; the 4.x names ``backbone.conv_encoder.model``, layer-level
``fc1``/``fc2`` and ``self_attn.out_proj`` are read too):

* ``model.backbone.model.*`` (timm ResNet, the torchvision layout) -> ``backbone.*``;
* ``model.input_proj`` / ``model.level_embed`` -> ``encoder.input_proj`` / ``encoder.level_embed``;
* encoder layer ``self_attn`` (same sub-names), ``self_attn_layer_norm`` -> ``norm1``,
  ``final_layer_norm`` -> ``norm2``, ``mlp.fc1/fc2`` -> ``ffn.linear1/linear2``;
* decoder layer ``self_attn.{q,k,v}_proj`` -> ``self_attn.in_proj_weight/bias`` (concatenated
  q, k, v), ``o_proj`` -> ``out_proj``, ``encoder_attn`` -> ``cross_attn``, norms -> ``norm1..3``;
* ``model.query_position_embeddings`` -> ``decoder.query_embed``, ``model.reference_points`` ->
  ``decoder.reference_points``;
* plain variant (``r50``): ``class_embed.0`` / ``bbox_embed.0`` -> the shared heads (the other
  indices must be tied copies); box refinement (``r50refine``, recognised by
  ``model.decoder.bbox_embed``): ``class_embed.i`` / ``bbox_embed.i`` -> ``decoder.class_embed.i``
  / ``decoder.bbox_embed.i``, and ``model.decoder.bbox_embed`` (the same tensors) is dropped;
* two stage (``r50twostage``, recognised by ``model.enc_output``): as box refinement with a
  seventh head pair (the proposals'), ``model.enc_output(_norm)`` / ``model.pos_trans(_norm)`` ->
  ``decoder.*``, and the tied ``model.decoder.class_embed`` dropped too.

A checkpoint of another variant than the network's is refused with a :class:`CheckpointError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import Tensor

from ...errors import CheckpointError
from .._detr.hf_convert import stack_qkv_and_check

SOURCES = ("transformers",)
ARCHS = ("deformable_detr",)
__all__ = ["SOURCES", "match", "convert_state_dict", "rename_key", "is_refine", "is_two_stage", "variant"]

_RULES: tuple[tuple[str, str], ...] = (
    (r"^model\.backbone\.(?:conv_encoder\.)?model\.", "backbone."),
    (r"^model\.input_proj\.", "encoder.input_proj."),
    (r"^model\.level_embed$", "encoder.level_embed"),
    (r"^model\.query_position_embeddings\.", "decoder.query_embed."),
    (r"^model\.reference_points\.", "decoder.reference_points."),
    (r"^model\.(enc_output|enc_output_norm|pos_trans|pos_trans_norm)\.", r"decoder.\1."),
    (r"^class_embed\.0\.", "decoder.class_embed."),
    (r"^bbox_embed\.0\.", "decoder.bbox_embed."),
    (r"^model\.(encoder|decoder)\.layers\.(\d+)\.", r"\1.layers.\2."),
)
_ENCODER_LAYER = {"self_attn_layer_norm.": "norm1.", "final_layer_norm.": "norm2."}
_DECODER_LAYER = {"self_attn_layer_norm.": "norm1.", "encoder_attn_layer_norm.": "norm2.",
                  "final_layer_norm.": "norm3.", "encoder_attn.": "cross_attn.",
                  "self_attn.o_proj.": "self_attn.out_proj."}
_FFN = {"mlp.fc1.": "ffn.linear1.", "mlp.fc2.": "ffn.linear2.", "fc1.": "ffn.linear1.", "fc2.": "ffn.linear2."}


def rename_key(key: str, *, refine: bool = False) -> str | None:
    """Our name for one reference key (``None``: a tied duplicate to drop). The decoder's separate
    q/k/v projections are merged by :func:`convert_state_dict`."""
    if refine:
        if key.startswith(("model.decoder.bbox_embed.", "model.decoder.class_embed.")):
            return None
        if m := re.match(r"^(class_embed|bbox_embed)\.(\d+)\.(.+)$", key):
            return f"decoder.{m[1]}.{m[2]}.{m[3]}"
    elif re.match(r"^(class_embed|bbox_embed)\.[1-9]\d*\.", key):
        return None
    for pattern, repl in _RULES:
        new, n = re.subn(pattern, repl, key)
        if n:
            key = new
            break
    m = re.match(r"^(encoder|decoder)\.layers\.\d+\.", key)
    if m:
        head, rest = key[: m.end()], key[m.end():]
        table = {**(_ENCODER_LAYER if m[1] == "encoder" else _DECODER_LAYER), **_FFN}
        for old, new in table.items():
            if rest.startswith(old):
                rest = new + rest[len(old):]
                break
        key = head + rest
    return key


def is_refine(src: Mapping[str, Tensor]) -> bool:
    """Does this checkpoint use iterative box refinement (``model.decoder.bbox_embed``)?"""
    return any(k.startswith("model.decoder.bbox_embed.") for k in src)


def is_two_stage(src: Mapping[str, Tensor]) -> bool:
    """Is this a two-stage checkpoint (``model.enc_output``)?"""
    return any(k.startswith("model.enc_output.") for k in src)


def variant(src: Mapping[str, Tensor]) -> str:
    """``"two-stage"``, ``"box-refinement"`` or ``"plain"``."""
    return "two-stage" if is_two_stage(src) else "box-refinement" if is_refine(src) else "plain"


def _check_variant(src: Mapping[str, Tensor], *, want: str) -> None:
    have = variant(src)
    if have != want:
        raise CheckpointError(f"this is a {have} Deformable DETR checkpoint, the network is the {want} variant")
    refine = want != "plain"
    for k, v in src.items():
        if refine:
            m = re.match(r"^model\.decoder\.(bbox_embed|class_embed)\.(.+)$", k)
            if m and not torch.equal(src.get(f"{m[1]}.{m[2]}", torch.empty(0)), v):
                raise CheckpointError(f"'{k}' differs from '{m[1]}.{m[2]}' (they are one head in the reference)")
        elif m := re.match(r"^(class_embed|bbox_embed)\.([1-9]\d*)\.(.+)$", k):
            base = src.get(f"{m[1]}.0.{m[3]}")
            if base is None or base.shape != v.shape or not torch.equal(base, v):
                raise CheckpointError(f"'{k}' differs from '{m[1]}.0.{m[3]}': per-layer heads belong to the "
                                      "box-refinement variant (r50refine)")


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """transformers Deformable DETR state dict -> ours, shapes checked (the first misfit named)."""
    refine = "decoder.class_embed.0.weight" in own
    _check_variant(src, want="two-stage" if "decoder.enc_output.weight" in own else
                   "box-refinement" if refine else "plain")
    out: dict[str, Tensor] = {}
    qkv: dict[str, dict[str, Tensor]] = {}
    for key, value in src.items():
        if key.endswith("num_batches_tracked"):
            continue
        new = rename_key(key, refine=refine)
        if new is None:
            continue
        if m := re.match(r"^(decoder\.layers\.\d+\.self_attn\.)([qkv])_proj\.(weight|bias)$", new):
            qkv.setdefault(m[1] + "in_proj_" + m[3], {})[m[2]] = value
            continue
        out[new] = value
    return stack_qkv_and_check(out, qkv, own)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for a transformers Deformable DETR with a ResNet-50 backbone, else ``None``."""
    if str(getattr(fw, "arch", "")).lower() not in ARCHS:
        return None
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    blocks = {int(m[1]) for k in sd if (m := re.match(r"model\.backbone\.(?:conv_encoder\.)?model\.layer3\.(\d+)\.conv3\.", k))}
    enc = {int(m[1]) for k in sd if (m := re.match(r"model\.encoder\.layers\.(\d+)\.", k))}
    dec = {int(m[1]) for k in sd if (m := re.match(r"model\.decoder\.layers\.(\d+)\.", k))}
    if len(blocks) == 6 and len(enc) == 6 and len(dec) == 6 and "class_embed.0.weight" in sd:
        size = {"two-stage": "r50twostage", "box-refinement": "r50refine", "plain": "r50"}[variant(sd)]
        return size, int(sd["class_embed.0.weight"].shape[0])
    raise CheckpointError(f"this deformable_detr ({len(blocks)} ResNet stage-3 bottlenecks, {len(enc)} encoder and "
                          f"{len(dec)} decoder layers) matches none of the sizes: r50 (ResNet-50, 6 + 6 layers)")
