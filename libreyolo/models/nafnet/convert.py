"""NAFNet weights in the reference layout (megvii-research/NAFNet, BasicSR's ``NAFNet_arch``) onto ours.

Reference -> ours: ``intro`` -> ``stem``, ``ending`` -> ``head``, ``encoders.<i>`` -> ``enc.<i>``,
``downs.<i>`` -> ``down.<i>``, ``middle_blks`` -> ``mid``, ``ups.<i>.0`` -> ``up.<i>.0``,
``decoders.<i>`` -> ``dec.<i>``; inside a block ``conv1`` / ``conv2`` / ``conv3`` -> ``pw1`` /
``dw`` / ``pw2``, ``sca.1`` -> ``sca``, ``conv4`` / ``conv5`` -> ``ffn1`` / ``ffn2``; ``norm1``,
``norm2``, ``beta``, ``gamma`` keep their names. Every tensor keeps its shape. The size is read
from the widths and block counts (:data:`~.nn.SPECS`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import KeyRule, fit, rename_all, rename_by_rules
from .nn import SPECS

SOURCES = ("basicsr",)
_TOP = {"intro": "stem", "ending": "head"}
_LEVELS = {"encoders": "enc", "decoders": "dec"}
_BLOCK = {"conv1": "pw1", "conv2": "dw", "conv3": "pw2", "sca.1": "sca", "conv4": "ffn1", "conv5": "ffn2",
          "norm1": "norm1", "norm2": "norm2"}


def _block(rest: str, k: str) -> str:
    if rest in ("beta", "gamma"):
        return rest
    if m := re.fullmatch(r"([\w.]+)\.(weight|bias)", rest):
        if m[1] in _BLOCK:
            return f"{_BLOCK[m[1]]}.{m[2]}"
    raise CheckpointError(f"reference key {k!r} is not part of a NAFNet block this converter knows.")


def rename_key(k: str) -> str:
    """Our name for one reference key (module docstring).

    Example:
        >>> rename_key("encoders.2.1.sca.1.weight"), rename_key("middle_blks.0.beta"), rename_key("ups.0.0.weight")
        ('enc.2.1.sca.weight', 'mid.0.beta', 'up.0.0.weight')
    """
    rules: tuple[KeyRule, ...] = (
        (r"(intro|ending)\.(weight|bias)", lambda m: f"{_TOP[m[1]]}.{m[2]}"),
        (r"downs\.(\d+)\.(weight|bias)", lambda m: f"down.{m[1]}.{m[2]}"),
        (r"ups\.(\d+)\.0\.weight", lambda m: f"up.{m[1]}.0.weight"),
        (r"(encoders|decoders)\.(\d+)\.(\d+)\.(.+)", lambda m: f"{_LEVELS[m[1]]}.{m[2]}.{m[3]}.{_block(m[4], k)}"),
        (r"middle_blks\.(\d+)\.(.+)", lambda m: f"mid.{m[1]}.{_block(m[2], k)}"),
    )
    return rename_by_rules(k, rules, what="a NAFNet")


def size_of(sd: Mapping[str, Tensor]) -> str:
    """The size (:data:`~.nn.SPECS`) of a reference state dict, from its width and block counts."""
    width = int(sd["intro.weight"].shape[0])

    def count(prefix: str, levels: int | None = None) -> tuple[int, ...]:
        pat = re.compile(rf"{prefix}\.(\d+)\.(\d+)\.")
        found: dict[int, set[int]] = {}
        for key in sd:
            if m := pat.match(key):
                found.setdefault(int(m[1]), set()).add(int(m[2]))
        return tuple(len(found.get(i, ())) for i in range(max(found, default=-1) + 1))

    enc, dec = count("encoders"), count("decoders")
    middle = len({k.split(".")[1] for k in sd if k.startswith("middle_blks.")})
    for size, spec in SPECS.items():
        if (spec.width, spec.enc, spec.middle, spec.dec) == (width, enc, middle, dec):
            return size
    known = "; ".join(f"{s}: width {p.width}, enc {list(p.enc)}, middle {p.middle}, dec {list(p.dec)}"
                      for s, p in SPECS.items())
    raise CheckpointError(f"this NAFNet (width {width}, enc {list(enc)}, middle {middle}, dec {list(dec)}) is none of "
                          f"the sizes ({known})")


def match(fw: object) -> tuple[str, int] | None:
    """``(size, 1)`` for a BasicSR-style NAFNet checkpoint, else ``None``."""
    if str(getattr(fw, "arch", "")) != "nafnet":
        return None
    return size_of(getattr(fw, "state_dict", {})), 1


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference NAFNet state dict -> ours (first misfit named)."""
    return fit(rename_all(src, rename_key), own)
