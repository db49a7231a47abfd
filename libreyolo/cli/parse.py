"""Command-line parsing: ``libreyolo <command> key=value ... [--flag]`` -> typed keyword arguments.

Value forms (``parse_value``): ``true``/``false`` -> bool, ``none``/``null`` -> None, integers,
floats (``0.5``, ``1e-3``), lists (``0,2``, ``[0,2]``, ``(640,480)``), quoted strings (``'0'``),
anything else a string. Flags: ``--key`` is ``key=true``, ``--no-key`` is ``key=false``,
``--key=value`` is ``key=value``. Dashes in keys become underscores (``--cuda-graph``).
Each key of a command declares a kind, so ``name=001`` stays the string ``"001"`` for a string
key and ``lr0=1`` becomes ``1.0`` for a float key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError, check_keys, empty_value

Kind = Literal["any", "str", "int", "float", "bool", "source"]
GLOBAL_FLAGS = {"-h": "help", "--help": "help", "--debug": "debug", "-v": "verbose", "--verbose": "verbose",
                "-q": "quiet", "--quiet": "quiet", "--version": "version"}

NON_EMPTY = frozenset({"data", "model", "source"})  # keys whose empty value (data=) is always a mistake

_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


class _ApiDefault:
    """Marker: the key is passed to the API only when given, so the API's own default applies."""

    def __repr__(self) -> str:
        return "API default"


API_DEFAULT: Any = _ApiDefault()


@dataclass(frozen=True, kw_only=True)
class Key:
    """One ``key=value`` argument of a command.

    ``pass_default`` keys are always passed (with ``default`` when not given); the others only
    when the user gives them.
    """

    name: str
    kind: Kind = "any"
    default: Any = API_DEFAULT
    help: str = ""
    pass_default: bool = False
    shown: str | None = None  # how help shows the default, when not format_default(default)


@dataclass(frozen=True, kw_only=True)
class Arg:
    key: str
    raw: str | None  # None: a bare ``--key`` flag
    token: str


@dataclass(kw_only=True)
class Argv:
    """The command line split into a command, its arguments and the global flags."""

    command: str | None = None
    args: list[Arg] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # positional words after the command (help <cmd>)
    help: bool = False
    debug: bool = False
    verbose: bool = False
    quiet: bool = False
    version: bool = False


def split_argv(argv: list[str]) -> Argv:
    """Split tokens into command, ``key=value`` arguments, ``--flags`` and global flags.

    Raises:
        ConfigError: a token that is none of these (e.g. ``0.5`` without a key).
    """
    out = Argv()
    previous: str | None = None
    for tok in argv:
        if tok in GLOBAL_FLAGS:
            setattr(out, GLOBAL_FLAGS[tok], True)
        elif tok.startswith("--") and len(tok) > 2:
            key, sep, raw = tok[2:].partition("=")
            out.args.append(Arg(key=_norm_key(key, tok), raw=raw if sep else None, token=tok))
        elif "=" in tok and not tok.startswith("-"):
            key, _, raw = tok.partition("=")
            out.args.append(Arg(key=_norm_key(key, tok), raw=raw, token=tok))
        elif out.command is None and not out.args and not tok.startswith("-"):
            out.command = tok
        elif out.command == "help" and not out.args and not tok.startswith("-"):
            out.extra.append(tok)
        else:
            hint = ""
            if previous is not None and previous.startswith("--") and "=" not in previous:
                hint = f" Did you mean '{previous}={tok}'?"
            elif not tok.startswith("-"):
                hint = " Arguments are written key=value, e.g. conf=0.5."
            raise ConfigError(f"unexpected argument '{tok}'.{hint}")
        previous = tok
    return out


def _norm_key(key: str, tok: str) -> str:
    key = key.strip().replace("-", "_")
    if not key or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
        raise ConfigError(f"malformed argument '{tok}': expected key=value with a name such as conf or imgsz")
    return key


def parse_value(raw: str) -> Any:
    """Parse one command-line value.

    Example:
        >>> parse_value("0,2"), parse_value("[640, 480]"), parse_value("null"), parse_value("1e-3")
        ([0, 2], [640, 480], None, 0.001)
    """
    s = raw.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    low = s.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low in ("none", "null"):
        return None
    if len(s) >= 2 and (s[0], s[-1]) in (("[", "]"), ("(", ")")):
        inner = s[1:-1].strip()
        return [] if not inner else [_scalar(p) for p in inner.split(",")]
    if "," in s:
        parts = [p for p in s.split(",")]
        if parts and parts[-1].strip() == "":  # trailing comma: 'classes=0,'
            parts = parts[:-1]
        return [_scalar(p) for p in parts]
    return _scalar(s)


def _scalar(raw: str) -> Any:
    s = raw.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    if _INT.match(s):
        return int(s)
    if _FLOAT.match(s):
        return float(s)
    return s


def _unquote(raw: str) -> str:
    s = raw.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    return s


def coerce(key: Key, arg: Arg) -> Any:
    """Turn one argument into the value passed to the API, checked against the key's kind."""
    flag = arg.raw is None
    value = True if flag else parse_value(arg.raw)  # type: ignore[arg-type]
    if value is None:
        return None
    kind = key.kind
    if flag and kind in ("bool", "any"):
        return True
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise ConfigError(f"'{key.name}' is true or false, got '{arg.raw}'")
    if flag:
        raise ConfigError(f"'{arg.token}' needs a value: write {key.name}=<value>")
    if kind == "str":
        return _unquote(arg.raw)  # type: ignore[arg-type]
    if kind == "source":
        raw = _unquote(arg.raw)  # type: ignore[arg-type]
        return raw if Path(raw).expanduser().exists() or not isinstance(value, list) else value
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"'{key.name}' is an integer, got '{arg.raw}'")
    if kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"'{key.name}' is a number, got '{arg.raw}'")
    return value


def resolve(args: list[Arg], keys: dict[str, Key] | None, *, command: str) -> dict[str, Any]:
    """Check and type the arguments of ``command``.

    Args:
        args: from :func:`split_argv`.
        keys: the command's keys; ``None`` accepts any key (parsed with :func:`parse_value`).

    Returns:
        The keyword arguments to pass: every given key, plus the ``pass_default`` keys.

    Raises:
        ConfigError: an unknown key (with a close-match or alias suggestion: ``confidence`` ->
            ``conf``), a key given twice, a value of the wrong kind, or an empty ``data=``,
            ``model=`` or ``source=``.
    """
    out: dict[str, Any] = {}
    for arg in args:
        name = arg.key
        if arg.raw is None and name.startswith("no_") and keys is not None and name not in keys \
                and name[3:] in keys and keys[name[3:]].kind in ("bool", "any"):
            name, arg = name[3:], Arg(key=name[3:], raw="false", token=arg.token)
        if keys is not None:
            check_keys([name], keys, what=f"'{command}'")
        if name in out:
            raise ConfigError(f"'{name}' is given twice; keep one")
        key = keys[name] if keys is not None else Key(name=name)
        out[name] = coerce(key, arg)
        if name in NON_EMPTY and isinstance(out[name], str) and not out[name].strip():
            raise empty_value(name)
    if keys is not None:
        for key in keys.values():
            if key.pass_default and key.name not in out:
                out[key.name] = key.default
    return out


def format_default(value: Any) -> str:
    """A default as the user would type it (a :class:`Key` shows ``key.shown`` when set)."""
    if isinstance(value, Key):
        return value.shown if value.shown is not None else format_default(value.default)
    if value is API_DEFAULT:
        return "(API default)"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(format_default(v) for v in value) or "[]"
    return str(value)
