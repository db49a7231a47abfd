"""Shared helpers of the benchmark / parity scripts: the one results schema, environment stamp.

Every results file a benchmark writes goes through :func:`write_result`::

    {"schema": 1, "command": "python3 benchmarks/x.py --out ...", "commit": "...", "gpu": "...",
     "torch": "...", "cuda": "...", "triton": "...", "python": "...", "date": "YYYY-MM-DD HH:MM UTC",
     "numbers": {...} | [...], "extra": {...}}            # "extra" only when given

:func:`validate_result` lists what is wrong with a loaded results file (the manifest test uses it).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = 1
STAMP_KEYS = ("commit", "gpu", "torch", "cuda", "triton", "python", "date")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$")


def git_commit(explicit: str | None = None) -> str:
    """The commit a result belongs to: ``explicit``, else ``$LIBREYOLO_COMMIT`` (the GPU machine's
    copy of the tree can carry a stale ``.git``: its HEAD is not the commit that was sent), else git."""
    if explicit:
        return explicit
    if os.environ.get("LIBREYOLO_COMMIT"):
        return os.environ["LIBREYOLO_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True, timeout=10, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):  # the GPU machine may have no git checkout
        return os.environ.get("LIBREYOLO_COMMIT", "unknown")


def stamp(commit: str | None = None) -> dict[str, Any]:
    """GPU name, torch/CUDA versions, date and commit for a results file."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    try:
        import triton

        triton_version = triton.__version__
    except (ImportError, RuntimeError):  # absent, or present without a usable backend
        triton_version = None
    return {
        "gpu": gpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(commit),
    }


def command_line(argv: list[str] | None = None) -> str:
    """The exact command that runs this process, as ``python3 benchmarks/x.py --flag value``
    (the script path relative to the repository root when it lies inside it)."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]) if argv else Path("?")
    try:
        shown = script.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        shown = str(script)
    return " ".join(["python3", shlex.quote(shown), *(shlex.quote(a) for a in argv[1:])])


def _finite(obj: Any) -> Any:
    """NaN / inf become None, so the file is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def write_result(path_json: Path, *, numbers: dict[str, Any] | list[Any], command: str | None = None,
                 extra: dict[str, Any] | None = None, markdown: str | None = None,
                 env: dict[str, Any] | None = None, commit: str | None = None) -> dict[str, Any]:
    """Write one results file in the schema above (and ``markdown`` beside it as ``.md``).

    ``numbers``: what was measured (the script's own keys). ``command``: the exact command line
    (default: this process's, see :func:`command_line`). ``extra``: settings worth keeping that
    are not measurements. ``env``: a :func:`stamp` already taken (taken now, with ``commit``,
    when None). Returns the document written.
    """
    env = dict(env) if env is not None else stamp(commit)
    doc: dict[str, Any] = {"schema": SCHEMA, "command": command or command_line()}
    doc.update({k: env.get(k) for k in STAMP_KEYS})
    doc["numbers"] = numbers
    if extra:
        doc["extra"] = extra
    path_json = Path(path_json)
    path_json.parent.mkdir(parents=True, exist_ok=True)
    path_json.write_text(json.dumps(_finite(doc), indent=2, default=str, allow_nan=False) + "\n")
    if markdown is not None:
        tail = f"\n\nWritten by `{doc['command']}` (commit {doc['commit']}, {doc['date']}).\n"
        path_json.with_suffix(".md").write_text(markdown.rstrip("\n") + tail)
    return doc


def validate_result(obj: Any) -> list[str]:
    """Problems of one loaded results document against schema 1 (empty: valid)."""
    if not isinstance(obj, dict):
        return [f"a results file is a JSON object, not {type(obj).__name__}"]
    problems = []
    if obj.get("schema") != SCHEMA:
        problems.append(f"schema is {obj.get('schema')!r}, expected {SCHEMA}")
    cmd = obj.get("command")
    if not isinstance(cmd, str) or not cmd.startswith("python"):
        problems.append(f"command must be the command line ('python3 benchmarks/...'), got {cmd!r}")
    for key in ("commit", "gpu", "torch", "python", "date"):
        if not isinstance(obj.get(key), str) or not obj.get(key):
            problems.append(f"{key} must be a non-empty string, got {obj.get(key)!r}")
    for key in ("cuda", "triton"):
        if key not in obj:
            problems.append(f"{key} is missing (null when absent)")
        elif obj[key] is not None and not isinstance(obj[key], str):
            problems.append(f"{key} must be a string or null, got {obj[key]!r}")
    if isinstance(obj.get("date"), str) and not _DATE.match(obj["date"]):
        problems.append(f"date {obj['date']!r} is not 'YYYY-MM-DD HH:MM UTC'")
    if not isinstance(obj.get("numbers"), (dict, list)) or not obj.get("numbers"):
        problems.append("numbers must be a non-empty object or list")
    if "extra" in obj and not isinstance(obj["extra"], dict):
        problems.append("extra must be an object")
    unknown = set(obj) - {"schema", "command", "numbers", "extra", *STAMP_KEYS}
    if unknown:
        problems.append(f"unknown top-level keys {sorted(unknown)} (put them under numbers or extra)")
    return problems


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive lock on ``<path>.lock`` (the runner's lanes can finish two parity runs at
    once; each reads the committed matrix, adds its rows and writes it back under this lock, so
    neither drops the other's rows)."""
    lock = Path(str(path) + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_json(path: Path, obj: Any) -> None:
    """A plain JSON side file (e.g. a child process's raw output), not a results document."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=str) + "\n")


def md_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        out.append("| " + " | ".join(str(r.get(c, "")) for c in columns) + " |")
    return "\n".join(out)


def make_train_step(net: Any, crit: Any, data: dict[str, Any], *, graph: bool,
                    amp_dtype: torch.dtype | None) -> tuple[Any, Any]:
    """One full training step as every training benchmark measures it: zero_grad, forward
    (through ``TrainGraphs``: captured when ``graph``), loss, scaled backward, unscale, gradient
    clipping, SGD step, scaler update, EMA update. Returns ``(step, graphs)``."""
    from libreyolo.graphs.training import TrainGraphs

    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.937, nesterov=True, weight_decay=5e-4)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype is not None)
    ema = [p.detach().clone() for p in net.parameters()]
    graphs = TrainGraphs(net, requested=graph, amp_dtype=amp_dtype, reason=None)

    def step() -> None:
        graphs.zero_grad(opt)
        preds = graphs.forward(data["img"])
        loss, _ = crit(preds, data)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
        scaler.step(opt)
        scaler.update()
        with torch.no_grad():
            torch._foreach_lerp_(ema, [p.detach() for p in net.parameters()], 1 - 0.9999)

    return step, graphs
