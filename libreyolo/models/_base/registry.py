"""The table of registered families (name -> class) and :func:`register_family`.

``libreyolo/models/__init__.py`` registers the built-in families with one explicit line each;
lookups by name, weights name or checkpoint metadata are :mod:`libreyolo.registry`, which sits
above the models and imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import ConfigError

if TYPE_CHECKING:
    from .family import Family

FAMILIES: dict[str, type[Family]] = {}


def register_family(cls: type[Family]) -> type[Family]:
    """Add a family class; registering a second class under the same name raises."""
    name = cls.FAMILY
    if name in FAMILIES and FAMILIES[name] is not cls:
        raise ConfigError(f"family {name!r} is registered twice ({FAMILIES[name]} and {cls})")
    FAMILIES[name] = cls
    return cls


# weights-name task suffixes (``LibreYOLO9s-cls.pt``) -> task; :mod:`libreyolo.registry` parses names with it
TASK_SUFFIXES = {"": "detect", "cls": "classify", "seg": "segment", "pose": "pose", "sem": "semantic",
                 "depth": "depth", "point": "point", "restore": "restore",
                 "prompt": "prompt", "matte": "matte", "ocr": "ocr"}


def _tail(task: str) -> str:
    """The weights-name suffix of ``task`` (``"-cls"``; ``""`` for detect)."""
    suffix = next((s for s, t in TASK_SUFFIXES.items() if t == task), "")
    return f"-{suffix}" if suffix else ""


def task_unsupported(family: type[Family], task: str, *, name: str = "", size: str = "") -> str:
    """The one-line error for ``family`` asked for a ``task`` it lacks (a ``-pose`` weights name on
    a detector): what it does, the registered families that do ``task`` with their weights names,
    and, for a weights ``name`` of ``size``, the name a sibling family (token extending this one's) uses.
    A name without a task suffix on a family that does not detect (``LibreSwint.pt``) is answered
    with the family's own weights name (``'LibreSwint-cls.pt'``) instead of the list of detectors.

    Example:
        >>> from libreyolo.registry import get_family
        >>> task_unsupported(get_family("yolo9"), "pose")  # doctest: +ELLIPSIS
        "yolo9 does not do task 'pose' (its tasks: detect); pose families: yolo9_pose (LibreYOLO9pose<t|s>-pose.pt)..."
    """
    suffix = next((s for s, t in TASK_SUFFIXES.items() if t == task), None)
    tail = f"-{suffix}" if suffix else ""
    msg = f"{name!r}: " if name else ""
    msg += f"{family.FAMILY} does not do task {task!r} (its tasks: {', '.join(family.TASKS)}); "
    implicit = task == TASK_SUFFIXES[""]  # a name without a suffix ('LibreSwint.pt'): the family was meant
    own = [f"Libre{family.NAME_TOKEN}{size}{_tail(t)}.pt" for t in family.TASKS] if implicit and name and size in family.SIZES else []
    if own:  # name the family's own weights, not every detector
        return msg + (f"its weights are named Libre{family.NAME_TOKEN}<{'|'.join(family.SIZES)}>{_tail(family.TASKS[0])}.pt; "
                      f"did you mean {' or '.join(map(repr, own))}?")
    doing = sorted((f for f in FAMILIES.values() if task in f.TASKS), key=lambda f: f.FAMILY)
    listed = ", ".join(f"{f.FAMILY} (Libre{f.NAME_TOKEN}<{'|'.join(f.SIZES)}>{tail}.pt)" for f in doing)
    msg += f"{task} families: {listed}" if doing else f"no registered family does {task!r}"
    near = [f"Libre{f.NAME_TOKEN}{size}{tail}.pt" for f in doing
            if size in f.SIZES and f.NAME_TOKEN.upper().startswith(family.NAME_TOKEN.upper())]
    return msg + (f"; did you mean {' or '.join(map(repr, near))}?" if name and near else "")
