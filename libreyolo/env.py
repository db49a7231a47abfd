"""Every ``LIBREYOLO_*`` environment variable in one table.

Variables are read when a function asks for them, never at import time, so that a test or a
user can change them between calls.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class EnvVar:
    name: str
    default: str | None
    doc: str


VARIABLES: dict[str, EnvVar] = {
    v.name: v
    for v in (
        EnvVar(
            name="LIBREYOLO_KERNELS",
            default=None,
            doc="'off'/'reference'/'skip' forces reference kernels and skips importing accelerated "
            "providers; any other value restricts the choice to implementations of that name.",
        ),
        EnvVar(
            name="LIBREYOLO_QUANT_KERNELS",
            default=None,
            doc="Older alias of LIBREYOLO_KERNELS, read only when LIBREYOLO_KERNELS is unset.",
        ),
        EnvVar(
            name="LIBREYOLO_HUB_KERNELS",
            default="1",
            doc="'0'/'false'/'off'/'no' disables compiled Hugging Face Hub kernels.",
        ),
        EnvVar(
            name="LIBREYOLO_WEIGHTS_DIR",
            default=None,
            doc="Extra folder searched for weights files before the bundled ones and the Hub.",
        ),
        EnvVar(
            name="LIBREYOLO_HUB_REPO",
            default="libreyolo/weights",
            doc="Hugging Face Hub repository that weights names are downloaded from.",
        ),
        EnvVar(
            name="LIBREYOLO_DATASETS_DIR",
            default=None,
            doc="Where built-in datasets (e.g. 'shapes') are generated; default ~/.cache/libreyolo/datasets.",
        ),
        EnvVar(
            name="LIBREYOLO_TRAIN_CAPTURE_DRYRUN",
            default="0",
            doc="'1': a training run on a device without CUDA takes the training-capture code path "
            "but never captures (the forward that bypasses DDP, the explicit gradient all-reduce), so "
            "that path can be tested on a CPU; not for normal use.",
        ),
        EnvVar(
            name="LIBREYOLO_GRAPH_CACHE_SIZE",
            default="8",
            doc="Largest number of CUDA graphs a model keeps for prediction (LRU eviction).",
        ),
    )
}

_FALSY = {"0", "false", "off", "no"}


def get(name: str) -> str | None:
    """Current value of a registered variable (its default when unset)."""
    var = VARIABLES[name]
    value = os.environ.get(name)
    return var.default if value is None or value == "" else value


def get_flag(name: str) -> bool:
    """A boolean variable: anything but 0/false/off/no (case-insensitive) is true."""
    value = get(name)
    return value is not None and value.strip().lower() not in _FALSY


def get_int(name: str) -> int:
    value = get(name)
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as e:
        from .errors import ConfigError

        raise ConfigError(f"{name}={value!r} is not an integer") from e
