"""Training-step speed with and without CUDA-graph capture (SPEC T-*, issue 5 benchmark).

One process per arm (eager / graph x batch x precision), one real batch from the built-in shapes
dataset replayed every step (the data loader is out of the measurement), full training step:
zero_grad, forward, loss + assignment, scaled backward, unscale, gradient clipping, SGD step,
scaler update, EMA update. Reported: fastest and median of 24 steps after warm-up (synchronised
clock), the network share of an eager step (forward+backward alone over the full step), and peak
memory per arm.

Usage (GPU): python3 benchmarks/bench_train_graph.py --out $OUT [--model LibreYOLO9t.pt]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import make_train_step, md_table, stamp, write_result  # noqa: E402
from libreyolo.bench.timing import time_wall  # noqa: E402

STEPS, WARMUP = 24, 10


def real_batch(batch: int, imgsz: int, device: torch.device) -> dict[str, Any]:
    from libreyolo.data.config import load_data_config
    from libreyolo.data.dataset import DetectionDataset, collate_detection
    from libreyolo.data.shapes import ensure_shapes_dataset

    yaml_path = ensure_shapes_dataset(n_train=max(64, batch), n_val=8, imgsz=imgsz, seed=0)
    cfg = load_data_config(str(yaml_path))
    ds = DetectionDataset(cfg.train[: max(64, batch)], imgsz=imgsz, augment=True, nc=cfg.nc)
    b = collate_detection([ds[i] for i in range(batch)])
    out = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
    out["img"] = out["img"].float() / 255
    return out


def arm(name: str, *, graph: bool, batch: int, imgsz: int, amp: bool) -> dict[str, Any]:
    from libreyolo import LibreYOLO
    from libreyolo.graphs.seam import flatten

    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = LibreYOLO(name, pretrained=False, nc=6)
    net = model.net.to(device).train()
    crit = model.build_criterion()
    data = real_batch(batch, imgsz, device)
    amp_dtype = torch.float16 if amp else None
    step, graphs = make_train_step(net, crit, data, graph=graph, amp_dtype=amp_dtype)

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()  # before warm-up: the graph arm's capture pool counts too
    t = time_wall(step, device=device, iters=STEPS, warmup=WARMUP)
    peak = torch.cuda.max_memory_allocated() / 2**20
    reserved = torch.cuda.max_memory_reserved() / 2**20
    res = {"graph": graph, "batch": batch, "imgsz": imgsz, "amp": amp, "fastest_ms": t["min_ms"],
           "median_ms": t["median_ms"], "peak_mib": peak, "peak_reserved_mib": reserved, "capture": graphs.info()}
    if not graph:  # network share: forward + backward alone, eager
        def fwd_bwd() -> None:
            with torch.autocast("cuda", dtype=amp_dtype or torch.float32, enabled=amp):
                preds = net(data["img"])
            leaves = [t for t in flatten(preds)[0] if t.requires_grad]  # one tensor (FOMO), a list, or a tree
            torch.autograd.backward(leaves, [torch.ones_like(t) for t in leaves])

        net_fastest = time_wall(fwd_bwd, device=device, iters=STEPS, warmup=0)["min_ms"]
        res["network_fwd_bwd_fastest_ms"] = net_fastest
        res["network_share"] = net_fastest / t["min_ms"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="LibreYOLO9t.pt")
    ap.add_argument("--batches", default="8,16")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--arm", default=None, help=argparse.SUPPRESS)  # child process: one arm as JSON
    args = ap.parse_args()
    if args.arm:
        spec = json.loads(args.arm)
        print("RESULT " + json.dumps(arm(args.model, **spec)), flush=True)
        return
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        for amp in (True, False):
            pair = {}
            for graph in (False, True):
                spec = json.dumps({"graph": graph, "batch": batch, "imgsz": args.imgsz, "amp": amp})
                p = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--model", args.model,
                                    "--arm", spec], capture_output=True, text=True, timeout=600)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
                if p.returncode != 0 or not line:
                    pair[graph] = {"error": (p.stderr or p.stdout)[-1500:]}
                    print(f"arm {spec} failed:\n{p.stderr[-1500:]}", flush=True)
                    continue
                pair[graph] = json.loads(line[0][7:])
            e, g = pair.get(False, {}), pair.get(True, {})
            row = {"model": args.model, "batch": batch, "amp": amp, "imgsz": args.imgsz,
                   "eager_fastest_ms": e.get("fastest_ms"), "graph_fastest_ms": g.get("fastest_ms"),
                   "eager_median_ms": e.get("median_ms"), "graph_median_ms": g.get("median_ms"),
                   "network_share": e.get("network_share"), "eager_peak_mib": e.get("peak_mib"),
                   "graph_peak_mib": g.get("peak_mib"), "graph_capture": g.get("capture"),
                   "errors": {k: v["error"] for k, v in (("eager", e), ("graph", g)) if "error" in v}}
            if e.get("fastest_ms") and g.get("fastest_ms"):
                row["speedup_fastest"] = e["fastest_ms"] / g["fastest_ms"]
                row["speedup_median"] = e["median_ms"] / g["median_ms"]
                row["peak_ratio"] = g["peak_mib"] / e["peak_mib"]
            rows.append(row)
            print({k: row.get(k) for k in ("batch", "amp", "eager_fastest_ms", "graph_fastest_ms", "speedup_fastest", "network_share", "peak_ratio")}, flush=True)
    env = stamp(args.commit)
    fmt = []
    for r in rows:
        fmt.append({k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in r.items() if k not in ("graph_capture", "errors")})
    md = (f"# Training step: eager vs CUDA graph\n\n{env['gpu']} · torch {env['torch']} · {env['date']} · commit {env['commit']}\n\n"
          "Fastest and median of 24 full training steps after 10 warm-up steps, one process per arm, one real batch replayed.\n\n"
          + md_table(fmt, ["model", "batch", "amp", "imgsz", "eager_fastest_ms", "graph_fastest_ms", "speedup_fastest",
                           "eager_median_ms", "graph_median_ms", "speedup_median", "network_share", "eager_peak_mib",
                           "graph_peak_mib", "peak_ratio"]) + "\n")
    write_result(args.out / "bench_train_graph.json", numbers={"steps": STEPS, "warmup": WARMUP, "rows": rows},
                 env=env, markdown=md)
    print(md)


if __name__ == "__main__":
    main()
