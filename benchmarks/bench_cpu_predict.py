"""CPU prediction latency of the bundled yolo9-t at 640 px, split into pre/inference/post.

Usage: python3 benchmarks/bench_cpu_predict.py --out benchmarks/results [--threads N]
Medians over --iters calls after --warmup calls, on SAMPLE_IMAGE, using the ``speed`` field every
Results carries (synchronised wall clock per stage).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import md_table, stamp, write_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--commit", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from libreyolo import SAMPLE_IMAGE, LibreYOLO

    rows = []
    for fused in (False, True):
        model = LibreYOLO("LibreYOLO9t.pt", device="cpu")
        if fused:
            model.fuse()
        for _ in range(args.warmup):
            model(SAMPLE_IMAGE, imgsz=args.imgsz)
        speeds = [model(SAMPLE_IMAGE, imgsz=args.imgsz)[0].speed for _ in range(args.iters)]
        row = {"model": "yolo9-t" + (" (fused)" if fused else ""), "imgsz": args.imgsz}
        for k in ("preprocess", "inference", "postprocess"):
            row[f"{k}_ms"] = round(statistics.median(s[k] for s in speeds), 2)
        row["total_ms"] = round(sum(row[f"{k}_ms"] for k in ("preprocess", "inference", "postprocess")), 2)
        rows.append(row)
        print(row, flush=True)
    env = stamp(args.commit) | {"cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                                "torch_threads": torch.get_num_threads()}
    md = (f"# CPU prediction latency\n\n{env['cpu']} ({env['cpu_count']} cores, {env['torch_threads']} torch threads) · "
          f"torch {env['torch']} · {env['date']} · commit {env['commit']}\n\n"
          f"Bundled LibreYOLO9t.pt on SAMPLE_IMAGE (640x480) at {args.imgsz} px, batch 1; medians of {args.iters} "
          "calls after warm-up.\n\n" + md_table(rows, list(rows[0].keys())) + "\n")
    write_result(args.out / "bench_cpu_predict.json", numbers={"iters": args.iters, "rows": rows}, env=env,
                 extra={k: env[k] for k in ("cpu", "cpu_count", "torch_threads")}, markdown=md)
    print(md)


if __name__ == "__main__":
    main()
