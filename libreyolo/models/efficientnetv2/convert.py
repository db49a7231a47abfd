"""timm EfficientNetV2 weights onto ours (torchvision ``EfficientNet`` layout): ``efficientnetv2_s``
and ``tf_efficientnetv2_s`` -> size s, ``tf_efficientnetv2_b0`` -> size b0.

Renames: ``conv_stem``/``bn1`` -> ``features.0.{0,1}``; ``blocks.<s>.<b>`` ->
``features.<s+1>.<b>.block``, inside which ``conv``/``conv_exp``/``conv_pw`` -> ``0.0``, ``bn1``
-> ``0.1``, ``conv_dw`` -> ``1.0``, ``bn2`` -> ``1.1``, ``se.conv_reduce``/``se.conv_expand`` ->
``2.fc1``/``2.fc2``, ``conv_pwl`` -> ``1.0`` in a fused block (no depthwise conv) else ``3.0``,
``bn3`` -> ``3.1``; ``conv_head``/``bn2`` -> ``features.<last>.{0,1}``; ``classifier`` ->
``classifier.1``.

BatchNorm eps: ours is 1e-3 (as TF and the ``tf_`` ports); timm's own ``efficientnetv2_s`` uses
1e-5, which is folded into the BatchNorm weights exactly (:func:`~libreyolo.convert.rules.fold_bn_eps`).
Known difference: the ``tf_`` models pad stride-2 convolutions TF-"same" (asymmetric), ours
symmetrically, so ``tf_`` weights load but their outputs differ slightly (a warning says so).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import base_arch, fit, fold_bn_eps, rename_all

logger = logging.getLogger(__name__)

SOURCES = ("timm",)
ARCHS = {"efficientnetv2_s": "s", "tf_efficientnetv2_s": "s", "tf_efficientnetv2_b0": "b0"}
EPS_OURS = 1e-3
_INNER = {"conv": "0.0", "conv_exp": "0.0", "conv_pw": "0.0", "bn1": "0.1", "conv_dw": "1.0", "bn2": "1.1",
          "se.conv_reduce": "2.fc1", "se.conv_expand": "2.fc2", "bn3": "3.1"}


def match(fw: object) -> tuple[str, int] | None:
    size = ARCHS.get(base_arch(str(getattr(fw, "arch", ""))))
    if size is None:
        return None
    return size, int(fw.state_dict["classifier.weight"].shape[0])  # type: ignore[attr-defined]


def reference_bn_eps(arch: str) -> float:
    """BatchNorm eps of a timm EfficientNetV2: 1e-3 for the ``tf_`` ports, 1e-5 otherwise."""
    return 1e-3 if base_arch(arch).startswith("tf_") else 1e-5


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """timm EfficientNetV2 state dict -> ours (first misfit named); ``arch`` sets the source eps."""
    stages = {int(m[1]) for k in src if (m := re.match(r"blocks\.(\d+)\.", k))}
    last = max(stages, default=-1) + 2
    depthwise = {m[1] for k in src if (m := re.match(r"(blocks\.\d+\.\d+)\.conv_dw\.", k))}

    def rename(k: str) -> str:
        if m := re.fullmatch(r"(conv_stem|bn1)\.(\w+)", k):
            return f"body.features.0.{0 if m[1] == 'conv_stem' else 1}.{m[2]}"
        if m := re.fullmatch(r"(conv_head|bn2)\.(\w+)", k):
            return f"body.features.{last}.{0 if m[1] == 'conv_head' else 1}.{m[2]}"
        if m := re.fullmatch(r"classifier\.(\w+)", k):
            return f"body.classifier.1.{m[1]}"
        if m := re.fullmatch(r"(blocks\.(\d+)\.(\d+))\.(conv|conv_exp|conv_pw|conv_dw|conv_pwl|bn1|bn2|bn3|"
                             r"se\.conv_reduce|se\.conv_expand)\.(\w+)", k):
            part = m[4]
            inner = ("3.0" if m[1] in depthwise else "1.0") if part == "conv_pwl" else _INNER[part]
            return f"body.features.{int(m[2]) + 1}.{m[3]}.block.{inner}.{m[5]}"
        raise CheckpointError(f"reference key {k!r} is not part of a timm EfficientNetV2 this converter knows.")

    if base_arch(arch).startswith("tf_"):
        logger.warning("%s pads stride-2 convolutions TF-'same' (asymmetric); libreyolo's EfficientNetV2 pads "
                       "symmetrically, so the converted model's outputs differ slightly from timm's", arch)
    sd = fit(rename_all(src, rename), own)
    return fold_bn_eps(sd, eps_ref=reference_bn_eps(arch or "efficientnetv2_s"), eps_ours=EPS_OURS)
