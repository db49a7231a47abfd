"""Typed errors. Each says what went wrong, why, and how to fix it.

The CLI maps every subclass of :class:`LibreYOLOError` to a one-line message and an exit
code (see ``libreyolo/cli/main.py``); nothing below the CLI prints tracebacks for user mistakes.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar


class LibreYOLOError(Exception):
    """Base class of every error libreyolo raises on purpose."""

    exit_code: int = 1


class ConfigError(LibreYOLOError, ValueError):
    """A bad argument or configuration key/value (also a ``ValueError``)."""

    exit_code = 2


class CheckpointError(LibreYOLOError):
    """A checkpoint that cannot be found, read, or does not match its metadata."""

    exit_code = 3


class DatasetError(LibreYOLOError):
    """A dataset that is missing, malformed or empty."""

    exit_code = 4


class SourceError(LibreYOLOError, ValueError):
    """A prediction source that is missing, unreadable or of an unsupported type."""

    exit_code = 5


class GraphCaptureError(LibreYOLOError, RuntimeError):
    """A CUDA-graph capture or replay that failed."""

    exit_code = 6


class ExportError(LibreYOLOError):
    """An export that cannot be done as asked."""

    exit_code = 7


class MissingDependencyError(LibreYOLOError, ImportError):
    """An optional package a feature needs is not installed (the message says what to install)."""

    exit_code = 8


# Names users of other tools type for libreyolo's keys (Ultralytics, YOLOX, mmdet, torchvision
# scripts). An alias is suggested only where its target is a valid key of the call at hand.
ALIASES: dict[str, str] = {
    "confidence": "conf", "conf_thres": "conf", "conf_threshold": "conf", "score_thr": "conf",
    "iou_thres": "iou", "iou_threshold": "iou", "nms_iou": "iou",
    "img_size": "imgsz", "imgsize": "imgsz", "image_size": "imgsz", "img": "imgsz", "size": "imgsz",
    "input_size": "imgsz", "weights": "model", "weight": "model", "checkpoint": "model", "ckpt": "model",
    "cfg": "model", "batch_size": "batch", "bs": "batch", "epoch": "epochs", "lr": "lr0",
    "learning_rate": "lr0", "num_workers": "workers", "dataset": "data", "data_yaml": "data",
    "max_detections": "max_det", "maxdet": "max_det", "output": "save_dir", "project": "save_dir",
    "agnostic": "agnostic_nms", "fp16": "half", "cuda_graphs": "cuda_graph", "graph": "cuda_graph",
}


def suggest(word: str, choices: Iterable[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the alias or closest choice, or ``""``.

    Example:
        >>> suggest("confidence", ["conf", "iou"]), suggest("ioo", ["conf", "iou"])
        (" Did you mean 'conf'?", " Did you mean 'iou'?")
    """
    choices = list(choices)
    alias = ALIASES.get(word.lower().replace("-", "_"))
    if alias is not None and alias in choices:
        return f" Did you mean '{alias}'?"
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" Did you mean '{match[0]}'?" if match else ""


def check_keys(given: Iterable[str], allowed: Iterable[str], *, what: str) -> None:
    """Raise :class:`ConfigError` for the first key of ``given`` not in ``allowed``.

    The message suggests the close match or the libreyolo name of an alias other tools use
    (``confidence`` -> ``conf``, ``img_size`` -> ``imgsz``, ``weights`` -> ``model``).

    Example:
        >>> check_keys(["conf"], ["conf", "iou"], what="predict")
    """
    allowed = list(allowed)
    for key in given:
        if key not in allowed:
            raise ConfigError(
                f"unknown {what} argument '{key}'.{suggest(key, allowed)} "
                f"Valid arguments: {', '.join(sorted(allowed))}."
            )


F = TypeVar("F", bound=Callable[..., Any])


def keyword_checked(what: str) -> Callable[[F], F]:
    """Decorate a function with keyword-only options so that an unknown keyword raises
    :class:`ConfigError` (with a suggestion) instead of Python's bare ``TypeError``.

    The signature stays explicit (``help()`` and ``inspect.signature`` show the real keywords);
    the check is one set difference per call.

    Example:
        >>> @keyword_checked("predict")
        ... def predict(source=None, *, conf=0.25):
        ...     return conf
        >>> predict(confidence=0.5)
        Traceback (most recent call last):
        ...
        libreyolo.errors.ConfigError: unknown predict argument 'confidence'. Did you mean 'conf'? Valid arguments: conf, source.
    """

    def decorate(fn: F) -> F:
        params = inspect.signature(fn).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            raise TypeError(f"keyword_checked({what!r}): {fn.__qualname__} takes **kwargs; nothing to check")
        names = frozenset(n for n, p in params.items() if p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY) and n != "self")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kwargs.keys() - names:
                check_keys(kwargs, names, what=what)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def empty_value(key: str) -> ConfigError:
    """The error for a key given with an empty value (``data=``), worded the same by every command.

    Example:
        >>> str(empty_value("data"))
        "'data' is empty; pass a dataset yaml, e.g. data=my-dataset.yaml, or a built-in dataset name, e.g. data=shapes."
    """
    examples = {
        "data": "a dataset yaml, e.g. data=my-dataset.yaml, or a built-in dataset name, e.g. data=shapes",
        "model": "a weights name or file, e.g. model=LibreYOLO9t.pt or model=runs/detect/train/weights/best.pt",
        "source": "an image, video, folder or glob, e.g. source=images/",
    }
    return ConfigError(f"'{key}' is empty; pass {examples.get(key, f'a value, e.g. {key}=<value>')}.")
