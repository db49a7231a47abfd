"""transformers ``LwDetrForObjectDetection`` / ``RfDetrForObjectDetection`` state dicts (model types
``lw_detr``, ``rf_detr``) onto our LW-DETR / RF-DETR networks.

Key mapping (transformers 5.x names):

* ``model.backbone.backbone.embeddings``: ``position_embeddings`` -> ``backbone.pos_embed``,
  ``(patch_embeddings.)projection`` -> ``backbone.patch_embed.proj``, ``cls_token`` -> ``backbone.cls_token``
  (``mask_token``, unused at inference and in fine-tuning, is dropped);
* ``encoder.layer.i`` -> ``backbone.blocks.i``: the separate ``q/k/v_proj`` merged into ``attn.qkv``
  (LW-DETR's key projection has no bias: a zero bias, which attention ignores), ``o_proj`` ->
  ``attn.proj``, ``layernorm_before/after`` or ``norm1/2`` -> ``norm1/2``, ``intermediate`` or
  ``mlp`` -> ``mlp``, ``gamma_1/2`` or ``layer_scale1/2.lambda1`` -> ``ls1/2.gamma``;
  ``model.backbone.backbone.layernorm`` -> ``backbone.norm``;
* ``model.backbone.projector.(scale_layers.i.)`` ``projector_layer.conv1/conv2/bottlenecks`` and
  ``layer_norm`` -> ``encoder.(levels.i.)conv1/conv2/blocks`` and ``encoder.(levels.i.)norm``, LW-DETR's
  resampling ``scale_layers.i.sampling_layers.j.layers.k`` -> ``encoder.levels.i.sampling.j.k``
  (a one-level network has no ``levels``: level 0's keys go to ``encoder.*``);
* decoder layers: ``self_attn.q/k/v_proj`` -> ``self_attn.in_proj_*``, ``o_proj`` -> ``out_proj``,
  ``self_attn_layer_norm`` / ``cross_attn_layer_norm`` / ``layer_norm`` -> ``norm1/2/3``,
  ``mlp.fc1/fc2`` -> ``ffn.linear1/2``; ``model.decoder.layernorm`` -> ``decoder.norm``;
* ``model.{enc_output, enc_output_norm, enc_out_*, reference_point_embed, query_feat}``,
  ``class_embed``, ``bbox_embed`` -> ``decoder.*``.

The files ``save_pretrained`` writes use other names (transformers maps them back on save: the
original implementations' layout): ``attention.attention.query/key/value`` and ``attention.output``
(LW-DETR); for RF-DETR the rfdetr package's own names, ``backbone.0.encoder.encoder.*``,
``backbone.0.projector.stages.0.{0,1}`` (``cv1/cv2/m.j``, ``bn``), ``transformer.decoder.*``
(``linear1/2``, ``norm1..3``, fused ``in_proj``), ``transformer.enc_*``, ``refpoint_embed``. They are
first rewritten to the in-memory names (:func:`normalise_key`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from .hf_convert import stack_qkv_and_check

_RULES: tuple[tuple[str, str], ...] = (
    (r"^model\.backbone\.backbone\.embeddings\.position_embeddings$", "backbone.pos_embed"),
    (r"^model\.backbone\.backbone\.embeddings\.(?:patch_embeddings\.)?projection\.", "backbone.patch_embed.proj."),
    (r"^model\.backbone\.backbone\.embeddings\.cls_token$", "backbone.cls_token"),
    (r"^model\.backbone\.backbone\.layernorm\.", "backbone.norm."),
    (r"^model\.backbone\.backbone\.encoder\.layer\.(\d+)\.", r"backbone.blocks.\1."),
    (r"^model\.backbone\.projector\.scale_layers\.(\d+)\.sampling_layers\.(\d+)\.layers\.",
     r"encoder.levels.\1.sampling.\2."),
    (r"^model\.backbone\.projector\.scale_layers\.(\d+)\.projector_layer\.bottlenecks\.", r"encoder.levels.\1.blocks."),
    (r"^model\.backbone\.projector\.scale_layers\.(\d+)\.projector_layer\.", r"encoder.levels.\1."),
    (r"^model\.backbone\.projector\.scale_layers\.(\d+)\.layer_norm\.", r"encoder.levels.\1.norm."),
    (r"^model\.backbone\.projector\.projector_layer\.bottlenecks\.", "encoder.blocks."),
    (r"^model\.backbone\.projector\.projector_layer\.", "encoder."),
    (r"^model\.backbone\.projector\.layer_norm\.", "encoder.norm."),
    (r"^model\.decoder\.layernorm\.", "decoder.norm."),
    (r"^model\.decoder\.", "decoder."),
    (r"^model\.(enc_output|enc_output_norm|enc_out_bbox_embed|enc_out_class_embed|reference_point_embed|query_feat)\.",
     r"decoder.\1."),
    (r"^(class_embed|bbox_embed)\.", r"decoder.\1."),
)
_BLOCK = (("gamma_1", "ls1.gamma"), ("gamma_2", "ls2.gamma"), ("layer_scale1.lambda1", "ls1.gamma"),
          ("layer_scale2.lambda1", "ls2.gamma"), ("layernorm_before.", "norm1."), ("layernorm_after.", "norm2."),
          ("intermediate.", "mlp."), ("attention.o_proj.", "attn.proj."))
_DEC = (("self_attn_layer_norm.", "norm1."), ("cross_attn_layer_norm.", "norm2."), ("layer_norm.", "norm3."),
        ("mlp.fc1.", "ffn.linear1."), ("mlp.fc2.", "ffn.linear2."), ("self_attn.o_proj.", "self_attn.out_proj."))


_SAVED: tuple[tuple[str, str], ...] = (
    (r"^backbone\.0\.encoder\.encoder\.", "model.backbone.backbone."),
    (r"^backbone\.0\.projector\.stages\.0\.1\.", "model.backbone.projector.layer_norm."),
    (r"^backbone\.0\.projector\.stages\.0\.0\.", "model.backbone.projector.projector_layer."),
    (r"^refpoint_embed\.", "model.reference_point_embed."),
    (r"^query_feat\.", "model.query_feat."),
    (r"^transformer\.decoder\.norm\.", "model.decoder.layernorm."),
    (r"^transformer\.", "model."),
)
_SAVED_PARTS = ((".attention.attention.query.", ".attention.q_proj."), (".attention.attention.key.", ".attention.k_proj."),
                (".attention.attention.value.", ".attention.v_proj."), (".attention.output.dense.", ".attention.o_proj."),
                (".attention.output.", ".attention.o_proj."))
_SAVED_PROJ = ((".cv1.", ".conv1."), (".cv2.", ".conv2."), (".bn.", ".norm."))
_SAVED_DEC = ((".linear1.", ".mlp.fc1."), (".linear2.", ".mlp.fc2."), (".norm1.", ".self_attn_layer_norm."),
              (".norm2.", ".cross_attn_layer_norm."), (".norm3.", ".layer_norm."), (".self_attn.out_proj.", ".self_attn.o_proj."))


def normalise_key(key: str) -> str:
    """A saved-file name (module docs) -> the transformers in-memory name; other keys unchanged."""
    for pat, rep in _SAVED:
        key, n = re.subn(pat, rep, key)
        if n:
            break
    for a, b in _SAVED_PARTS:
        key = key.replace(a, b)
    if key.startswith("model.backbone.projector.projector_layer."):
        key = re.sub(r"projector_layer\.m\.", "projector_layer.bottlenecks.", key)
        for a, b in _SAVED_PROJ:
            key = key.replace(a, b)
    elif re.match(r"^model\.decoder\.layers\.\d+\.", key) and ".mlp." not in key and "_layer_norm" not in key:
        for a, b in _SAVED_DEC:
            key = key.replace(a, b)
    return key


def rename_key(key: str) -> str | None:
    """Our name for one reference key (``None``: dropped). q/k/v are merged by :func:`convert_state_dict`."""
    key = normalise_key(key)
    if key.endswith("embeddings.mask_token"):
        return None
    for pat, rep in _RULES:
        new, n = re.subn(pat, rep, key)
        if n:
            break
    else:
        return key
    if new.startswith("backbone.blocks."):
        for a, b in _BLOCK:
            new = new.replace(a, b)
    elif new.startswith("decoder.layers."):
        for a, b in _DEC:
            new = new.replace(a, b)
    return new


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> ours, shapes checked (the first misfit named)."""
    out: dict[str, Tensor] = {}
    qkv: dict[str, dict[str, Tensor]] = {}
    for key, value in src.items():
        new = rename_key(key)
        if new is None:
            continue
        if m := re.match(r"^(backbone\.blocks\.\d+\.)attention\.([qkv])_proj\.(weight|bias)$", new):
            qkv.setdefault(f"{m[1]}attn.qkv.{m[3]}", {})[m[2]] = value
            continue
        if m := re.match(r"^(decoder\.layers\.\d+\.self_attn\.)([qkv])_proj\.(weight|bias)$", new):
            qkv.setdefault(f"{m[1]}in_proj_{m[3]}", {})[m[2]] = value
            continue
        out[new] = value
    if not any(k.startswith("encoder.levels.") for k in own):  # a one-level projector: level 0 is ``encoder``
        out = {re.sub(r"^encoder\.levels\.0\.", "encoder.", k): v for k, v in out.items()}
    return stack_qkv_and_check(out, qkv, own, zero_k_bias=True)  # LW-DETR's key projection has no bias


def structure(sd: Mapping[str, Tensor]) -> dict[str, int]:
    """Counts read from a reference state dict: backbone width (``dim``) / depth, projector levels,
    decoder layers, queries, classes."""
    sd = {normalise_key(k): v for k, v in sd.items()}
    depth = len({int(m[1]) for k in sd if (m := re.match(r"model\.backbone\.backbone\.encoder\.layer\.(\d+)\.", k))})
    dec = len({int(m[1]) for k in sd if (m := re.match(r"model\.decoder\.layers\.(\d+)\.", k))})
    groups = len({int(m[1]) for k in sd if (m := re.match(r"model\.enc_output\.(\d+)\.weight", k))})
    levels = len({int(m[1]) for k in sd if (m := re.match(r"model\.backbone\.projector\.scale_layers\.(\d+)\.", k))})
    pos = sd.get("model.backbone.backbone.embeddings.position_embeddings")
    return dict(depth=depth, dec_layers=dec, groups=groups, levels=max(levels, 1),
                dim=int(pos.shape[-1]) if pos is not None else 0,
                queries=int(sd["model.query_feat.weight"].shape[0]) // max(groups, 1) if "model.query_feat.weight" in sd else 0,
                pos=int(round((pos.shape[1] - 1) ** 0.5)) if pos is not None else 0,
                nc=int(sd["class_embed.weight"].shape[0]) if "class_embed.weight" in sd else 0)
