"""timm ``vit_small_patch16_224`` / ``vit_base_patch16_224`` weights onto our ViT (names: the
lineage converter, :mod:`libreyolo.models._vit.convert`)."""

from __future__ import annotations

from typing import Any

from .._vit.convert import convert_state_dict, match_arch

SOURCES = ("timm",)
ARCHS = {"vit_small_patch16_224": "s16", "vit_base_patch16_224": "b16"}
__all__ = ["SOURCES", "ARCHS", "match", "convert_state_dict"]


def match(fw: Any) -> tuple[str, int] | None:
    return match_arch(fw, ARCHS)
