"""Hugging Face ``transformers`` DEIMv2 weights (``Deimv2ForObjectDetection``, ``model_type``
``deimv2``) onto :class:`~.deimv2_net.Deimv2Detector` (the HGNetv2 sizes: lite encoder, and n's
hybrid encoder).

Renames (``model.`` prefix dropped): the backbone ``conv_encoder.model.`` is read as D-FINE's
``backbone.model.`` (then :func:`~.hf_convert.rename_dfine_key`); the lite encoder and the
ELAN blocks keep transformers' module names (``input_proj``, ``down_conv1/2``, ``bi_fusion_conv``,
``fpn_block(s)`` / ``pan_block(s)`` with ``conv1``, ``csp_rep1/2``, ``conv2``, ``bottlenecks``) with
``norm`` -> ``bn``; n's ``conv_encoder.encoder_input_proj`` is the encoder's ``input_proj``, its AIFI,
lateral and SCDown convs are read as D-FINE's;
decoder layers: ``encoder_attn_layer_norm`` -> ``norm2``, the SwiGLU ``mlp.{gate,up,down}_proj``
as they are, the rest as D-FINE; a box head shared by all layers is read from whichever layer's
copy the file holds. The constants ``reg_scale``, ``up`` and ``num_points_scale`` and
the top-level ``class_embed`` / ``bbox_embed`` aliases are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all
from .hf_convert import _merge_qkv, rename_dfine_key

_OWN_ENCODER = r"^encoder\.(input_proj|down_conv[12]|bi_fusion_conv|fpn_blocks?|pan_blocks?)\."


def rename_deimv2_key(key: str) -> str | None:
    """Our name for one ``transformers`` DEIMv2 key, ``None`` for its constants.

    Example:
        >>> rename_deimv2_key("model.encoder.fpn_block.csp_rep1.bottlenecks.0.conv1.norm.weight")
        'encoder.fpn_block.csp_rep1.bottlenecks.0.conv1.bn.weight'
        >>> rename_deimv2_key("model.decoder.layers.2.encoder_attn_layer_norm.weight")
        'decoder.layers.2.norm2.weight'
    """
    k = key[len("model."):] if key.startswith("model.") else key
    if re.match(_OWN_ENCODER, k):  # the lite encoder and the ELAN blocks keep transformers' names
        return k.replace(".norm.", ".bn.")
    if m := re.match(r"^conv_encoder\.encoder_input_proj\.(\d+)\.(conv|norm)\.(.*)$", k):  # hybrid (n)
        return f"encoder.input_proj.{m[1]}.{0 if m[2] == 'conv' else 1}.{m[3]}"
    if k.startswith("conv_encoder.") and not k.startswith("conv_encoder.model."):
        raise CheckpointError(f"reference key {key!r}: only the HGNetv2 DEIMv2 sizes convert (not DINOv3's).")
    k = re.sub(r"^conv_encoder\.model\.", "backbone.model.", k)
    k = re.sub(r"^(decoder\.layers\.\d+)\.encoder_attn_layer_norm\.", r"\1.norm2.", k)
    return rename_dfine_key(k)


def convert_deimv2_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *,
                              arch: str = "") -> dict[str, Tensor]:
    """transformers DEIMv2 state dict -> ours (first misfit named)."""
    model_only = {k: v for k, v in src.items() if k.startswith("model.")}
    renamed = rename_all(model_only, rename_deimv2_key)
    merged = _merge_qkv({new: v for new, (_, v) in renamed.items()})
    _fill_shared_box_head(merged, own)
    return fit({k: (k, v) for k, v in merged.items()}, own)


def _fill_shared_box_head(sd: dict[str, Tensor], own: Mapping[str, Tensor]) -> None:
    """The shared box head (``share_bbox_head``) is saved once, under any one layer's index
    (``save_pretrained`` keeps one of the tied copies): give every layer's name that tensor."""
    pat = re.compile(r"^decoder\.dec_bbox_head\.(\d+)\.(.+)$")
    saved: dict[str, Tensor] = {}
    for k, v in sd.items():
        if m := pat.match(k):
            saved.setdefault(m[2], v)
    for k in own:
        if (m := pat.match(k)) and k not in sd and m[2] in saved:
            sd[k] = saved[m[2]]


def match_deimv2(fw: object, *, arch: str) -> tuple[str, int] | None:
    """``(size, nc)`` for a transformers checkpoint of model type ``arch`` (the family's, passed in
    by its ``convert.py``): decoder width and the width of the backbone's first returned stage and
    the encoder kind, looked up in the DEIMv2 size table; None for another model type."""
    from .deimv2_variants import VARIANTS

    if str(getattr(fw, "arch", "")).lower() != arch:
        return None
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    if "model.conv_encoder.spatial_tuning_adapter.stem_conv.conv.weight" in sd:
        raise CheckpointError("this DEIMv2 has a DINOv3 backbone (sizes s..x are not built); "
                              f"sizes: {', '.join(VARIANTS)}.")
    hidden = int(sd["model.enc_score_head.weight"].shape[1])
    lite = "model.encoder.bi_fusion_conv.conv.weight" in sd
    proj = "model.encoder.input_proj.0.conv.weight" if lite else "model.conv_encoder.encoder_input_proj.0.conv.weight"
    c_in = int(sd[proj].shape[1])
    from .hgnetv2 import HGNETV2_ARCH

    for size, v in VARIANTS.items():
        first = HGNETV2_ARCH[v.net.backbone][1][v.net.return_idx[0]].c_out
        if v.net.hidden == hidden and (v.net.encoder == "lite") == lite and first == c_in:
            return size, int(sd["model.enc_score_head.weight"].shape[0])
    raise CheckpointError(f"this DEIMv2 (hidden {hidden}, backbone width {c_in}) matches none of the sizes "
                          f"{', '.join(VARIANTS)}.")
