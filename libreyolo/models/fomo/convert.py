"""torchvision ``mobilenet_v2`` weights onto FOMO's backbone (ImageNet-pretrained start).

torchvision's ``features.0`` is our ``backbone.stem``; ``features.1`` (expansion 1) is
``backbone.blocks.0`` with ``conv.0`` -> ``dw`` and ``conv.1`` / ``conv.2`` -> ``project``;
``features.k`` for k = 2..6 is ``backbone.blocks.<k-1>`` with ``conv.0`` -> ``expand``,
``conv.1`` -> ``dw``, ``conv.2`` / ``conv.3`` -> ``project``; ``features.7.conv.0`` (the
expansion of the first stride-16 block) is ``backbone.cut``. In each conv-BN pair the conv is
``.conv`` and the BatchNorm ``.bn``. Every other torchvision key (later blocks, the classifier)
is dropped and the head keeps its initialisation. Both networks standardise alike (ImageNet mean
/ std; ours inside the network), BatchNorm eps is 1e-5 in both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor, nn

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all

_PAIR = {"0": "conv", "1": "bn"}


def rename_key(k: str) -> str | None:
    """Our backbone key for a torchvision ``mobilenet_v2`` key, or ``None`` (dropped).

    Example:
        >>> rename_key("features.3.conv.1.0.weight"), rename_key("features.1.conv.2.running_var")
        ('backbone.blocks.2.dw.conv.weight', 'backbone.blocks.0.project.bn.running_var')
        >>> rename_key("features.7.conv.0.1.bias"), rename_key("classifier.1.weight")
        ('backbone.cut.bn.bias', None)
    """
    if m := re.fullmatch(r"features\.0\.([01])\.(\w+)", k):
        return f"backbone.stem.{_PAIR[m[1]]}.{m[2]}"
    if m := re.fullmatch(r"features\.1\.conv\.(?:0\.([01])|([12]))\.(\w+)", k):
        part = f"dw.{_PAIR[m[1]]}" if m[1] is not None else f"project.{'conv' if m[2] == '1' else 'bn'}"
        return f"backbone.blocks.0.{part}.{m[3]}"
    if m := re.fullmatch(r"features\.([2-6])\.conv\.(?:([01])\.([01])|([23]))\.(\w+)", k):
        if m[2] is not None:
            part = f"{'expand' if m[2] == '0' else 'dw'}.{_PAIR[m[3]]}"
        else:
            part = f"project.{'conv' if m[4] == '2' else 'bn'}"
        return f"backbone.blocks.{int(m[1]) - 1}.{part}.{m[5]}"
    if m := re.fullmatch(r"features\.7\.conv\.0\.([01])\.(\w+)", k):
        return f"backbone.cut.{_PAIR[m[1]]}.{m[2]}"
    if re.fullmatch(r"(features\.\d+|classifier)\..+", k):
        return None
    raise CheckpointError(f"{k!r} is not a key of a torchvision mobilenet_v2 state dict")


def load_torchvision_backbone(net: nn.Module, state_dict: Mapping[str, Tensor]) -> nn.Module:
    """Copy a torchvision ``mobilenet_v2`` state dict (same width multiplier) into ``net``'s
    backbone in place and return ``net``; a missing or misshapen tensor raises
    :class:`~libreyolo.errors.CheckpointError` naming it.

    Usage (torchvision installed): ``load_torchvision_backbone(build_fomo(size="100", nc=2),
    torchvision.models.mobilenet_v2(weights=...).state_dict())``.
    """
    own = {k: v for k, v in net.state_dict().items() if k.startswith("backbone.")}
    sd = fit(rename_all(state_dict, rename_key), own)
    net.load_state_dict(sd, strict=False)
    return net
