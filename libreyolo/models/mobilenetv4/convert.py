"""timm ``mobilenetv4_conv_small`` weights onto our MobileNetV4 (conv_small).

timm nests blocks by stage (``blocks.<stage>.<block>``); ours numbers them flat after the stem
(``features.<n>``, n = 1, 2, ... in stage-then-block order). Inside a block: ``conv``/``bn1`` (plain
conv-BN-ReLU) -> ``0``/``1``; Universal Inverted Bottleneck parts ``dw_start``, ``pw_exp`` ->
``expand``, ``dw_mid``, ``pw_proj`` -> ``project``, each ``conv``/``bn`` -> ``0``/``1``. Stem
``conv_stem``/``bn1`` -> ``features.0.{0,1}``; head ``conv_head``/``norm_head`` -> ``head.{0,1}``;
``classifier`` -> ``classifier``. BatchNorm eps 1e-5 on both sides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import base_arch, fit, rename_all

SOURCES = ("timm",)
ARCHS = {"mobilenetv4_conv_small": "conv_small"}
_PART = {"dw_start": "dw_start", "pw_exp": "expand", "dw_mid": "dw_mid", "pw_proj": "project"}
_TOP = {"conv_stem": "features.0.0", "bn1": "features.0.1", "conv_head": "head.0", "norm_head": "head.1",
        "classifier": "classifier"}


def match(fw: object) -> tuple[str, int] | None:
    size = ARCHS.get(base_arch(str(getattr(fw, "arch", ""))))
    if size is None:
        return None
    return size, int(fw.state_dict["classifier.weight"].shape[0])  # type: ignore[attr-defined]


def _flat_index(src: Mapping[str, Tensor]) -> dict[tuple[int, int], int]:
    pairs = sorted({(int(m[1]), int(m[2])) for k in src if (m := re.match(r"blocks\.(\d+)\.(\d+)\.", k))})
    return {p: i + 1 for i, p in enumerate(pairs)}


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """timm MobileNetV4 state dict -> ours (first misfit named)."""
    flat = _flat_index(src)

    def rename(k: str) -> str:
        if m := re.fullmatch(r"(conv_stem|bn1|conv_head|norm_head|classifier)\.(\w+)", k):
            return f"body.{_TOP[m[1]]}.{m[2]}"
        if m := re.fullmatch(r"blocks\.(\d+)\.(\d+)\.(conv|bn1)\.(\w+)", k):
            return f"body.features.{flat[(int(m[1]), int(m[2]))]}.{0 if m[3] == 'conv' else 1}.{m[4]}"
        if m := re.fullmatch(r"blocks\.(\d+)\.(\d+)\.(dw_start|pw_exp|dw_mid|pw_proj)\.(conv|bn)\.(\w+)", k):
            part = _PART[m[3]]
            return f"body.features.{flat[(int(m[1]), int(m[2]))]}.{part}.{0 if m[4] == 'conv' else 1}.{m[5]}"
        raise CheckpointError(f"reference key {k!r} is not part of a timm MobileNetV4 this converter knows "
                              "(layer scale and attention blocks are not).")

    return fit(rename_all(src, rename), own)
