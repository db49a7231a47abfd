"""End-to-end fine-tune, eager vs ``--cuda-graph`` (issue 5 benchmark).

Two processes, one per arm, each running ``model.train(...)`` from the bundled demo checkpoint on
a 640 px ``shapes`` subset with identical settings and seed; reports wall time, final mAP50-95 and
the per-epoch losses side by side.

Usage (GPU): python3 benchmarks/finetune_graph.py --out $OUT [--epochs 20] [--commit SHA]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import md_table, stamp, write_result  # noqa: E402


def arm(*, graph: bool, out: Path, epochs: int, batch: int, imgsz: int, n_train: int, n_val: int) -> dict[str, Any]:
    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset

    yaml_path = ensure_shapes_dataset(n_train=n_train, n_val=n_val, imgsz=imgsz, seed=1)
    model = LibreYOLO("LibreYOLO9t.pt")
    t0 = time.perf_counter()
    res = model.train(data=str(yaml_path), epochs=epochs, batch=batch, imgsz=imgsz, workers=8, seed=0,
                      deterministic=False, amp=True, cuda_graph=graph, project=str(out / "runs"),
                      name="graph" if graph else "eager", exist_ok=True, tensorboard=False, plots=False,
                      close_mosaic=5)
    wall = time.perf_counter() - t0
    rows = list(csv.DictReader(open(Path(res["save_dir"]) / "results.csv")))
    return {"graph": graph, "wall_s": wall, "final": {k: v for k, v in res.items() if isinstance(v, (int, float))},
            "cuda_graph": res.get("cuda_graph"), "epochs": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--n-train", type=int, default=400)
    ap.add_argument("--n-val", type=int, default=100)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--arm", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    kw = dict(out=args.out, epochs=args.epochs, batch=args.batch, imgsz=args.imgsz, n_train=args.n_train, n_val=args.n_val)
    if args.arm is not None:
        print("RESULT " + json.dumps(arm(graph=args.arm == "graph", **kw)), flush=True)
        return
    from libreyolo.data.shapes import ensure_shapes_dataset

    ensure_shapes_dataset(n_train=args.n_train, n_val=args.n_val, imgsz=args.imgsz, seed=1)  # outside the timing
    arms = {}
    for name in ("eager", "graph"):
        cmd = [sys.executable, __file__, "--out", str(args.out), "--arm", name, "--epochs", str(args.epochs),
               "--batch", str(args.batch), "--imgsz", str(args.imgsz), "--n-train", str(args.n_train),
               "--n-val", str(args.n_val)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        (args.out / f"finetune_{name}.log").write_text(p.stdout[-20000:] + "\n" + p.stderr[-20000:])
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        arms[name] = json.loads(line[0][7:]) if line else {"error": p.stderr[-2000:]}
        print(name, {k: arms[name].get(k) for k in ("wall_s", "final", "error")}, flush=True)
    e, g = arms["eager"], arms["graph"]
    env = stamp(args.commit)
    settings = vars(args) | {"out": str(args.out)}
    summary: dict[str, Any] = {"arms": arms}
    if "wall_s" in e and "wall_s" in g:
        summary["speedup"] = e["wall_s"] / g["wall_s"]
        summary["map_delta"] = g["final"].get("mAP50-95", 0) - e["final"].get("mAP50-95", 0)
    rows = []
    for re_, rg in zip(e.get("epochs", []), g.get("epochs", []), strict=False):
        row = {"epoch": re_.get("epoch")}
        for k in re_:
            if k.startswith("train/") or k.startswith("metrics/mAP50-95"):
                row[f"eager {k}"] = re_[k]
                row[f"graph {k}"] = rg.get(k)
        rows.append(row)
    md = (f"# Fine-tune: eager vs --cuda-graph\n\n{env['gpu']} · torch {env['torch']} · {env['date']} · commit {env['commit']}\n\n"
          f"yolo9-t from the demo checkpoint, shapes subset ({args.n_train} train / {args.n_val} val) at {args.imgsz} px, "
          f"batch {args.batch}, {args.epochs} epochs, AMP, seed 0, one process per arm.\n\n"
          f"| arm | wall s | mAP50-95 |\n|---|---|---|\n"
          f"| eager | {e.get('wall_s', float('nan')):.1f} | {e.get('final', {}).get('mAP50-95', float('nan')):.4f} |\n"
          f"| graph | {g.get('wall_s', float('nan')):.1f} | {g.get('final', {}).get('mAP50-95', float('nan')):.4f} |\n\n"
          f"Speed-up: {summary.get('speedup', float('nan')):.3f}x\n\n## Per epoch\n\n"
          + (md_table(rows, list(rows[0].keys())) if rows else "(no rows)") + "\n")
    write_result(args.out / "finetune_graph.json", numbers=summary, env=env, extra={"settings": settings}, markdown=md)
    print(md)


if __name__ == "__main__":
    main()
