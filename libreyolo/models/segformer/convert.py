"""transformers ``SegformerForSemanticSegmentation`` weights (``model_type`` ``segformer``) onto ours.

Both spellings of the reference's keys are read: the one ``transformers`` 5 writes
(``segformer.stages.<i>.blocks.<j>.attention.q_proj``...) and the older one of the checkpoints on
the Hub (``segformer.encoder.block.<i>.<j>.attention.self.query``...), which is first brought to
the newer spelling. Then: ``segformer.stages.<i>`` -> ``encoder.stages.<i>`` with
``patch_embeddings.{proj,layer_norm}`` -> ``embed.{conv,norm}``; in a block ``layernorm_before`` /
``layernorm_after`` -> ``norm1`` / ``norm2``, ``attention.{q,k,v,o}_proj`` -> ``attn.{q,k,v,proj}``,
``attention.sequence_reduction.{sequence_reduction,layer_norm}`` -> ``attn.{sr,sr_norm}``,
``mlp.{fc1,dwconv.dwconv,fc2}`` -> ``ffn.{fc1,dw,fc2}``; ``decode_head.linear_projections.<i>.proj``
-> ``head.proj.<i>``, ``linear_fuse`` / ``batch_norm`` / ``classifier`` -> ``head.fuse`` / ``head.bn``
/ ``head.cls``. Every tensor keeps its shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import KeyRule, fit, rename_all, rename_by_rules

SOURCES = ("transformers",)
WIDTHS = {32: "b0", 64: "b1"}  # first-stage width -> size (both have depths 2, 2, 2, 2)
_LEGACY = (  # the Hub checkpoints' spelling -> the transformers 5 spelling
    (r"encoder\.patch_embeddings\.(\d+)\.", r"stages.\1.patch_embeddings."),
    (r"encoder\.block\.(\d+)\.", r"stages.\1.blocks."),
    (r"encoder\.layer_norm\.(\d+)\.", r"stages.\1.layer_norm."),
    (r"attention\.self\.query\.", "attention.q_proj."), (r"attention\.self\.key\.", "attention.k_proj."),
    (r"attention\.self\.value\.", "attention.v_proj."),
    (r"attention\.self\.sr\.", "attention.sequence_reduction.sequence_reduction."),
    (r"attention\.self\.layer_norm\.", "attention.sequence_reduction.layer_norm."),
    (r"attention\.output\.dense\.", "attention.o_proj."), (r"mlp\.dense1\.", "mlp.fc1."), (r"mlp\.dense2\.", "mlp.fc2."),
    (r"\.layer_norm_1\.", ".layernorm_before."), (r"\.layer_norm_2\.", ".layernorm_after."),
    (r"decode_head\.linear_c\.", "decode_head.linear_projections."),
)
_BLOCK = {"layernorm_before": "norm1", "layernorm_after": "norm2", "attention.q_proj": "attn.q",
          "attention.k_proj": "attn.k", "attention.v_proj": "attn.v", "attention.o_proj": "attn.proj",
          "attention.sequence_reduction.sequence_reduction": "attn.sr",
          "attention.sequence_reduction.layer_norm": "attn.sr_norm", "mlp.fc1": "ffn.fc1",
          "mlp.dwconv.dwconv": "ffn.dw", "mlp.fc2": "ffn.fc2"}
_HEAD = {"linear_fuse": "fuse", "batch_norm": "bn", "classifier": "cls"}
_RULES: tuple[KeyRule, ...] = (
    (r"segformer\.stages\.(\d+)\.patch_embeddings\.(proj|layer_norm)\.(\w+)",
     lambda m: f"encoder.stages.{m[1]}.embed.{'conv' if m[2] == 'proj' else 'norm'}.{m[3]}"),
    (r"segformer\.stages\.(\d+)\.blocks\.(\d+)\.([\w.]+)\.(\w+)",
     lambda m: f"encoder.stages.{m[1]}.blocks.{m[2]}.{_BLOCK[m[3]]}.{m[4]}" if m[3] in _BLOCK else None),
    (r"segformer\.stages\.(\d+)\.layer_norm\.(\w+)", lambda m: f"encoder.stages.{m[1]}.norm.{m[2]}"),
    (r"decode_head\.linear_projections\.(\d+)\.proj\.(\w+)", lambda m: f"head.proj.{m[1]}.{m[2]}"),
    (r"decode_head\.(linear_fuse|batch_norm|classifier)\.(\w+)", lambda m: f"head.{_HEAD[m[1]]}.{m[2]}"),
)


def modern_key(k: str) -> str:
    """A reference key in the transformers 5 spelling (older Hub spellings rewritten).

    Example:
        >>> modern_key("segformer.encoder.block.1.0.attention.self.query.weight")
        'segformer.stages.1.blocks.0.attention.q_proj.weight'
    """
    for old, new in _LEGACY:
        k = re.sub(old, new, k)
    return k


def rename_key(k: str) -> str:
    """Our name for one reference key (module docstring).

    Example:
        >>> rename_key("segformer.stages.2.blocks.1.attention.sequence_reduction.layer_norm.bias")
        'encoder.stages.2.blocks.1.attn.sr_norm.bias'
    """
    return rename_by_rules(modern_key(k), _RULES, what="a transformers SegFormer")


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for a transformers SegFormer semantic-segmentation checkpoint, else ``None``."""
    if str(getattr(fw, "arch", "")).lower() != "segformer":
        return None
    sd = {modern_key(k): v for k, v in getattr(fw, "state_dict", {}).items()}
    embed, cls = sd.get("segformer.stages.0.patch_embeddings.proj.weight"), sd.get("decode_head.classifier.weight")
    if embed is None or cls is None:
        raise CheckpointError("this transformers SegFormer has no semantic-segmentation head (decode_head); "
                              "libreyolo reads SegformerForSemanticSegmentation checkpoints")
    depths = tuple(len({k.split(".")[4] for k in sd if k.startswith(f"segformer.stages.{i}.blocks.")})
                   for i in range(4))
    size = WIDTHS.get(int(embed.shape[0]))
    if size is None or depths != (2, 2, 2, 2):
        raise CheckpointError(f"this SegFormer (first width {int(embed.shape[0])}, depths {depths}) is none of the "
                              f"sizes {', '.join(WIDTHS.values())}")
    return size, int(cls.shape[0])


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """transformers SegFormer state dict -> ours (first misfit named)."""
    return fit(rename_all(src, rename_key), own)
