"""Official SwinIR checkpoints (JingyunLiang/SwinIR, e.g. ``002_lightweightSR_DIV2K_s64w8_SwinIR-S_x2.pth``)
onto ours.

The reference -> ours: ``conv_first`` -> ``stem``, ``patch_embed.norm`` -> ``embed_norm``,
``layers.<i>.residual_group.blocks.<j>.<part>`` -> ``layers.<i>.blocks.<j>.<part>`` (``norm1``,
``attn.qkv``, ``attn.proj``, ``norm2``, ``mlp.fc1``, ``mlp.fc2`` keep their names;
``attn.relative_position_bias_table`` -> ``attn.rel_pos_bias.table``), ``layers.<i>.conv`` ->
``layers.<i>.conv``, ``norm`` -> ``norm``, ``conv_after_body`` -> ``body_conv``, ``upsample.0``
-> ``upsample``. The buffers ``relative_position_index`` and ``attn_mask`` are recomputed here and
dropped. Only the lightweight "pixelshuffledirect" layout reads: a classical-SR (``conv_before_upsample``),
real-SR or denoising checkpoint is refused with a message naming what it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all
from .nn import SPECS

SOURCES = ("basicsr",)
_TOP = {"conv_first": "stem", "patch_embed.norm": "embed_norm", "norm": "norm", "conv_after_body": "body_conv",
        "upsample.0": "upsample"}
_BLOCK = re.compile(r"layers\.(\d+)\.residual_group\.blocks\.(\d+)\."
                    r"(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.(weight|bias)")
_TABLE = re.compile(r"layers\.(\d+)\.residual_group\.blocks\.(\d+)\.attn\.relative_position_bias_table")
_BUFFER = re.compile(r"layers\.\d+\.residual_group\.blocks\.\d+\.(attn\.relative_position_index|attn_mask)")


def rename_key(k: str) -> str | None:
    """Our name for one reference key (``None``: a recomputed buffer, dropped).

    Example:
        >>> rename_key("layers.3.residual_group.blocks.5.attn.relative_position_bias_table")
        'layers.3.blocks.5.attn.rel_pos_bias.table'
        >>> rename_key("conv_after_body.weight"), rename_key("upsample.0.bias"), rename_key("layers.0.conv.weight")
        ('body_conv.weight', 'upsample.bias', 'layers.0.conv.weight')
    """
    if m := re.fullmatch(r"(.+)\.(weight|bias)", k):
        if m[1] in _TOP:
            return f"{_TOP[m[1]]}.{m[2]}"
    if m := _BLOCK.fullmatch(k):
        return f"layers.{m[1]}.blocks.{m[2]}.{m[3]}.{m[4]}"
    if m := _TABLE.fullmatch(k):
        return f"layers.{m[1]}.blocks.{m[2]}.attn.rel_pos_bias.table"
    if m := re.fullmatch(r"layers\.(\d+)\.conv\.(weight|bias)", k):
        return f"layers.{m[1]}.conv.{m[2]}"
    if _BUFFER.fullmatch(k):
        return None
    raise CheckpointError(f"reference key {k!r} is not part of a lightweight SwinIR this converter knows.")


def size_of(sd: Mapping[str, Tensor]) -> str:
    """The size (:data:`~.nn.SPECS`) of an official SwinIR state dict, from its layout."""
    if "conv_before_upsample.0.weight" in sd:
        raise CheckpointError("this SwinIR is a classical / real-world SR model (upsampler 'pixelshuffle' or "
                              "'nearest+conv'); libreyolo's swinir is the lightweight one ('pixelshuffledirect')")
    if "upsample.0.weight" not in sd:
        raise CheckpointError("this SwinIR has no 'upsample.0' (a denoising or JPEG model, scale 1); libreyolo's "
                              "swinir is the lightweight super-resolution one")
    dim = int(sd["conv_first.weight"].shape[0])
    scale = int(round((int(sd["upsample.0.weight"].shape[0]) / 3) ** 0.5))
    layers = sorted({int(m[1]) for k in sd if (m := re.match(r"layers\.(\d+)\.residual_group\.blocks\.", k))})
    depths = tuple(len({m[1] for k in sd if (m := re.match(rf"layers\.{i}\.residual_group\.blocks\.(\d+)\.", k))})
                   for i in layers)
    heads = tuple(int(sd[f"layers.{i}.residual_group.blocks.0.attn.relative_position_bias_table"].shape[1])
                  for i in layers)
    window = int(round(int(sd["layers.0.residual_group.blocks.0.attn.relative_position_bias_table"].shape[0]) ** 0.5
                       + 1) // 2)
    for size, spec in SPECS.items():
        if (spec.dim, spec.depths, spec.heads, spec.window, spec.scale) == (dim, depths, heads, window, scale):
            return size
    known = "; ".join(f"{s}: width {p.dim}, depths {p.depths}, window {p.window}, x{p.scale}" for s, p in SPECS.items())
    raise CheckpointError(f"this SwinIR (width {dim}, depths {depths}, heads {heads}, window {window}, x{scale}) is "
                          f"none of the sizes ({known})")


def match(fw: object) -> tuple[str, int] | None:
    """``(size, 1)`` for an official SwinIR checkpoint, else ``None``."""
    if str(getattr(fw, "arch", "")) != "swinir":
        return None
    return size_of(getattr(fw, "state_dict", {})), 1


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Official SwinIR state dict -> ours (first misfit named)."""
    return fit(rename_all(src, rename_key), own)
