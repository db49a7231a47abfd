"""Cost of one YOLOv9 loss call (forward + backward to the predictions): current vs frozen reference.

The reference is the earlier implementation (boolean-mask indexing, host branches) in
``benchmarks/references/yolo9_loss.py`` (``make_reference``), together with the batch generators
its test uses. Shapes: yolo9-t head (nc 80, reg_max 16, strides 8/16/32) at
``--imgsz`` (640: 8400 anchors), batch 8 and 16, 10-40 boxes per image (seeded). Labels are timed
both on the CPU (what the trainer passes: the data loader's output) and already on the device.

Per configuration (medians after warm-up): ``gpu_ms`` (CUDA events around one call, GPU idle
before it) and ``wall_ms`` (host clock, synchronised); ``pipelined_ms`` (calls back to back, one
synchronisation at the end: the cost when the host may run ahead); ``behind_busy_ms`` (the call
queued behind ``--busy-ms`` of GPU work standing in for the network, minus that time: host
synchronisations in the loss forbid the overlap a training step relies on). One profiled call
counts aten ops, kernel launches, host synchronisations and scalar reads. ``items_rel`` and
``grad_rel``: parity of the loss items and the gradients of the two implementations here.

Usage (GPU): python3 benchmarks/bench_loss.py --out $OUT
CPU smoke test: python3 benchmarks/bench_loss.py --out /tmp/bl --device cpu \
    --imgsz 160 --batches 2 --iters 3 --warmup 1
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import md_table, stamp, write_result  # noqa: E402
from libreyolo.bench.timing import (  # noqa: E402
    busy_cycles_per_ms,
    time_behind_busy,
    time_events,
    time_pipelined,
    time_wall,
)
from libreyolo.models.yolo9.loss import YOLO9Loss  # noqa: E402

LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def load_reference_module() -> ModuleType:
    """The module holding the frozen reference loss and the batch generators."""
    from benchmarks.references import yolo9_loss

    return yolo9_loss


def timed(fn: Callable[[], Any], *, iters: int, warmup: int, device: torch.device) -> dict[str, float]:
    """Median ms of ``fn`` after ``warmup`` calls: host clock (synchronised), CUDA events (the GPU
    idle before each call) and back to back with one synchronisation at the end (``pipelined_ms``:
    what a host that may run ahead pays per call)."""
    out = {"wall_ms": round(time_wall(fn, device=device, iters=iters, warmup=warmup)["median_ms"], 3)}
    if device.type == "cuda":
        gpu = time_events(fn, device=device, iters=iters, warmup=0, sync_each=True)
        out["gpu_ms"] = round(gpu["median_ms"], 3)
    out["pipelined_ms"] = round(time_pipelined(fn, device=device, iters=iters), 3)
    return out


def count_ops(fn: Callable[[], Any], device: torch.device) -> dict[str, Any]:
    """One profiled call: aten ops (all nesting levels), scalar reads, kernel launches, syncs."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    try:
        with profile(activities=acts) as prof:
            fn()
        events = list(prof.events())
    except RuntimeError as e:  # documented fallback: counts are optional, timings are not
        return {"profile_error": str(e)[:200]}
    names = [e.name for e in events]
    out: dict[str, Any] = {
        "aten_ops": sum(n.startswith("aten::") for n in names),
        "scalar_reads": names.count("aten::_local_scalar_dense"),
        "nonzero": names.count("aten::nonzero"),
    }
    if device.type == "cuda":
        out["launches"] = sum(names.count(n) for n in LAUNCH_NAMES)
        out["syncs"] = sum("Synchronize" in n for n in names)
        out["memcpy"] = sum(n.startswith("cudaMemcpy") for n in names)
        out["gpu_events"] = sum(str(getattr(e, "device_type", "")).endswith("CUDA") for e in events)
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = b.abs().max().item()
    diff = (a.double() - b.double()).abs().max().item()
    return diff / scale if scale > 0 else diff


def run_config(*, ref_mod: ModuleType, batch: int, imgsz: int, nc: int, labels_on: str, device: torch.device,
               dtype: torch.dtype, iters: int, warmup: int, seed: int, busy_ms: float,
               cycles_per_ms: int | None) -> list[dict[str, Any]]:
    net = SimpleNamespace(nc=nc, reg_max=16, strides=(8, 16, 32))
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(10, 41, (batch,), generator=g).tolist()
    labels = ref_mod.make_batch(counts=counts, nc=nc, seed=seed)
    if labels_on == "device":
        labels = {k: v.to(device) for k, v in labels.items()}
    preds = [p.detach().to(dtype).requires_grad_(True)
             for p in ref_mod.make_preds(batch=batch, imgsz=imgsz, nc=nc, reg_max=16, seed=seed,
                                         device=device, requires_grad=False)]
    impls = {"reference": ref_mod.make_reference(net).to(device), "current": YOLO9Loss(net).to(device)}
    results: dict[str, Any] = {}
    rows = []
    for name, crit in impls.items():
        def call(crit: Any = crit) -> tuple[torch.Tensor, list[torch.Tensor]]:
            for p in preds:
                p.grad = None
            loss, items = crit(preds, labels)
            loss.backward()
            return items, [p.grad for p in preds]

        items, grads = call()
        results[name] = (items.detach().cpu(), [gr.detach().float().cpu() for gr in grads])
        row: dict[str, Any] = {"batch": batch, "imgsz": imgsz, "labels_on": labels_on, "impl": name,
                               "boxes": sum(counts)}
        row.update(timed(call, iters=iters, warmup=warmup, device=device))
        if cycles_per_ms:
            busy = time_behind_busy(call, busy_ms=busy_ms, cycles_per_ms=cycles_per_ms, iters=iters, device=device)
            row["behind_busy_ms"] = round(busy["median_ms"], 3)
        row.update(count_ops(call, device))
        rows.append(row)
    (items_r, grads_r), (items_c, grads_c) = results["reference"], results["current"]
    parity = {"items_rel": _rel(items_c, items_r),
              "grad_rel": max(_rel(a, b) for a, b in zip(grads_c, grads_r, strict=True))}
    key = "gpu_ms" if "gpu_ms" in rows[0] else "wall_ms"
    for row in rows:
        row.update({k: f"{v:.1e}" for k, v in parity.items()})
        row["speedup"] = round(rows[0][key] / row[key], 2)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--nc", type=int, default=80)
    ap.add_argument("--labels-on", nargs="+", default=["cpu", "device"], choices=["cpu", "device"])
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"],
                    help="dtype of the raw head outputs (AMP training gives float16)")
    ap.add_argument("--busy-ms", type=float, default=10.0,
                    help="GPU work queued before each call in the behind_busy_ms column (0: skip)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    ref_mod = load_reference_module()
    cycles_per_ms = busy_cycles_per_ms(device) if args.busy_ms > 0 else None
    rows: list[dict[str, Any]] = []
    for b in args.batches:
        for where in args.labels_on:
            rows += run_config(ref_mod=ref_mod, batch=b, imgsz=args.imgsz, nc=args.nc, labels_on=where,
                               device=device, dtype=dtype, iters=args.iters, warmup=args.warmup, seed=b,
                               busy_ms=args.busy_ms, cycles_per_ms=cycles_per_ms)
    cols = ["batch", "labels_on", "impl", "boxes", "gpu_ms", "wall_ms", "pipelined_ms", "behind_busy_ms",
            "speedup", "launches", "syncs", "memcpy", "gpu_events", "aten_ops", "scalar_reads", "nonzero",
            "items_rel", "grad_rel"]
    cols = [c for c in cols if any(c in r for r in rows)]
    table = md_table(rows, cols)
    env = stamp(args.commit)
    numbers = {"dtype": args.dtype, "imgsz": args.imgsz, "busy_ms": args.busy_ms,
               "sleep_cycles_per_ms": cycles_per_ms, "nc": args.nc, "iters": args.iters, "warmup": args.warmup,
               "rows": rows}
    write_result(args.out / "bench_loss.json", numbers=numbers, env=env, markdown=(
        f"# YOLOv9 loss: forward + backward per call\n\n{env}\n\n"
        f"imgsz {args.imgsz}, nc {args.nc}, head dtype {args.dtype}, median of {args.iters} after "
        f"{args.warmup} warm-up; speedup vs the frozen reference ({'gpu_ms' if 'gpu_ms' in cols else 'wall_ms'}).\n\n"
        f"{table}\n"))
    print(table)


if __name__ == "__main__":
    main()
