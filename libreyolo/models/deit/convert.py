"""timm ``deit_tiny_patch16_224`` / ``deit_small_patch16_224`` weights onto our DeiT (names: the
lineage converter, :mod:`libreyolo.models._vit.convert`). The distilled variants carry a
distillation token and a second head, which this network does not have: they match no family."""

from __future__ import annotations

from typing import Any

from .._vit.convert import convert_state_dict, match_arch

SOURCES = ("timm",)
ARCHS = {"deit_tiny_patch16_224": "t", "deit_small_patch16_224": "s"}
__all__ = ["SOURCES", "ARCHS", "match", "convert_state_dict"]


def match(fw: Any) -> tuple[str, int] | None:
    return match_arch(fw, ARCHS)
