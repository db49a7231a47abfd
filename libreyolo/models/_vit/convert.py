"""timm ``VisionTransformer`` tensor names onto :class:`~libreyolo.models._vit.net.VisionTransformer`.

Our module names follow the paper's parts as timm's do, so a key maps to itself under the
``body.`` prefix of :class:`~libreyolo.layers.classify.ImageClassifier`: ``cls_token``,
``pos_embed``, ``patch_embed.proj``, ``blocks.<i>.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1,
mlp.fc2, ls1.gamma, ls2.gamma}``, ``norm``, ``head``. Any other key (a distillation token, a
pooling head) is not part of this network and is named in a :class:`CheckpointError`;
layer-scale and register-token (``reg_token``) tensors are known names but fit only a spec with
``layer_scale`` / ``registers`` (:func:`fit` names them otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import base_arch, fit, rename_all

_KEY = re.compile(r"(cls_token|reg_token|pos_embed|patch_embed\.proj\.(weight|bias)|norm\.(weight|bias)|head\.(weight|bias)"
                  r"|blocks\.\d+\.(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.(weight|bias)"
                  r"|blocks\.\d+\.ls[12]\.gamma)")


def rename_key(k: str) -> str:
    """Our name for one timm ViT key.

    Example:
        >>> rename_key("blocks.3.attn.qkv.weight")
        'body.blocks.3.attn.qkv.weight'
    """
    if _KEY.fullmatch(k):
        return f"body.{k}"
    raise CheckpointError(f"reference key {k!r} is not part of a plain timm ViT this converter knows "
                          "(no distillation token, no pooling head).")


def match_arch(fw: Any, archs: Mapping[str, str]) -> tuple[str, int] | None:
    """(size, nc) when ``fw.arch`` (pretrained tag and hub prefix stripped) is in ``archs``."""
    size = archs.get(base_arch(str(getattr(fw, "arch", ""))))
    if size is None:
        return None
    return size, int(fw.state_dict["head.weight"].shape[0])


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """timm ViT state dict -> ours (first misfit named)."""
    return fit(rename_all(src, rename_key), own)
