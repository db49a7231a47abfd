"""BiRefNet checkpoints (the official repository's ``.pth`` state dicts, and the Hugging Face
``ZhengPeng7/BiRefNet*`` ``model.safetensors``, which hold the same keys) onto our network.

Our module names follow the reference's, so a key maps to itself except: the backbone ``bb.*``
lives under ``encoder.bb.*``; ``...attn.relative_position_bias_table`` is
``...attn.rel_pos_bias.table``; the ``relative_position_index`` buffers are recomputed and
dropped. A training checkpoint's ``module.`` / ``_orig_mod.`` prefixes (DDP, ``torch.compile``)
are stripped. Any other key is named in a :class:`CheckpointError`. Only the Swin-backbone
releases map (``swin_v1_l``: size l; ``swin_v1_t``, the ``_lite`` models: size lite); the size is
read from the patch embedding's width.

``LibreYOLO(path)`` reads these files (:mod:`libreyolo.convert.birefnet` recognises them by their
key names); :func:`load_birefnet_weights` loads a state dict into a model built by hand.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all

SOURCES: tuple[str, ...] = ("birefnet",)  # libreyolo.convert.birefnet
WIDTH_TO_SIZE = {96: "lite", 192: "l"}
_TABLE = re.compile(r"bb\.(layers\.\d+\.blocks\.\d+\.attn)\.relative_position_bias_table")
_INDEX = re.compile(r"bb\.layers\.\d+\.blocks\.\d+\.attn\.relative_position_index")
_PREFIX = re.compile(r"^(module\.|_orig_mod\.)+")


def rename_key(k: str) -> str | None:
    """Our name for one reference key (``None``: a recomputed buffer).

    Example:
        >>> rename_key("bb.layers.2.blocks.5.attn.relative_position_bias_table")
        'encoder.bb.layers.2.blocks.5.attn.rel_pos_bias.table'
        >>> rename_key("module.decoder.decoder_block4.dec_att.aspp1.atrous_conv.offset_conv.weight")
        'decoder.decoder_block4.dec_att.aspp1.atrous_conv.offset_conv.weight'
    """
    k = _PREFIX.sub("", k)
    if _INDEX.fullmatch(k):
        return None
    if m := _TABLE.fullmatch(k):
        return f"encoder.bb.{m[1]}.rel_pos_bias.table"
    if k.startswith("bb."):
        return f"encoder.{k}"
    if k.startswith(("decoder.", "squeeze_module.")):
        return k
    raise CheckpointError(f"reference key {k!r} is not part of a Swin-backbone BiRefNet (the auxiliary "
                          "classification head and the PVT / DINOv3 backbones are not supported).")


def size_of(src: Mapping[str, Tensor]) -> str:
    """``"l"`` / ``"lite"`` from the patch embedding's width of a reference state dict."""
    for k, v in src.items():
        if _PREFIX.sub("", k) == "bb.patch_embed.proj.weight":
            size = WIDTH_TO_SIZE.get(int(v.shape[0]))
            if size is None:
                raise CheckpointError(f"a BiRefNet backbone of width {int(v.shape[0])} is not one of ours "
                                      "(96: Swin-T, lite; 192: Swin-L, l)")
            return size
    raise CheckpointError("no 'bb.patch_embed.proj.weight' in the file: not a Swin-backbone BiRefNet state dict")


def match(fw: Any) -> tuple[str, int] | None:
    """``(size, 1)`` for a BiRefNet checkpoint (size from the backbone width: :func:`size_of`)."""
    if fw.source not in SOURCES:
        return None
    return size_of(fw.state_dict), 1


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> ours (first misfit named)."""
    return fit(rename_all(src, rename_key), own)


def load_birefnet_weights(model: Any, src: Mapping[str, Tensor]) -> Any:
    """Load a reference state dict into a BiRefNet family instance of the matching size (in place)."""
    size = size_of(src)
    if size != model.size:
        raise CheckpointError(f"the file is a BiRefNet of size {size!r}; this model is {model.size!r}")
    model.net.load_state_dict(convert_state_dict(src, model.net.state_dict()))
    return model
