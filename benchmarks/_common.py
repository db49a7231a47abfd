"""Shared helpers of the benchmark / parity scripts: environment stamp, output writing."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch


def git_commit(explicit: str | None = None) -> str:
    if explicit:
        return explicit
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001 - the GPU machine may have no git checkout
        return os.environ.get("LIBREYOLO_COMMIT", "unknown")


def stamp(commit: str | None = None) -> dict[str, Any]:
    """GPU name, torch/CUDA versions, date and commit for a results file."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001
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


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=str) + "\n")


def md_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        out.append("| " + " | ".join(str(r.get(c, "")) for c in columns) + " |")
    return "\n".join(out)
