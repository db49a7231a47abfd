"""The family registry: one entry per model architecture (SPEC U-1, DESIGN convention 3).

Families register themselves with :func:`register_family` (:mod:`libreyolo.models._base.registry`)
from ``libreyolo/models/__init__.py`` (one explicit line each). The registry decides by explicit data: checkpoint metadata names the
family; a weights *file name* is matched second, and a name that two families both match raises
with the candidates listed.

Weights names look like ``Libre<TOKEN><size>[-<task>].pt``, e.g. ``LibreYOLO9t.pt`` (family
token ``YOLO9``, size ``t``, task ``detect``) or ``LibreYOLO9s-cls.pt``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ConfigError, suggest
from .models._base.registry import FAMILIES as _FAMILIES
from .models._base.registry import (
    TASK_SUFFIXES,
    register_family,  # noqa: F401 - re-exported: families register here
    task_unsupported,
)

if TYPE_CHECKING:
    from .models._base.family import Family


_NAME_RE = re.compile(r"^Libre(?P<body>[A-Za-z0-9_]+?)(?:-(?P<task>[a-z]+))?(?:\.(?P<ext>pt|safetensors|onnx))?$")


@dataclass(frozen=True, kw_only=True)
class ParsedName:
    family: str
    size: str
    task: str


def _ensure_loaded() -> None:
    from . import models  # noqa: F401 - registers the built-in families


def families() -> dict[str, type[Family]]:
    """All registered families by name.

    Example:
        >>> from libreyolo.registry import families
        >>> fams = families()
        >>> "yolo9" in fams, fams["yolo9"].NAME_TOKEN, fams["yolo9"].SIZES
        (True, 'YOLO9', ('t', 's', 'm', 'c'))
    """
    _ensure_loaded()
    return dict(_FAMILIES)


def get_family(name: str) -> type[Family]:
    """The family class registered as ``name`` (e.g. ``"yolo9"``); an unknown name raises
    :class:`~libreyolo.errors.ConfigError` with the nearest names.

    Example:
        >>> from libreyolo.registry import get_family
        >>> get_family("yolo9").__name__, get_family("yolo9")(size="t", nc=3).nc
        ('YOLO9', 3)
        >>> get_family("yolo99")
        Traceback (most recent call last):
        ...
        libreyolo.errors.ConfigError: unknown model family 'yolo99'. Did you mean 'yolo9'? ...
    """
    _ensure_loaded()
    try:
        return _FAMILIES[name]
    except KeyError:
        raise ConfigError(
            f"unknown model family {name!r}.{suggest(name, _FAMILIES)} "
            f"Registered families: {', '.join(sorted(_FAMILIES))}."
        ) from None


def parse_weights_name(filename: str) -> ParsedName:
    """Resolve a weights file name to (family, size, task).

    Example:
        >>> from libreyolo.registry import parse_weights_name
        >>> parse_weights_name("LibreYOLO9t.pt")
        ParsedName(family='yolo9', size='t', task='detect')
        >>> parse_weights_name("weights/LibreYOLO9s-cls.pt").task
        'classify'
    """
    _ensure_loaded()
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    m = _NAME_RE.match(base)
    if not m:
        raise ConfigError(
            f"cannot read a model name from {filename!r}: expected "
            "'Libre<FAMILY><size>[-<task>].pt', e.g. 'LibreYOLO9t.pt'"
        )
    body, task_suffix = m.group("body"), m.group("task") or ""
    if task_suffix not in TASK_SUFFIXES:
        raise ConfigError(
            f"unknown task suffix '-{task_suffix}' in {filename!r}.{suggest(task_suffix, TASK_SUFFIXES)} "
            f"Known: {', '.join(s for s in TASK_SUFFIXES if s)}."
        )
    task = TASK_SUFFIXES[task_suffix]
    candidates = []
    for fam in _FAMILIES.values():
        token = fam.NAME_TOKEN
        if body.upper().startswith(token.upper()):
            size = body[len(token):]
            if size in fam.SIZES:
                candidates.append(ParsedName(family=fam.FAMILY, size=size, task=task))
    if not candidates:
        tokens = sorted(f"Libre{f.NAME_TOKEN}<{'|'.join(f.SIZES)}>" for f in _FAMILIES.values())
        raise ConfigError(
            f"no registered family matches the model name {base!r}. Known names: {', '.join(tokens)}"
        )
    if len(candidates) > 1:
        raise ConfigError(
            f"model name {base!r} is ambiguous: {', '.join(c.family for c in candidates)} all match"
        )
    return candidates[0]


def check_named_task(name: str) -> None:
    """A weights name that is no file and asks a family for a task it lacks (``LibreYOLO9t-pose.pt``:
    the detector) raises :class:`ConfigError` in one line (:func:`~libreyolo.models._base.registry.task_unsupported`), before any
    look-up; a file (its metadata decides) or another name passes."""
    from pathlib import Path

    if Path(name).expanduser().exists():
        return
    try:
        parsed = parse_weights_name(name)
    except ConfigError:
        return  # not a libreyolo weights name: find_weights says what was tried
    fam = get_family(parsed.family)
    if parsed.task not in fam.TASKS:
        raise ConfigError(task_unsupported(fam, parsed.task, name=Path(name).name, size=parsed.size))
