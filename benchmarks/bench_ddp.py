"""Multi-GPU (DDP) training evidence: one GPU vs two GPUs at the same total batch.

yolo9-t is fine-tuned from the bundled demo checkpoint on a ``shapes`` subset with identical
settings (total batch, epochs, seed, AMP) in three arms, each in its own subprocess with a timeout
so that one arm's failure never loses the others:

* ``1gpu``: ``device="0"`` (one process, no DDP);
* ``2gpu``: ``device="0,1"`` (torchrun, two nccl processes, ``batch/2`` per GPU);
* ``2gpu_syncbn``: ``device="0,1", sync_bn=True`` (skip it with ``--no-sync-bn``);
* with ``--graph``, ``1gpu_graph`` and ``2gpu_graph``: the same with ``cuda_graph=True`` (under DDP
  the graphs hold each rank's local network; gradients are all-reduced outside them).

``--per-gpu-batch`` keeps the batch per GPU fixed instead (one GPU gets ``batch``, two get
``2 * batch`` in total), the comparison issue 26's scaling target is stated in.

Per arm: wall time of ``model.train`` (and of the whole subprocess), training images/s from the
trainer's ``results.csv`` (``time/images_per_s``: the median over epochs 2.., the first epoch
being warm-up), best and final-epoch mAP50-95, the result dict's ``world_size`` and
``rank_digests`` (the ranks' parameter SHA-256 digests; all must be equal), and an error string if
the arm failed. Writes ``<out>/bench_ddp.json`` and ``<out>/bench_ddp.md`` and prints a table.

Usage (needs >= 2 CUDA GPUs; exits 2 otherwise):
    python3 benchmarks/bench_ddp.py --out $OUT [--epochs 6] [--batch 32] [--imgsz 640]
        [--n-train 1280] [--n-val 160] [--workers 8] [--no-sync-bn] [--commit SHA]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import md_table, stamp, write_json, write_result  # noqa: E402

ARMS: dict[str, dict[str, Any]] = {
    "1gpu": {"device": "0", "sync_bn": False, "cuda_graph": False},
    "2gpu": {"device": "0,1", "sync_bn": False, "cuda_graph": False},
    "2gpu_syncbn": {"device": "0,1", "sync_bn": True, "cuda_graph": False},
    # --graph: the captured training step; under DDP the graphs hold the local network and the trainer
    # all-reduces the gradients outside them (libreyolo.training.distributed.GradientReducer)
    "1gpu_graph": {"device": "0", "sync_bn": False, "cuda_graph": True},
    "2gpu_graph": {"device": "0,1", "sync_bn": False, "cuda_graph": True},
}
GRAPH_ARMS = ("1gpu_graph", "2gpu_graph")
TARGET_2GPU_GRAPH = 1.8  # issue 26: two GPUs with capture >= 1.8x one GPU with capture, same per-GPU batch
# NVLink multicast (NVLS) brings nothing to a two-GPU all-reduce; keep it off in every process we start
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _floats(row: dict[str, str], prefix: str) -> dict[str, float]:
    out = {}
    for k, v in row.items():
        if k.startswith(prefix):
            try:
                out[k] = float(v)
            except (TypeError, ValueError):
                out[k] = float("nan")
    return out


def run_arm(*, name: str, out: Path, epochs: int, batch: int, imgsz: int, n_train: int, n_val: int,
            workers: int) -> dict[str, Any]:
    """Train one arm in this process and return its record (see the module docstring)."""
    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset

    spec = ARMS[name]  # train() keys of this arm (device, sync_bn, cuda_graph)
    yaml_path = ensure_shapes_dataset(n_train=n_train, n_val=n_val, imgsz=imgsz, seed=1)
    model = LibreYOLO("LibreYOLO9t.pt")
    t0 = time.perf_counter()
    res = model.train(data=str(yaml_path), epochs=epochs, batch=batch, imgsz=imgsz, workers=workers, seed=0,
                      deterministic=False, amp=True, project=str(out / "runs"), name=name, exist_ok=True,
                      tensorboard=False, plots=False, close_mosaic=min(2, epochs), verbose=False, **spec)
    wall = time.perf_counter() - t0
    with open(Path(res["save_dir"]) / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    ips = [float(r["time/images_per_s"]) for r in rows if r.get("time/images_per_s")]
    steady = ips[1:] or ips
    digests = [str(d) for d in res.get("rank_digests") or []]
    world = int(res.get("world_size", 1))
    sync_left = any(type(m).__name__ == "SyncBatchNorm" for m in model.net.modules())
    return {
        "arm": name, "device": spec["device"], "sync_bn": spec["sync_bn"], "wall_s": wall,
        "images_per_s": statistics.median(steady) if steady else n_train * epochs / wall,
        "images_per_s_source": "results.csv time/images_per_s (median of epochs 2..)" if steady else "wall",
        "images_per_s_epochs": ips,
        "epoch_s": [float(r["time/epoch_s"]) for r in rows if r.get("time/epoch_s")],
        "mAP50-95_best": res.get("mAP50-95"), "mAP50_best": res.get("mAP50"),
        "mAP50-95_final": float(rows[-1]["metrics/mAP50-95"]) if rows and rows[-1].get("metrics/mAP50-95") else None,
        "final_losses": _floats(rows[-1], "train/") if rows else {},
        "epochs_run": res.get("epochs"), "world_size": world, "rank_digests": digests,
        "digests_equal": (len(digests) == world and len(set(digests)) == 1) if world > 1 else None,
        "syncbn_left_in_model": sync_left, "save_dir": res["save_dir"],
        "cuda_graph": spec["cuda_graph"], "capture": res.get("cuda_graph"), "total_batch": batch,
        "result": {k: v for k, v in res.items() if isinstance(v, (int, float))},
        "rows": rows,
    }


def _descendants(pid: int) -> list[int]:
    """Live descendants of ``pid`` (Linux /proc), parents before children."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(0), []):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out


def _stop_arm(proc: subprocess.Popen, *, grace_s: float = 45.0) -> None:
    """SIGINT the arm (its launcher then stops the torchrun workers), then SIGKILL what is left."""
    tree = _descendants(proc.pid)
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=grace_s)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    for pid in [proc.pid, *tree, *_descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def launch_arm(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one arm in a subprocess (log in ``<out>/bench_ddp_<arm>.log``); never raises."""
    out: Path = args.out
    result_file = out / f"bench_ddp_{name}.result.json"
    result_file.unlink(missing_ok=True)
    log_path = out / f"bench_ddp_{name}.log"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(out), "--arm", name,
           "--result-file", str(result_file), "--epochs", str(args.epochs),
           "--batch", str(args.batch * (2 if args.per_gpu_batch and ARMS[name]["device"] != "0" else 1)),
           "--imgsz", str(args.imgsz), "--n-train", str(args.n_train), "--n-val", str(args.n_val),
           "--workers", str(args.workers)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    t0 = time.perf_counter()
    timed_out = False
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop_arm(proc)
            rc = proc.returncode
        except BaseException:
            _stop_arm(proc)
            raise
    process_wall = time.perf_counter() - t0
    rec: dict[str, Any] = {"arm": name, **ARMS[name]}
    if result_file.is_file():
        try:
            rec.update(json.loads(result_file.read_text()))
        except json.JSONDecodeError as e:
            rec["error"] = f"unreadable result file {result_file}: {e}"
    if timed_out:
        rec["error"] = f"timed out after {args.timeout:.0f} s (see {log_path.name})"
    elif "wall_s" not in rec and "error" not in rec:
        tail = log_path.read_text(errors="replace")[-1500:] if log_path.is_file() else ""
        rec["error"] = f"exit code {rc}, no result (see {log_path.name}): ...{tail}"
    rec["process_wall_s"] = process_wall
    rec["returncode"] = rc
    return rec


def _fmt(v: Any, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def summarize(arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    s: dict[str, Any] = {}
    one = arms.get("1gpu", {})
    pairs = [("1gpu", "2gpu"), ("1gpu", "2gpu_syncbn"), ("1gpu_graph", "2gpu_graph")]
    for base, name in pairs:
        one, two = arms.get(base, {}), arms.get(name, {})
        if one.get("images_per_s") and two.get("images_per_s"):
            s[f"{name}_throughput_speedup"] = two["images_per_s"] / one["images_per_s"]
            s[f"{name}_scaling_efficiency"] = s[f"{name}_throughput_speedup"] / 2
        if one.get("wall_s") and two.get("wall_s"):
            s[f"{name}_wall_speedup"] = one["wall_s"] / two["wall_s"]
        if one.get("mAP50-95_best") is not None and two.get("mAP50-95_best") is not None:
            s[f"{name}_map_delta"] = two["mAP50-95_best"] - one["mAP50-95_best"]
    g2, e2 = arms.get("2gpu_graph", {}), arms.get("2gpu", {})
    if g2.get("images_per_s") and e2.get("images_per_s"):
        s["2gpu_graph_vs_2gpu_eager"] = g2["images_per_s"] / e2["images_per_s"]
    if "2gpu_graph_throughput_speedup" in s:
        s["target_2gpu_graph"] = {"min": TARGET_2GPU_GRAPH, "value": s["2gpu_graph_throughput_speedup"],
                                  "ok": s["2gpu_graph_throughput_speedup"] >= TARGET_2GPU_GRAPH
                                  and s.get("2gpu_graph_vs_2gpu_eager", 0.0) > 1.0}
    ddp = [a for n, a in arms.items() if ARMS[n]["device"] != "0" and "error" not in a]
    s["ddp_digests_all_equal"] = bool(ddp) and all(a.get("digests_equal") is True and a.get("world_size") == 2
                                                   for a in ddp)
    s["failed_arms"] = [n for n, a in arms.items() if "error" in a]
    return s


def table_rows(arms: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for name, a in arms.items():
        d = a.get("rank_digests") or []
        rows.append({
            "arm": name, "device": a.get("device"), "sync_bn": a.get("sync_bn"), "graph": a.get("cuda_graph"),
            "batch": a.get("total_batch", "-"), "world": a.get("world_size", "-"),
            "wall s": _fmt(a.get("wall_s"), ".1f"), "img/s": _fmt(a.get("images_per_s"), ".1f"),
            "mAP50-95 best": _fmt(a.get("mAP50-95_best"), ".4f"), "mAP50-95 final": _fmt(a.get("mAP50-95_final"), ".4f"),
            "digests": ("equal " if a.get("digests_equal") else "DIFFER ") + d[0][:12] if d else "-",
            "error": (str(a["error"]).splitlines() or [""])[0][:120] if "error" in a else "",
        })
    return rows


def write_report(args: argparse.Namespace, arms: dict[str, dict[str, Any]]) -> str:
    env = stamp(args.commit)
    import torch

    env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    summary = summarize(arms)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("arm",
                                                                                                      "result_file")}
    cols = ["arm", "device", "sync_bn", "graph", "batch", "world", "wall s", "img/s", "mAP50-95 best", "mAP50-95 final", "digests",
            "error"]
    lines = [f"# DDP training: 1 GPU vs 2 GPUs\n\n{len(env['gpus'])} x {env['gpu']} · torch {env['torch']} · "
             f"CUDA {env['cuda']} · {env['date']} · commit {env['commit']}\n",
             f"yolo9-t from the demo checkpoint, shapes subset ({args.n_train} train / {args.n_val} val, seed 1) at "
             f"{args.imgsz} px, " + (f"batch {args.batch} per GPU (total {2 * args.batch} on two)" if args.per_gpu_batch
                                      else f"total batch {args.batch} (per GPU {args.batch // 2} on two)")
             + f", {args.epochs} epochs, "
             f"AMP, seed 0, {args.workers} loader workers per process, one subprocess per arm. img/s = median of "
             "the trainer's per-epoch training throughput over epochs 2.. (whole dataset / epoch training time).\n",
             md_table(table_rows(arms), cols), ""]
    for k, v in summary.items():
        lines.append(f"- {k}: {_fmt(v, '.3f') if isinstance(v, float) else v}")
    md = "\n".join(lines) + "\n"
    write_result(args.out / "bench_ddp.json", numbers={"summary": summary, "arms": arms}, env=env,
                 extra={"gpus": env["gpus"], "settings": settings}, markdown=md)
    return md


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for bench_ddp.json/.md, logs and runs")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch", type=int, default=32, help="total batch (split over the GPUs under DDP)")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--n-train", type=int, default=1280)
    ap.add_argument("--n-val", type=int, default=160)
    ap.add_argument("--workers", type=int, default=8, help="data loader workers per process")
    ap.add_argument("--no-sync-bn", action="store_true", help="skip the 2gpu_syncbn arm")
    ap.add_argument("--graph", action="store_true", help="add the cuda_graph=True arms (1gpu_graph, 2gpu_graph)")
    ap.add_argument("--per-gpu-batch", action="store_true",
                    help="--batch is per GPU: two-GPU arms train at twice the total batch")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per arm before it is stopped")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--arm", choices=tuple(ARMS), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result-file", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out = args.out.resolve()  # the torchrun workers get absolute run paths
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for k, v in NCCL_ENV.items():
        os.environ.setdefault(k, v)
    if args.arm is not None:  # child process: one arm
        import logging

        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        try:
            rec = run_arm(name=args.arm, out=args.out, epochs=args.epochs, batch=args.batch, imgsz=args.imgsz,
                          n_train=args.n_train, n_val=args.n_val, workers=args.workers)
            rc = 0
        except Exception as e:  # noqa: BLE001 - recorded for the report; the other arms go on
            rec = {"arm": args.arm, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            traceback.print_exc()
            rc = 1
        if args.result_file is not None:
            write_json(args.result_file, rec)
        return rc

    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        print(f"bench_ddp: needs at least 2 CUDA GPUs, this machine has {n}; nothing run.", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    from libreyolo.data.shapes import ensure_shapes_dataset

    t0 = time.perf_counter()
    ensure_shapes_dataset(n_train=args.n_train, n_val=args.n_val, imgsz=args.imgsz, seed=1)  # outside the timing
    print(f"dataset ready in {time.perf_counter() - t0:.1f} s", flush=True)
    arms: dict[str, dict[str, Any]] = {}
    for name in ARMS:
        if (name == "2gpu_syncbn" and args.no_sync_bn) or (name in GRAPH_ARMS and not args.graph):
            continue
        arms[name] = launch_arm(name, args)
        a = arms[name]
        print(f"{name}: wall {_fmt(a.get('wall_s'), '.1f')} s, {_fmt(a.get('images_per_s'), '.1f')} img/s, "
              f"mAP50-95 {_fmt(a.get('mAP50-95_best'), '.4f')}, world_size {a.get('world_size', '-')}, "
              f"digests equal {a.get('digests_equal')}" + (f", ERROR {a['error'][:300]}" if "error" in a else ""),
              flush=True)
        write_report(args, arms)  # partial results survive a later crash
    print(write_report(args, arms))
    return 0 if not summarize(arms)["failed_arms"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
