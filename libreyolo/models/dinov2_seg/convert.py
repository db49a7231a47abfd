"""DINOv2's published linear segmentation heads (``dinov2_vit{s,b,l}14_{ade20k,voc2012}_{linear,ms}_head.pth``)
with their trunk (``dinov2_vit{s,b,l}14_pretrain.pth``) onto :mod:`.nn`.

The head files hold only the head, as mmsegmentation saves it: ``decode_head.bn.{weight, bias,
running_mean, running_var, num_batches_tracked}`` and ``decode_head.conv_seg.{weight, bias}``
(under ``"state_dict"``); the reader (:mod:`libreyolo.convert.dinov2_seg`) adds the trunk's
tensors from the backbone file beside it, under their own names (those of timm: ``cls_token``,
``pos_embed``, ``patch_embed.proj``, ``blocks.<i>.{norm1, attn.qkv, attn.proj, ls1.gamma, norm2,
mlp.fc1, mlp.fc2, ls2.gamma}``, ``norm``; an mmsegmentation whole-model file has them under
``backbone.``). The trunk keys become ``backbone.<name>``, the head's ``head.{bn, conv_seg}``; the
mask token (DINOv2's masked-image pretraining) is dropped. The size is read from the trunk width,
the head kind (last block or last four) from the BatchNorm width, the class count from
``conv_seg``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all
from .nn import SPECS

SOURCES = ("dinov2_seg",)
_TRUNK = re.compile(r"(cls_token|pos_embed|patch_embed\.proj\.(weight|bias)|norm\.(weight|bias)"
                    r"|blocks\.\d+\.(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.(weight|bias)"
                    r"|blocks\.\d+\.ls[12]\.gamma)")
_HEAD = re.compile(r"decode_head\.(bn\.(weight|bias|running_mean|running_var|num_batches_tracked)"
                   r"|conv_seg\.(weight|bias))")


def rename_key(k: str) -> str | None:
    """Our name for one reference key (module docstring); ``None`` for a key that is dropped.

    Example:
        >>> rename_key("blocks.11.ls2.gamma"), rename_key("backbone.norm.bias")
        ('backbone.blocks.11.ls2.gamma', 'backbone.norm.bias')
        >>> rename_key("decode_head.conv_seg.weight"), rename_key("mask_token")
        ('head.conv_seg.weight', None)
    """
    k = k.removeprefix("backbone.")
    if k == "mask_token":
        return None
    if _TRUNK.fullmatch(k):
        return f"backbone.{k}"
    if _HEAD.fullmatch(k):
        return k.replace("decode_head.", "head.", 1)
    raise CheckpointError(f"reference key {k!r} is not part of a DINOv2 linear segmenter this converter knows "
                          "(no register tokens, no SwiGLU MLP, no other decode head).")


def layout(sd: Mapping[str, Tensor]) -> tuple[str, int]:
    """``(size, nc)`` of a merged trunk + head state dict (module docstring), else a CheckpointError.

    Example:
        >>> import torch
        >>> sd = {"cls_token": torch.zeros(1, 1, 384), "decode_head.bn.weight": torch.zeros(1536),
        ...       "decode_head.conv_seg.weight": torch.zeros(21, 1536, 1, 1)}
        >>> sd.update({f"blocks.{i}.ls1.gamma": torch.zeros(384) for i in range(12)})  # 12 blocks: ViT-S/14
        >>> layout(sd)
        ('s14ms', 21)
    """
    sd = {k.removeprefix("backbone."): v for k, v in sd.items()}
    cls, bn, conv = sd.get("cls_token"), sd.get("decode_head.bn.weight"), sd.get("decode_head.conv_seg.weight")
    if cls is None or bn is None or conv is None:
        missing = [n for n, t in (("cls_token", cls), ("decode_head.bn.weight", bn),
                                  ("decode_head.conv_seg.weight", conv)) if t is None]
        raise CheckpointError(f"not a DINOv2 trunk + linear head: {', '.join(missing)} missing")
    dim, width = int(cls.shape[-1]), int(bn.shape[0])
    for size, spec in SPECS.items():
        if spec.vit.dim == dim and spec.vit.dim * spec.layers == width:
            depth = 1 + max((int(m.group(1)) for k in sd if (m := re.match(r"blocks\.(\d+)\.", k))), default=-1)
            if depth != spec.vit.depth:
                continue
            return size, int(conv.shape[0])
    raise CheckpointError(f"no DINOv2 segmenter has a {dim}-wide trunk with a {width}-channel head "
                          f"(sizes: {', '.join(SPECS)})")


def match(fw: Any) -> tuple[str, int] | None:
    """``(size, nc)`` of a reader's merged state dict (module docstring), ``None`` for another source."""
    if getattr(fw, "source", None) not in SOURCES:
        return None
    return layout(fw.state_dict)


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Merged reference state dict -> ours (first misfit named; module docstring)."""
    return fit(rename_all(src, rename_key), own)
