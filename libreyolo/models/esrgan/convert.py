"""RRDBNet weights in the reference layouts (BasicSR / Real-ESRGAN, and the original ESRGAN) onto ours.

BasicSR / Real-ESRGAN -> ours: ``conv_first`` -> ``stem``, ``body.<i>.rdb<r>.conv<c>`` ->
``body.<i>.dense.<r-1>.convs.<c-1>``, ``conv_body`` -> ``body_conv``, ``conv_up1`` / ``conv_up2``
-> ``up1`` / ``up2``, ``conv_hr`` -> ``hr``, ``conv_last`` -> ``out``. The original ESRGAN spelling
(``RRDB_trunk.<i>.RDB<r>``, ``trunk_conv``, ``upconv1`` / ``upconv2``, ``HRconv``) is read as well.
Every tensor keeps its shape; the size is read from the number of RRDBs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all
from .nn import SPECS

SOURCES = ("basicsr",)
_TOP = {"conv_first": "stem", "conv_body": "body_conv", "trunk_conv": "body_conv", "conv_up1": "up1",
        "upconv1": "up1", "conv_up2": "up2", "upconv2": "up2", "conv_hr": "hr", "HRconv": "hr", "conv_last": "out"}


def rename_key(k: str) -> str:
    """Our name for one reference key (module docstring).

    Example:
        >>> rename_key("body.3.rdb2.conv5.weight"), rename_key("RRDB_trunk.0.RDB1.conv1.bias"), rename_key("HRconv.weight")
        ('body.3.dense.1.convs.4.weight', 'body.0.dense.0.convs.0.bias', 'hr.weight')
    """
    if m := re.fullmatch(r"(\w+)\.(weight|bias)", k):
        if m[1] in _TOP:
            return f"{_TOP[m[1]]}.{m[2]}"
    if m := re.fullmatch(r"(?:body|RRDB_trunk)\.(\d+)\.(?:rdb|RDB)([123])\.conv([1-5])\.(weight|bias)", k):
        return f"body.{m[1]}.dense.{int(m[2]) - 1}.convs.{int(m[3]) - 1}.{m[4]}"
    raise CheckpointError(f"reference key {k!r} is not part of an RRDBNet this converter knows.")


def size_of(sd: Mapping[str, Tensor]) -> str:
    """The size (:data:`~.nn.SPECS`) of a reference state dict, from its RRDB count and widths."""
    blocks = len({m[1] for k in sd if (m := re.match(r"(?:body|RRDB_trunk)\.(\d+)\.", k))})
    feat = int(sd["conv_first.weight"].shape[0])
    first = sd.get("body.0.rdb1.conv1.weight", sd.get("RRDB_trunk.0.RDB1.conv1.weight"))
    grow = int(first.shape[0]) if first is not None else -1
    if int(sd["conv_first.weight"].shape[1]) != 3:
        raise CheckpointError(f"this RRDBNet reads {int(sd['conv_first.weight'].shape[1])} input channels (an x2 / x1 "
                              "model with pixel unshuffle); libreyolo's RRDBNet is the x4 generator on RGB input")
    for size, spec in SPECS.items():
        if (spec.blocks, spec.feat, spec.grow) == (blocks, feat, grow):
            return size
    known = "; ".join(f"{s}: {p.blocks} blocks, {p.feat} features, growth {p.grow}" for s, p in SPECS.items())
    raise CheckpointError(f"this RRDBNet ({blocks} blocks, {feat} features, growth {grow}) is none of the sizes ({known})")


def match(fw: object) -> tuple[str, int] | None:
    """``(size, 1)`` for a BasicSR-style RRDBNet checkpoint, else ``None``."""
    if str(getattr(fw, "arch", "")) != "rrdbnet":
        return None
    return size_of(getattr(fw, "state_dict", {})), 1


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference RRDBNet state dict -> ours (first misfit named)."""
    return fit(rename_all(src, rename_key), own)
