"""Typed errors. Each says what went wrong, why, and how to fix it.

The CLI maps every subclass of :class:`LibreYOLOError` to a one-line message and an exit
code (see ``libreyolo/cli/main.py``); nothing below the CLI prints tracebacks for user mistakes.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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


def suggest(word: str, choices: Iterable[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest choice, or ``""``."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" Did you mean '{match[0]}'?" if match else ""


def check_keys(given: Iterable[str], allowed: Iterable[str], *, what: str) -> None:
    """Raise :class:`ConfigError` for the first key of ``given`` not in ``allowed``.

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
