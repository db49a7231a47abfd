"""Hugging Face ``transformers`` RT-DETR / RT-DETRv2 weights (``RTDetrForObjectDetection``,
``RTDetrV2ForObjectDetection``) onto the shared :class:`~.net.EncoderDecoderDetector`; the
``rtdetr`` and ``rtdetrv2`` families' ``convert.py`` say which checkpoints are theirs.

Renames (``model.`` prefix dropped): backbone ``embedder.embedder.<i>`` -> ``backbone.stem.<i>``,
``encoder.stages.<s>.layers.<j>`` -> ``backbone.stages.<s>.<j>`` with ``layer.{0,1,2}`` ->
``branch2{a,b,c}``, ``shortcut[.1]`` -> ``short.conv``, ``convolution``/``normalization`` ->
``conv``/``bn``; ``encoder_input_proj`` -> ``encoder.input_proj``; AIFI ``encoder.aifi.<i>.layers.<j>``
-> ``encoder.encoder.<i>.<j>``; ``norm`` -> ``bn`` in the encoder's conv blocks; the query
selection (``enc_output``, ``enc_score_head``, ``enc_bbox_head``, ``denoising_class_embed``,
``decoder_input_proj``) moves under ``decoder.``; ``class_embed``/``bbox_embed`` ->
``dec_score_head``/``dec_bbox_head``. Attention: separate ``q/k/v_proj`` are stacked into
``in_proj_weight``/``in_proj_bias`` (q, k, v order), ``o_proj`` -> ``out_proj``,
``encoder_attn`` -> ``cross_attn``; layer norms ``self_attn_layer_norm``,
``encoder_attn_layer_norm``, ``final_layer_norm`` -> ``norm1``, ``norm2``, ``norm2``/``norm3``
(encoder/decoder) and ``mlp.fc{1,2}`` -> ``linear{1,2}``. The older names that the Hub's files
(and ``save_pretrained``) use — ``encoder.encoder.<i>.layers``, ``fc1``/``fc2``,
``self_attn.out_proj`` — are read too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all

_BACKBONE_DEPTHS = {(2, 2, 2, 2): 18, (3, 4, 6, 3): 34}  # basic blocks; bottleneck (3, 4, 6, 3) is 50

# names of the files on the Hub (and of save_pretrained) -> the in-memory names of transformers 5
_LEGACY: list[tuple[str, str]] = [
    (r"^encoder\.encoder\.(\d+)\.layers\.", r"encoder.aifi.\1.layers."),
    (r"(layers\.\d+)\.fc([12])\.", r"\1.mlp.fc\2."),
    (r"\.self_attn\.out_proj\.", ".self_attn.o_proj."),
]
_SUBS: list[tuple[str, str]] = [
    (r"^backbone\.model\.embedder\.embedder\.(\d+)\.", r"backbone.stem.\1."),
    (r"^backbone\.model\.encoder\.stages\.(\d+)\.layers\.(\d+)\.layer\.0\.", r"backbone.stages.\1.\2.branch2a."),
    (r"^backbone\.model\.encoder\.stages\.(\d+)\.layers\.(\d+)\.layer\.1\.", r"backbone.stages.\1.\2.branch2b."),
    (r"^backbone\.model\.encoder\.stages\.(\d+)\.layers\.(\d+)\.layer\.2\.", r"backbone.stages.\1.\2.branch2c."),
    (r"^backbone\.model\.encoder\.stages\.(\d+)\.layers\.(\d+)\.shortcut\.(1\.)?", r"backbone.stages.\1.\2.short.conv."),
    (r"^encoder_input_proj\.", "encoder.input_proj."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.self_attn\.o_proj\.", r"encoder.encoder.\1.\2.self_attn.out_proj."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.self_attn\.([qkv]_proj)\.", r"encoder.encoder.\1.\2.self_attn.\3."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.self_attn_layer_norm\.", r"encoder.encoder.\1.\2.norm1."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.final_layer_norm\.", r"encoder.encoder.\1.\2.norm2."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.mlp\.fc(\d)\.", r"encoder.encoder.\1.\2.linear\3."),
    (r"^(enc_output|enc_score_head|enc_bbox_head|denoising_class_embed)\.", r"decoder.\1."),
    (r"^decoder_input_proj\.", "decoder.input_proj."),
    (r"^decoder\.layers\.(\d+)\.self_attn\.o_proj\.", r"decoder.layers.\1.self_attn.out_proj."),
    (r"^decoder\.layers\.(\d+)\.self_attn\.([qkv]_proj)\.", r"decoder.layers.\1.self_attn.\2."),
    (r"^decoder\.layers\.(\d+)\.self_attn_layer_norm\.", r"decoder.layers.\1.norm1."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.", r"decoder.layers.\1.norm2."),
    (r"^decoder\.layers\.(\d+)\.final_layer_norm\.", r"decoder.layers.\1.norm3."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn\.", r"decoder.layers.\1.cross_attn."),
    (r"^decoder\.layers\.(\d+)\.mlp\.fc(\d)\.", r"decoder.layers.\1.linear\2."),
    (r"^decoder\.class_embed\.", "decoder.dec_score_head."),
    (r"^decoder\.bbox_embed\.", "decoder.dec_bbox_head."),
]


def rename_key(key: str) -> str:
    """Our name for one ``transformers`` RT-DETR key (q/k/v projections are merged elsewhere).

    Example:
        >>> rename_key("model.decoder.layers.2.encoder_attn.value_proj.weight")
        'decoder.layers.2.cross_attn.value_proj.weight'
    """
    k = key[len("model."):] if key.startswith("model.") else key
    for pat, rep in _LEGACY:
        k = re.sub(pat, rep, k)
    for pat, rep in _SUBS:
        new, n = re.subn(pat, rep, k)
        if n:
            k = new
            break
    else:
        if not k.startswith(("encoder.lateral_convs.", "encoder.fpn_blocks.", "encoder.pan_blocks.",
                             "encoder.downsample_convs.", "decoder.query_pos_head.")):
            raise CheckpointError(f"reference key {key!r} is not part of a transformers RT-DETR this "
                                  "converter knows.")
    k = k.replace(".convolution.", ".conv.").replace(".normalization.", ".bn.")
    if k.startswith("encoder.") and not k.startswith("encoder.encoder."):
        k = k.replace(".norm.", ".bn.")
    return k


def _merge_qkv(src: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Stack every ``<p>.q_proj``/``k_proj``/``v_proj`` into ``<p>.in_proj_weight``/``in_proj_bias``."""
    out: dict[str, Tensor] = {}
    pending: dict[tuple[str, str], dict[str, Tensor]] = {}
    for k, v in src.items():
        m = re.fullmatch(r"(.*)\.([qkv])_proj\.(weight|bias)", k)
        if m and ("self_attn" in m[1]):
            pending.setdefault((m[1], m[3]), {})[m[2]] = v
        else:
            out[k] = v
    for (prefix, kind), parts in pending.items():
        if set(parts) != {"q", "k", "v"}:
            raise CheckpointError(f"reference attention {prefix!r} lacks its {sorted({'q', 'k', 'v'} - set(parts))} "
                                  "projection.")
        out[f"{prefix}.in_proj_{kind}"] = torch.cat([parts["q"], parts["k"], parts["v"]], 0)
    return out


def stack_qkv_and_check(out: dict[str, Tensor], qkv: Mapping[str, dict[str, Tensor]], own: Mapping[str, Tensor], *,
                        zero_k_bias: bool = False) -> dict[str, Tensor]:
    """``out`` with each ``in_proj_*`` of ``qkv`` (``{key: {"q"|"k"|"v": tensor}}``) stacked q, k, v,
    then checked against ``own``: every tensor has a place of its shape and nothing of ``own`` is
    missing. ``zero_k_bias``: a bias with only q and v (a key projection without bias) gets zeros.

    Example:
        >>> t = torch.ones(2)
        >>> sorted(stack_qkv_and_check({}, {"a.in_proj_bias": {"q": t, "v": t}}, {"a.in_proj_bias": torch.ones(6)},
        ...                            zero_k_bias=True))
        ['a.in_proj_bias']
    """
    for key, parts in qkv.items():
        if zero_k_bias and key.endswith("bias") and set(parts) == {"q", "v"}:
            parts["k"] = torch.zeros_like(parts["q"])
        if set(parts) != {"q", "k", "v"}:
            raise CheckpointError(f"'{key}': the reference has only the {sorted(parts)} projections")
        out[key] = torch.cat([parts["q"], parts["k"], parts["v"]], 0)
    for key, value in out.items():
        if key not in own:
            raise CheckpointError(f"reference tensor for '{key}' has no place in this network")
        if tuple(own[key].shape) != tuple(value.shape):
            raise CheckpointError(f"'{key}': reference shape {tuple(value.shape)} vs ours {tuple(own[key].shape)}")
    missing = [k for k in own if k not in out]
    if missing:
        raise CheckpointError(f"the reference has no tensor for '{missing[0]}' ({len(missing)} missing)")
    return out


def match_size(fw: object, *, model_types: tuple[str, ...], variants: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw``'s ``model_type`` is one of ``model_types``: backbone depth and
    decoder layers are read from its tensors and looked up in ``variants`` (``size -> .net``)."""
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    arch = str(getattr(fw, "arch", "")).lower()
    if arch not in model_types:
        return None
    stages: dict[int, set[int]] = {}
    bottleneck = False
    for k in sd:
        if m := re.match(r"model\.backbone\.model\.encoder\.stages\.(\d+)\.layers\.(\d+)\.layer\.(\d+)\.", k):
            stages.setdefault(int(m[1]), set()).add(int(m[2]))
            bottleneck |= m[3] == "2"
    if not stages:
        return None
    counts = tuple(len(stages[s]) for s in sorted(stages))
    depth = 50 if bottleneck and counts == (3, 4, 6, 3) else (None if bottleneck else _BACKBONE_DEPTHS.get(counts))
    layers = len({int(m[1]) for k in sd if (m := re.match(r"model\.decoder\.layers\.(\d+)\.", k))})
    for size, v in variants.items():
        if v.net.depth == depth and v.net.dec_layers == layers:
            return size, int(sd["model.enc_score_head.weight"].shape[0])
    raise CheckpointError(f"this {arch} (ResNet-vd depth {depth}, {layers} decoder layers) matches none of "
                          f"the sizes {', '.join(variants)}.")


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """transformers RT-DETR state dict -> ours (first misfit named). Tied duplicates outside
    ``model.`` (the top-level ``class_embed``/``bbox_embed`` aliases) are dropped."""
    # n_points_scale (RT-DETRv2): the constant 1 / points-per-level that our attention derives itself
    model_only = {k: v for k, v in src.items() if k.startswith("model.") and not k.endswith(".n_points_scale")}
    renamed = rename_all(model_only, rename_key)
    merged = _merge_qkv({new: v for new, (_, v) in renamed.items()})
    return fit({k: (k, v) for k, v in merged.items()}, own)


# ---------------------------------------------------------------------------------- D-FINE
# transformers ``DFineForObjectDetection`` (HGNetv2 backbone, CSP-ELAN encoder, FDR decoder)
_DFINE_LEGACY = _LEGACY[:1] + [(r"\.self_attn\.out_proj\.", ".self_attn.o_proj.")]
_DFINE_SUBS: list[tuple[str, str]] = [
    (r"^backbone\.model\.embedder\.(\w+)\.convolution\.", r"backbone.stem.\1.conv.conv."),
    (r"^backbone\.model\.embedder\.(\w+)\.normalization\.", r"backbone.stem.\1.conv.bn."),
    (r"^backbone\.model\.embedder\.(\w+)\.lab\.", r"backbone.stem.\1.lab."),
    (r"^backbone\.model\.encoder\.stages\.(\d+)\.(.*)\.conv([12])\.convolution\.",
     lambda m: f"backbone.stages.{m[1]}.{m[2]}.{int(m[3]) - 1}.conv.conv."),
    (r"^backbone\.model\.encoder\.stages\.(\d+)\.(.*)\.conv([12])\.normalization\.",
     lambda m: f"backbone.stages.{m[1]}.{m[2]}.{int(m[3]) - 1}.conv.bn."),
    (r"^backbone\.model\.encoder\.stages\.(\d+)\.(.*)\.conv([12])\.lab\.",
     lambda m: f"backbone.stages.{m[1]}.{m[2]}.{int(m[3]) - 1}.lab."),
    (r"^backbone\.model\.encoder\.stages\.(\d+)\.(.*)\.convolution\.", r"backbone.stages.\1.\2.conv.conv."),
    (r"^backbone\.model\.encoder\.stages\.(\d+)\.(.*)\.normalization\.", r"backbone.stages.\1.\2.conv.bn."),
    (r"^backbone\.model\.encoder\.stages\.(\d+)\.(.*)\.lab\.", r"backbone.stages.\1.\2.lab."),
    (r"^encoder_input_proj\.", "encoder.input_proj."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.self_attn\.o_proj\.", r"encoder.encoder.\1.\2.self_attn.out_proj."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.self_attn\.([qkv]_proj)\.", r"encoder.encoder.\1.\2.self_attn.\3."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.self_attn_layer_norm\.", r"encoder.encoder.\1.\2.norm1."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.final_layer_norm\.", r"encoder.encoder.\1.\2.norm2."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.mlp\.layers\.([01])\.",
     lambda m: f"encoder.encoder.{m[1]}.{m[2]}.linear{int(m[3]) + 1}."),
    (r"^encoder\.aifi\.(\d+)\.layers\.(\d+)\.fc([12])\.", r"encoder.encoder.\1.\2.linear\3."),
    (r"^encoder\.(fpn|pan)_blocks\.(\d+)\.conv1\.", r"encoder.\1_blocks.\2.cv1."),
    (r"^encoder\.(fpn|pan)_blocks\.(\d+)\.csp_rep1\.", r"encoder.\1_blocks.\2.cv2.0."),
    (r"^encoder\.(fpn|pan)_blocks\.(\d+)\.conv2\.", r"encoder.\1_blocks.\2.cv2.1."),
    (r"^encoder\.(fpn|pan)_blocks\.(\d+)\.csp_rep2\.", r"encoder.\1_blocks.\2.cv3.0."),
    (r"^encoder\.(fpn|pan)_blocks\.(\d+)\.conv3\.", r"encoder.\1_blocks.\2.cv3.1."),
    (r"^encoder\.(fpn|pan)_blocks\.(\d+)\.conv4\.", r"encoder.\1_blocks.\2.cv4."),
    (r"^encoder\.downsample_convs\.(\d+)\.conv([12])\.", r"encoder.downsample_convs.\1.cv\2."),
    (r"^(enc_output|enc_score_head|enc_bbox_head|denoising_class_embed)\.", r"decoder.\1."),
    (r"^decoder_input_proj\.", "decoder.input_proj."),
    (r"^decoder\.layers\.(\d+)\.self_attn\.o_proj\.", r"decoder.layers.\1.self_attn.out_proj."),
    (r"^decoder\.layers\.(\d+)\.self_attn\.([qkv]_proj)\.", r"decoder.layers.\1.self_attn.\2."),
    (r"^decoder\.layers\.(\d+)\.self_attn_layer_norm\.", r"decoder.layers.\1.norm1."),
    (r"^decoder\.layers\.(\d+)\.final_layer_norm\.", r"decoder.layers.\1.norm3."),
    (r"^decoder\.layers\.(\d+)\.encoder_attn\.", r"decoder.layers.\1.cross_attn."),
    (r"^decoder\.layers\.(\d+)\.mlp\.layers\.([01])\.", lambda m: f"decoder.layers.{m[1]}.linear{int(m[2]) + 1}."),
    (r"^decoder\.layers\.(\d+)\.fc([12])\.", r"decoder.layers.\1.linear\2."),
    (r"^decoder\.class_embed\.", "decoder.dec_score_head."),
    (r"^decoder\.bbox_embed\.", "decoder.dec_bbox_head."),
]
# constants of the reference that our network computes: reg_scale, up, 1 / points per level
_DFINE_DROP = (r"^decoder\.(reg_scale|up)$", r"\.num_points_scale$", r"\.n_points_scale$")


def rename_dfine_key(key: str) -> str | None:
    """Our name for one ``transformers`` D-FINE key, ``None`` for its constants.

    Example:
        >>> rename_dfine_key("model.encoder.fpn_blocks.0.csp_rep2.bottlenecks.1.conv1.norm.weight")
        'encoder.fpn_blocks.0.cv3.0.bottlenecks.1.conv1.bn.weight'
    """
    k = key[len("model."):] if key.startswith("model.") else key
    if any(re.search(p, k) for p in _DFINE_DROP):
        return None
    for pat, rep in _DFINE_LEGACY:
        k = re.sub(pat, rep, k)
    for pat, rep in _DFINE_SUBS:
        new, n = re.subn(pat, rep, k)
        if n:
            k = new
            break
    else:
        if not k.startswith(("encoder.lateral_convs.", "decoder.query_pos_head.", "decoder.pre_bbox_head.",
                             "decoder.lqe_layers.", "decoder.layers.")):
            raise CheckpointError(f"reference key {key!r} is not part of a transformers D-FINE this converter knows.")
    if k.startswith("encoder.") and not k.startswith("encoder.encoder."):
        k = k.replace(".norm.", ".bn.")
    return k


def convert_dfine_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *,
                             arch: str = "") -> dict[str, Tensor]:
    """transformers D-FINE state dict -> ours (first misfit named); the top-level
    ``class_embed``/``bbox_embed`` aliases of the decoder's heads are dropped."""
    model_only = {k: v for k, v in src.items() if k.startswith("model.")}
    renamed = rename_all(model_only, rename_dfine_key)
    merged = _merge_qkv({new: v for new, (_, v) in renamed.items()})
    return fit({k: (k, v) for k, v in merged.items()}, own)


def match_dfine(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for a transformers D-FINE checkpoint (``model_type`` ``d_fine``): hidden width
    and number of feature levels from its tensors, looked up in the D-FINE size table."""
    from .dfine_variants import VARIANTS

    if str(getattr(fw, "arch", "")).lower() != "d_fine":
        return None
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    hidden = int(sd["model.enc_score_head.weight"].shape[1])
    levels = len({m[1] for k in sd if (m := re.match(r"model\.encoder_input_proj\.(\d+)\.", k))})
    for size, v in VARIANTS.items():
        if v.net.hidden == hidden and len(v.net.return_idx) == levels:
            return size, int(sd["model.enc_score_head.weight"].shape[0])
    raise CheckpointError(f"this D-FINE (hidden {hidden}, {levels} feature levels) matches none of the sizes "
                          f"{', '.join(VARIANTS)}.")
