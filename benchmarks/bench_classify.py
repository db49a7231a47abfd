"""Classification families on the GPU: predict network step and training step, eager vs CUDA graph.

For each classify family x size (capability ``OUTPUT_KIND == "probs"``), untrained, seeded, 6 classes:

* predict: the network forward (``model.eager_forward`` vs ``PredictGraphs(force=True)`` replay)
  at batch 1 and 8, AMP fp16, fused model; fastest and median of ``--iters`` after warm-up.
* train: one full step (zero_grad, forward, label-smoothed CE, scaled backward, unscale,
  clipping, SGD step, scaler update, EMA lerp) at batch 16 (``--train-batch``), AMP fp16, eager
  vs ``TrainGraphs`` capture; fastest and median of 24 steps after 10 warm-up steps, plus the
  eager network share (forward + backward alone over the full step).

The flags stay as they are: this measures speed; parity is ``parity_predict.py`` /
``parity_train.py``. Writes ``<out>/bench_classify.json`` and ``.md``; prints the table.

Usage (GPU): python3 benchmarks/bench_classify.py --out $OUT [--families resnet] [--imgsz 224]

``--kind semantic`` measures the semantic-segmentation families (``OUTPUT_KIND == "semantic"``) the
same way, their training batch carrying a random mask of class ids (pixel cross-entropy), and
writes ``<out>/bench_semantic.json`` and ``.md``:

    python3 benchmarks/bench_classify.py --kind semantic --imgsz 512 --train-batch 8 --out $OUT

``--kind depth`` measures the depth families (``OUTPUT_KIND == "depth"``; ``--imgsz`` a multiple of
14), their training batch carrying a random positive depth per pixel (scale-and-shift-invariant
loss), and writes ``<out>/bench_depth.json`` and ``.md``:

    python3 benchmarks/bench_classify.py --kind depth --imgsz 518 --train-batch 8 --out $OUT
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import make_train_step, md_table, stamp, write_result  # noqa: E402
from libreyolo.bench.timing import time_wall  # noqa: E402

STEPS, WARMUP = 24, 10


def _timed(fn: Any, *, iters: int, warmup: int) -> tuple[float, float]:
    """Fastest and median ms of ``fn`` (synchronised clock) after ``warmup`` calls."""
    t = time_wall(fn, device=torch.device("cuda", torch.cuda.current_device()), iters=iters, warmup=warmup)
    return t["min_ms"], t["median_ms"]


def bench_predict(fam: type, size: str, *, batch: int, imgsz: int, iters: int) -> dict[str, Any]:
    from libreyolo.graphs.runner import PredictGraphs

    torch.manual_seed(0)
    model = fam(size=size, nc=6).to("cuda:0")
    model.fuse()
    x = torch.rand(batch, 3, imgsz, imgsz, device="cuda:0")
    amp = torch.float16
    e_fast, e_med = _timed(lambda: model.eager_forward(x, amp_dtype=amp), iters=iters, warmup=10)
    runner = PredictGraphs(model, force=True, capacity=2)
    g_fast, g_med = _timed(lambda: runner.run(x, policy=True, amp_dtype=amp), iters=iters, warmup=10)
    same = bool(torch.equal(model.eager_forward(x, amp_dtype=amp), runner.run(x, policy=True, amp_dtype=amp)))
    info = runner.info()["graphs"]
    runner.release()
    return {"kind": "predict", "family": fam.FAMILY, "size": size, "batch": batch, "imgsz": imgsz, "amp": "float16",
            "eager_fastest_ms": e_fast, "eager_median_ms": e_med, "graph_fastest_ms": g_fast,
            "graph_median_ms": g_med, "speedup_fastest": e_fast / g_fast, "replay_equals_eager": same,
            "capture_ms": info[0]["capture_ms"] if info else None}


def _train_arm(fam: type, size: str, *, graph: bool, batch: int, imgsz: int) -> dict[str, Any]:
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = fam(size=size, nc=6)
    net = model.net.to(device).train()
    crit = model.build_criterion()
    g = torch.Generator().manual_seed(1)
    data = {"img": torch.rand(batch, 3, imgsz, imgsz, generator=g).to(device),
            "cls": torch.randint(0, 6, (batch,), generator=g).to(device)}
    if getattr(fam, "OUTPUT_KIND", "boxes") == "semantic":  # a class id per pixel
        data["mask"] = torch.randint(0, 6, (batch, imgsz, imgsz), generator=g).to(device)
    if getattr(fam, "OUTPUT_KIND", "boxes") == "depth":  # a depth per pixel
        data["depth"] = (torch.rand(batch, imgsz, imgsz, generator=g) * 9 + 1).to(device)
    amp_dtype = torch.float16
    step, graphs = make_train_step(net, crit, data, graph=graph, amp_dtype=amp_dtype)

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fast, med = _timed(step, iters=STEPS, warmup=WARMUP)
    res = {"fastest_ms": fast, "median_ms": med, "peak_mib": torch.cuda.max_memory_allocated() / 2**20,
           "captured": bool(graphs.info().get("graphs"))}
    if not graph:
        def fwd_bwd() -> None:
            with torch.autocast("cuda", dtype=amp_dtype):
                out = net(data["img"])
            out.float().sum().backward()

        nf, _ = _timed(fwd_bwd, iters=STEPS, warmup=3)
        res["network_share"] = nf / fast
    torch.cuda.empty_cache()
    return res


def bench_train(fam: type, size: str, *, batch: int, imgsz: int) -> dict[str, Any]:
    e = _train_arm(fam, size, graph=False, batch=batch, imgsz=imgsz)
    g = _train_arm(fam, size, graph=True, batch=batch, imgsz=imgsz)
    return {"kind": "train", "family": fam.FAMILY, "size": size, "batch": batch, "imgsz": imgsz, "amp": "float16",
            "eager_fastest_ms": e["fastest_ms"], "eager_median_ms": e["median_ms"],
            "graph_fastest_ms": g["fastest_ms"], "graph_median_ms": g["median_ms"],
            "speedup_fastest": e["fastest_ms"] / g["fastest_ms"], "network_share": e["network_share"],
            "captured": g["captured"], "eager_peak_mib": e["peak_mib"], "graph_peak_mib": g["peak_mib"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--families", default="", help="comma list (default: every family of --kind)")
    ap.add_argument("--kind", default="probs", choices=("probs", "semantic", "depth"),
                    help="probs: the classification families; semantic: the semantic-segmentation ones; "
                         "depth: the depth ones")
    ap.add_argument("--imgsz", type=int, default=224)
    ap.add_argument("--predict-batches", default="1,8")
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--commit", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_classify.py needs a CUDA GPU", file=sys.stderr)
        return 2
    from libreyolo.registry import families

    want = [f for f in args.families.split(",") if f]
    fams = [c for n, c in sorted(families().items())
            if getattr(c, "OUTPUT_KIND", "boxes") == args.kind and (not want or n in want)]
    rows: list[dict[str, Any]] = []
    for fam in fams:
        for size in fam.SIZES:
            jobs = [("predict", b) for b in (int(v) for v in args.predict_batches.split(",") if v)]
            jobs.append(("train", args.train_batch))
            for kind, b in jobs:
                try:
                    row = (bench_predict(fam, size, batch=b, imgsz=args.imgsz, iters=args.iters) if kind == "predict"
                           else bench_train(fam, size, batch=b, imgsz=args.imgsz))
                except Exception as e:  # noqa: BLE001 - record the failure as a row, keep measuring the rest
                    traceback.print_exc()
                    row = {"kind": kind, "family": fam.FAMILY, "size": size, "batch": b, "error": repr(e)[:300]}
                rows.append(row)
                print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    env = stamp(args.commit)
    cols = ["kind", "family", "size", "batch", "eager_fastest_ms", "graph_fastest_ms", "speedup_fastest",
            "eager_median_ms", "graph_median_ms", "network_share", "error"]
    title, stem = {"probs": ("Classification", "bench_classify"), "semantic": ("Semantic-segmentation", "bench_semantic"),
                   "depth": ("Depth", "bench_depth")}[args.kind]
    md = (f"# {title} families: eager vs CUDA graph (H200, AMP fp16)\n\n"
          "Generated by `benchmarks/bench_classify.py`; do not edit by hand.\n\n"
          f"GPU: {env['gpu']} · torch {env['torch']} (CUDA {env['cuda']}) · {env['date']} · commit {env['commit']} · "
          f"{args.imgsz} px\n\n"
          + md_table([{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in rows], cols)
          + "\n")
    write_result(args.out / f"{stem}.json", numbers={"imgsz": args.imgsz, "rows": rows}, env=env, markdown=md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
