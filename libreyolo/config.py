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


def expand_cfg_file(overrides: dict[str, Any], keys: list[str], *, what: str) -> dict[str, Any]:
    """``overrides`` with the keys of its ``cfg`` YAML file merged under it (keys given directly
    win over the file's); ``cfg`` itself stays, naming the file. Unknown keys in the file, a file
    that is not a mapping, or a missing file raise :class:`ConfigError` naming the file.

    Example:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "run.yaml"
        >>> _ = f.write_text("epochs: 30\\nimgsz: 320\\n")
        >>> sorted(expand_cfg_file({"cfg": str(f), "epochs": 5}, ["cfg", "epochs", "imgsz"], what="train").items())
        [('cfg', '...run.yaml'), ('epochs', 5), ('imgsz', 320)]
    """
    path = overrides.get("cfg")
    if path is None:
        return overrides
    import yaml

    from .errors import check_keys

    file = Path(str(path)).expanduser()
    if not file.is_file():
        raise ConfigError(f"cfg={str(path)!r}: no such file (a YAML file of {what} keys)")
    try:
        doc = yaml.safe_load(file.read_text()) or {}
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cfg={str(path)!r} cannot be read as YAML: {e}") from e
    if not isinstance(doc, dict) or not all(isinstance(k, str) for k in doc):
        raise ConfigError(f"cfg={str(path)!r} must be a mapping of {what} keys to values, got {type(doc).__name__}")
    if "cfg" in doc:
        raise ConfigError(f"cfg={str(path)!r} sets 'cfg' itself; one file of keys, not a chain of files")
    check_keys(doc, [k for k in keys if k != "cfg"], what=f"{what} (in cfg file {file})")
    return {**doc, **overrides, "cfg": str(file)}
