"""timm ``resnet18`` / ``resnet50`` weights onto our ResNet (torchvision layout, same tensor
names: ``conv1``, ``bn1``, ``layer<i>.<j>.*``, ``fc``), under the classifier's ``body.`` prefix.
Both are the "v1.5" ResNet (stride on the 3x3 conv), BatchNorm eps 1e-5 on both sides."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from .._base.convert_rules import base_arch, fit, rename_all

SOURCES = ("timm",)
ARCHS = {"resnet18": "18", "resnet50": "50"}


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for a timm ``resnet18`` / ``resnet50`` checkpoint, else ``None``."""
    size = ARCHS.get(base_arch(str(getattr(fw, "arch", ""))))
    if size is None:
        return None
    return size, int(fw.state_dict["fc.weight"].shape[0])  # type: ignore[attr-defined]


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """timm ResNet state dict -> ours (names checked, first misfit named)."""
    return fit(rename_all(src, lambda k: f"body.{k}"), own)
