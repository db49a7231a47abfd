"""Key checking and value coercion shared by every verb's configuration.

``parse_bool`` is the one reading of truthy strings (CLI values, environment variables);
``coerce`` turns a CLI string into a dataclass field's type.
"""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError

TRUE_STRINGS = frozenset({"1", "true", "yes", "on", "y"})
FALSE_STRINGS = frozenset({"0", "false", "no", "off", "n"})


def parse_bool(text: str) -> bool | None:
    """``"true"/"1"/"yes"/"on"/"y"`` -> True, ``"false"/"0"/"no"/"off"/"n"`` -> False (any case,
    surrounding spaces ignored), anything else -> None.

    Example:
        >>> parse_bool(" Yes "), parse_bool("off"), parse_bool("maybe")
        (True, False, None)
    """
    s = text.strip().lower()
    if s in TRUE_STRINGS:
        return True
    if s in FALSE_STRINGS:
        return False
    return None


def env_flag(name: str, default: bool = False) -> bool:
    """An environment variable read as a boolean (unset or unreadable: ``default``)."""
    value = os.environ.get(name)
    parsed = parse_bool(value) if value is not None else None
    return default if parsed is None else parsed




def coerce(key: str, value: Any, hint: Any) -> Any:
    """A config value for a dataclass field annotated ``hint``: CLI strings are accepted for typed
    fields (``"true"`` -> True, ``"3"`` -> 3), values of the wrong type are refused.

    Example:
        >>> coerce("amp", "off", bool), coerce("epochs", "3", int)
        (False, 3)
    """
    if isinstance(value, Path):
        value = str(value)
    args = set(typing.get_args(hint)) or {hint}
    if typing.get_origin(hint) is Literal:
        if value not in args:
            raise ConfigError(f"{key} must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if value is None and type(None) in args:
        return None
    if bool in args and isinstance(value, str) and parse_bool(value) is not None:
        return parse_bool(value)
    if bool in args and isinstance(value, bool):
        return value
    if int in args and not isinstance(value, bool):
        try:
            if isinstance(value, (int, str)) and float(value) == int(float(value)):
                return int(float(value))
        except ValueError:
            pass
    if float in args and not isinstance(value, bool):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    if str in args:
        return str(value)
    raise ConfigError(f"{key} has the wrong type: expected {hint}, got {value!r}")
