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
