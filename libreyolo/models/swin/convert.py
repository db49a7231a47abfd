"""timm ``swin_tiny_patch4_window7_224`` / ``swin_small_patch4_window7_224`` weights onto our Swin.

Module names follow timm's (both follow the paper's parts), so under the ``body.`` prefix of
:class:`~libreyolo.layers.classify.ImageClassifier` a key maps to itself, except two:
``layers.<i>.blocks.<j>.attn.relative_position_bias_table`` -> ``...attn.rel_pos_bias.table`` and
``head.fc`` -> ``head``. timm's ``relative_position_index`` and ``attn_mask`` buffers (not saved by
recent timm, present in older files) are recomputed here and dropped. Any other key (a checkpoint
of the original repository, with the merge at the end of each stage; Swin V2's ``logit_scale`` or
``cpb_mlp``) is named in a :class:`CheckpointError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import base_arch, fit, rename_all

SOURCES = ("timm",)
ARCHS = {"swin_tiny_patch4_window7_224": "t", "swin_small_patch4_window7_224": "s"}
_SAME = re.compile(r"(patch_embed\.(proj|norm)|norm|layers\.\d+\.downsample\.(norm|reduction)"
                   r"|layers\.\d+\.blocks\.\d+\.(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2))\.(weight|bias)")
_TABLE = re.compile(r"(layers\.\d+\.blocks\.\d+\.attn)\.relative_position_bias_table")
_BUFFER = re.compile(r"layers\.\d+\.blocks\.\d+\.(attn\.relative_position_index|attn_mask)")


def rename_key(k: str) -> str | None:
    """Our name for one timm Swin key (``None``: a recomputed buffer, dropped).

    Example:
        >>> rename_key("layers.2.blocks.5.attn.relative_position_bias_table")
        'body.layers.2.blocks.5.attn.rel_pos_bias.table'
        >>> rename_key("head.fc.weight")
        'body.head.weight'
    """
    if _SAME.fullmatch(k):
        return f"body.{k}"
    if m := _TABLE.fullmatch(k):
        return f"body.{m[1]}.rel_pos_bias.table"
    if m := re.fullmatch(r"head\.fc\.(weight|bias)", k):
        return f"body.head.{m[1]}"
    if _BUFFER.fullmatch(k):
        return None
    raise CheckpointError(f"reference key {k!r} is not part of a timm Swin (V1, window 7) this converter knows.")


def match(fw: Any) -> tuple[str, int] | None:
    """(size, nc) when ``fw.arch`` (pretrained tag and hub prefix stripped) is a Swin this reads."""
    size = ARCHS.get(base_arch(str(getattr(fw, "arch", ""))))
    if size is None:
        return None
    return size, int(fw.state_dict["head.fc.weight"].shape[0])


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """timm Swin state dict -> ours (first misfit named)."""
    return fit(rename_all(src, rename_key), own)
