"""``libreyolo <command> key=value ... [--flag]``: argument parsing -> API call -> error mapping.

Exit statuses: 0 success; a :class:`~libreyolo.errors.LibreYOLOError` exits with its
``exit_code`` (2 for a bad argument) after one line ``libreyolo: error: <message>`` on stderr;
130 on Ctrl-C; 1 for an unexpected error (one line plus a hint to rerun with ``--debug``, which
shows the traceback).

Example:
    $ libreyolo predict model=LibreYOLO9t.pt source=bus.jpg conf=0.4 --cuda-graph
    $ libreyolo train model=LibreYOLO9t.pt data=my-dataset.yaml epochs=100 --cuda-graph
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Iterator

from ..errors import ConfigError, LibreYOLOError, suggest
from .parse import format_default, resolve, split_argv

PROG = "libreyolo"


def entrypoint(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``) and return the exit status.

    Example:
        >>> entrypoint(["version"])  # doctest: +SKIP
        0
    """
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    debug = "--debug" in argv
    try:
        return _main(argv)
    except LibreYOLOError as e:
        if debug:
            traceback.print_exc()
        _error(str(e) or type(e).__name__)
        return e.exit_code
    except NotImplementedError as e:  # e.g. cuda_graph=true on a family that has not opted in (G-5)
        if debug:
            traceback.print_exc()
        _error(str(e) or "this operation is not implemented for this model")
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `libreyolo predict ... | head`
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as e:  # noqa: BLE001 - the CLI is the one place that turns any error into a message
        if debug:
            traceback.print_exc()
            return 1
        if isinstance(e, ModuleNotFoundError) and (e.name or "").startswith("libreyolo"):
            _error(f"this feature is not part of this installation (module {e.name} is missing)")
            return 1
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"{PROG}: unexpected error: {type(e).__name__}{': ' + msg if msg else ''}\n"
              f"(rerun with --debug to see the traceback; please report it if the input was valid)",
              file=sys.stderr)
        return 1


def _error(message: str) -> None:
    text = " ".join(message.split()) or "the operation failed without saying why (rerun with --debug)"
    print(f"{PROG}: error: {text}", file=sys.stderr)


def _main(argv: list[str]) -> int:
    from .commands import COMMANDS, version_text

    a = split_argv(argv)
    if a.command is None:
        if a.version:
            print(version_text())
            return 0
        if a.args:
            raise ConfigError(f"no command given before '{a.args[0].token}'; "
                              f"usage: {PROG} <command> key=value ..., commands: {', '.join(COMMANDS)}")
        print(general_help())
        return 0
    if a.command == "help":
        if a.extra:
            return _main([a.extra[0], "--help"])
        print(general_help())
        return 0
    cmd = COMMANDS.get(a.command)
    if cmd is None:
        choices = [*COMMANDS, "help"]
        raise ConfigError(f"unknown command '{a.command}'.{suggest(a.command, choices)} "
                          f"Commands: {', '.join(choices)}.")
    if a.help:
        print(command_help(a.command))
        return 0
    kwargs = resolve(a.args, cmd.keys(), command=cmd.name)
    with configure_logging(verbose=a.verbose, quiet=a.quiet):
        return cmd.run(kwargs, a.quiet)


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if record.levelno == logging.INFO else f"{record.levelname}: {text}"


@contextlib.contextmanager
def configure_logging(*, verbose: bool = False, quiet: bool = False) -> Iterator[None]:
    """Log ``libreyolo.*`` at INFO (DEBUG with --verbose, WARNING with --quiet) to stderr.

    Other libraries' WARNING and above go to stderr too (unless the root logger already has a
    handler). The previous logging state is restored on exit, so calling the CLI in-process
    leaves no trace.
    """
    lg, root = logging.getLogger("libreyolo"), logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter("%(message)s"))
    others = None
    if not root.handlers:  # an embedding application's own logging setup wins
        others = logging.StreamHandler(sys.stderr)
        others.setLevel(logging.WARNING)
        others.setFormatter(logging.Formatter("%(levelname)s: %(name)s: %(message)s"))
        root.addHandler(others)
    old_level, old_propagate = lg.level, lg.propagate
    lg.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    lg.addHandler(handler)
    lg.propagate = False
    try:
        yield
    finally:
        lg.removeHandler(handler)
        lg.setLevel(old_level)
        lg.propagate = old_propagate
        if others is not None:
            root.removeHandler(others)


# ---------------------------------------------------------------------------- help
def general_help() -> str:
    from .commands import COMMANDS

    width = max(len(n) for n in [*COMMANDS, "help"])
    lines = [f"usage: {PROG} <command> [key=value ...] [--flag ...]", "",
             "Real-time vision models with verified CUDA-graph replay.", "", "commands:"]
    lines += [f"  {c.name:<{width}}  {c.summary}" for c in COMMANDS.values()]
    lines += [f"  {'help':<{width}}  help on a command: {PROG} help predict  (or {PROG} predict --help)",
              "", "values: key=value; booleans key=true|false, --key, --no-key; lists classes=0,2 or [0,2];",
              "        none/null for None; dashes and underscores in keys are the same (--cuda-graph).",
              "", "global flags:",
              "  -h, --help     show help (after a command: that command's keys)",
              "  --version      print versions",
              "  -v, --verbose  debug logging",
              "  -q, --quiet    warnings only, no per-image lines",
              "  --debug        show the traceback of unexpected errors",
              "", "examples:",
              f"  {PROG} predict source=image.jpg conf=0.4",
              f"  {PROG} train model=LibreYOLO9t.pt data=my-dataset.yaml epochs=100 --cuda-graph"]
    return "\n".join(lines)


def command_help(name: str) -> str:
    """The keys of one command with their defaults, and one example."""
    from .commands import COMMANDS

    cmd = COMMANDS[name]
    keys = cmd.keys()
    lines = [f"usage: {PROG} {name} [key=value ...] [--flag ...]", "", f"{cmd.summary[0].upper()}{cmd.summary[1:]}.", ""]
    if keys is None:
        lines.append("keys: checked by the API when the command runs (key list unavailable here)")
    elif keys:
        kw = max(len(k) for k in keys)
        dw = min(max(len(format_default(k)) for k in keys.values()), 28)
        lines.append("keys (default):")
        for k in keys.values():
            lines.append(f"  {k.name:<{kw}}  {format_default(k):<{dw}}  {k.help}".rstrip())
    else:
        lines.append("takes no keys")
    lines += ["", "example:", f"  {cmd.example}"]
    return "\n".join(lines)
