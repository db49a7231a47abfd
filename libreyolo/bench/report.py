"""Benchmark results: targets (issue 4), the printed table, and the JSON / markdown files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# Targets for yolo9-t, 640 px, batch 1, AMP on an H200; evaluated for every run, judged for that one.
TARGETS: tuple[tuple[str, str, str, float], ...] = (
    ("network_speedup", "graph network step vs eager", ">=", 4.0),
    ("graph_over_kernel_sum", "graph step / summed kernel time", "<=", 1.15),
    ("e2e_speedup", "end-to-end predict vs eager", ">=", 2.0),
    ("capture_ms", "capture per shape after warm-up (ms)", "<", 100.0),
    ("memory_ratio", "graph peak memory / eager peak", "<=", 1.2),
)


def evaluate_targets(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target: ``{"name", "what", "op", "target", "value", "ok"}`` (ok None if unmeasured)."""
    derived = run.get("derived", {})
    rows = []
    for name, what, op, target in TARGETS:
        value = derived.get(name)
        ok = None
        if isinstance(value, (int, float)) and math.isfinite(value):
            ok = {">=": value >= target, "<=": value <= target, "<": value < target}[op]
        rows.append({"name": name, "what": what, "op": op, "target": target, "value": value, "ok": ok})
    return rows


def _f(v: Any, nd: int = 2) -> str:
    return "-" if not isinstance(v, (int, float)) or v is None else f"{v:.{nd}f}"


def _mib(v: Any) -> str:
    return "-" if not isinstance(v, (int, float)) else f"{v / 2**20:.0f}"


COLUMNS = ("model", "batch", "imgsz", "amp", "eager ms", "graph ms", "compile ms", "kernel sum ms (n)",
           "net x", "graph/ksum", "e2e eager ms", "e2e graph ms", "e2e x", "capture ms", "peak MiB e/g", "reserved MiB e/g")


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    m = result["model"]
    rows = []
    for run in result["runs"]:
        c, n, e2e, d = run["config"], run["network"], run["end_to_end"], run["derived"]
        e, g, k = n.get("eager", {}), n.get("graph", {}), n.get("compile", {})
        ksum = f"{_f(e.get('kernel_sum_ms'), 3)} ({e.get('kernel_count', '-')})"
        rows.append([
            f"{m['family']}-{m['size']}", str(c["batch"]), "x".join(map(str, c["imgsz"])), c["amp"],
            _f(e.get("median_ms"), 3), _f(g.get("median_ms"), 3) if "error" not in g else "error",
            _f(k.get("median_ms"), 3) if "error" not in k else "error", ksum,
            _f(d.get("network_speedup")), _f(d.get("graph_over_kernel_sum")),
            _f(e2e.get("eager", {}).get("median_ms")), _f(e2e.get("graph", {}).get("median_ms")),
            _f(d.get("e2e_speedup")), _f(d.get("capture_ms"), 1),
            f"{_mib(e.get('peak_bytes'))}/{_mib(g.get('peak_bytes'))}",
            f"{_mib(e.get('peak_reserved_bytes'))}/{_mib(g.get('peak_reserved_bytes'))}",
        ])
    return rows


def format_table(result: dict[str, Any]) -> str:
    """A fixed-width text table of every run, followed by the target check of each run."""
    rows = [list(COLUMNS), *table_rows(result)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=False)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    env = result.get("environment", {})
    lines.append(f"({env.get('gpu')}, torch {env.get('torch')}, weights: {result['model'].get('weights')})")
    for run in result["runs"]:
        b = run["config"]["batch"]
        for arm in ("graph", "compile"):
            err = run["network"].get(arm, {}).get("error")
            if err:
                lines.append(f"batch {b}: {arm} arm: {err}")
        for arm in ("eager", "graph"):
            e2e = run["end_to_end"].get(arm) or {}
            parts = e2e.get("breakdown_ms")
            if parts:
                lines.append(f"batch {b}: predict() {arm} {_f(e2e.get('median_ms'), 3)} ms per call = "
                             + " + ".join(f"{k} {_f(v, 3)}" for k, v in parts.items())
                             + " (Results.speed) + the rest of the call")
        peer = run["end_to_end"].get("ultralytics_yolov8n")
        if peer:
            lines.append(f"batch {b}: Ultralytics YOLOv8n predict() (same images, imgsz 640): "
                         + (f"{_f(peer.get('median_ms'), 3)} ms" if "error" not in peer else peer["error"]))
    return "\n".join(lines)


def markdown_table(result: dict[str, Any]) -> str:
    rows = table_rows(result)
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def write_results(result: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """Write ``benchmark-<family><size>-<h>x<w>.json`` and ``.md`` under ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    m = result["model"]
    hw = "x".join(map(str, result["runs"][0]["config"]["imgsz"])) if result["runs"] else "none"
    stem = f"benchmark-{m['family']}{m['size']}-{hw}"
    jp, mp = folder / f"{stem}.json", folder / f"{stem}.md"
    jp.write_text(json.dumps(clean(result), indent=1, allow_nan=False) + "\n")
    env = result.get("environment", {})
    mp.write_text(f"# Benchmark {m['family']}-{m['size']}\n\n{env.get('gpu')} · torch {env.get('torch')} · "
                  f"{env.get('date')} · commit `{env.get('commit')}`\n\n" + markdown_table(result))
    return jp, mp


def clean(v: Any) -> Any:
    """Strict-JSON copy: non-finite floats and unknown objects become strings."""
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)
