"""Train the bundled demo checkpoint: yolo9-t on the built-in ``shapes`` dataset (issue 3, U-6).

Defaults: shapes with 2000 train / 400 val images at 320 px (generated on first use), imgsz 320,
batch 64, AMP float16, 8 workers, at most 80 epochs within a 300 s training time limit (from the
second epoch on, the trainer cuts the epoch count to what fits and shortens the LR schedule and the
close-mosaic phase to match). Target: mAP50-95 >= 0.70 on the val split.

Writes to --out, after EVERY epoch (so a crash or timeout still leaves results):
  LibreYOLO9t.pt        best EMA weights so far, fp32, no optimiser state
  results.csv           per-epoch losses, metrics, learning rates, epoch times
  progress.json         the last epoch's row
and at the end: metrics.json (final validation by ``model.val``, environment stamp, timings),
command.txt (the exact command), results.png, train_demo.md (summary).

Usage (GPU): python3 benchmarks/train_demo.py --out $OUT [--epochs 80] [--time-limit 300]
             [--batch 64] [--imgsz 320] [--workers 8] [--commit SHA]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import command_line, md_table, stamp, write_json, write_result  # noqa: E402

log = logging.getLogger("train_demo")


def _copy_partial(run_dir: Path, out: Path, row: dict[str, float]) -> None:
    """Per-epoch: mirror results.csv and the best weights into --out (never raises)."""
    try:
        for name in ("results.csv", "results.png"):
            if (run_dir / name).is_file():
                shutil.copyfile(run_dir / name, out / f".{name}.tmp")
                (out / f".{name}.tmp").replace(out / name)
        best = run_dir / "weights" / "best.pt"
        if best.is_file():
            shutil.copyfile(best, out / ".LibreYOLO9t.pt.tmp")
            (out / ".LibreYOLO9t.pt.tmp").replace(out / "LibreYOLO9t.pt")
        write_json(out / "progress.json", row)
    except OSError as e:
        log.warning("could not mirror partial results: %s", e)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--epochs", type=int, default=80, help="upper bound; cut to fit --time-limit")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds of training (0 = none)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--close-mosaic", type=int, default=10)
    ap.add_argument("--optimizer", default="auto", choices=["auto", "SGD", "AdamW"])
    ap.add_argument("--lr0", type=float, default=0.01, help="SGD/AdamW lr when --optimizer is explicit")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--device", default="0", help="'cpu' only for a smoke test of the script")
    ap.add_argument("--n-train", type=int, default=None, help="smoke tests only: a smaller shapes set")
    ap.add_argument("--n-val", type=int, default=None, help="smoke tests only: a smaller shapes set")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.device != "cpu" and not torch.cuda.is_available():
        sys.exit("train_demo.py needs a CUDA GPU")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    command = command_line()
    (out / "command.txt").write_text(command + "\n")
    t_all = time.perf_counter()

    from libreyolo import LibreYOLO
    from libreyolo.data.config import load_data_config
    from libreyolo.data.shapes import ensure_shapes_dataset
    from libreyolo.training.config import TrainConfig
    from libreyolo.training.trainer import Trainer

    t0 = time.perf_counter()
    data = "shapes"  # by name: 2000 + 400 images at 320 px, seed 0, generated on first use
    if args.n_train or args.n_val:
        data = str(ensure_shapes_dataset(out / "data", n_train=args.n_train or 2000, n_val=args.n_val or 400,
                                         imgsz=args.imgsz))
    dcfg = load_data_config(data)
    gen_s = time.perf_counter() - t0
    log.info("shapes dataset ready in %.1f s: %d train, %d val, classes %s", gen_s, len(dcfg.train),
             len(dcfg.val), dcfg.names)

    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=dcfg.nc, names=dcfg.names)
    overrides: dict[str, Any] = dict(
        data=data, epochs=args.epochs, batch=args.batch, imgsz=args.imgsz, workers=args.workers, device=args.device,
        amp=True, deterministic=False, seed=0, close_mosaic=min(args.close_mosaic, args.epochs // 3),
        time_limit=args.time_limit, optimizer=args.optimizer, lr0=args.lr0, project=str(out / "runs"),
        name="demo", exist_ok=True, verbose=True, tensorboard=False, plots=True)
    trainer = Trainer(model, TrainConfig.from_overrides(overrides), explicit=set(overrides))
    trainer.callbacks.append(lambda t, row: _copy_partial(t.save_dir, out, row))

    plain_stamp = json.loads(json.dumps(stamp(args.commit), default=str))  # plain types: weights_only-loadable
    summary: dict[str, Any] = {"train_overrides": overrides, "dataset_generation_s": round(gen_s, 1)}
    t0 = time.perf_counter()
    try:
        result = trainer.fit()
        summary["train_result"] = result
    except Exception as e:  # noqa: BLE001 - record what happened; partial results are already in --out
        log.exception("training failed")
        summary["train_error"] = f"{type(e).__name__}: {e}"
        write_result(out / "metrics.json", numbers=summary, command=command, env=plain_stamp)
        raise
    summary["train_s"] = round(time.perf_counter() - t0, 1)

    try:
        t0 = time.perf_counter()
        metrics = model.val(data=data, imgsz=args.imgsz, batch=args.batch, workers=args.workers, device=args.device)
        summary["val"] = metrics
        summary["val_s"] = round(time.perf_counter() - t0, 1)
    except Exception as e:  # noqa: BLE001
        log.exception("final validation failed")
        summary["val_error"] = f"{type(e).__name__}: {e}"
        metrics = {}

    # final weights: the model holds the best EMA weights (fp32); no optimiser state
    model.save(out / "LibreYOLO9t.pt", train_args=model.train_args,
               metrics={k: float(v) for k, v in metrics.items()}, command=command, stamp=plain_stamp)
    size_mb = (out / "LibreYOLO9t.pt").stat().st_size / 2**20
    summary.update(weights="LibreYOLO9t.pt", weights_mb=round(size_mb, 2), total_s=round(time.perf_counter() - t_all, 1),
                   target_met=bool(metrics.get("mAP50-95", 0.0) >= 0.70))
    for name in ("results.csv", "results.png", "args.yaml"):
        src = Path(trainer.save_dir) / name
        if src.is_file():
            shutil.copyfile(src, out / name)
    write_result(out / "metrics.json", numbers=summary, command=command, env=plain_stamp)
    row = {"model": "yolo9-t", "imgsz": args.imgsz, "epochs": result.get("epochs"),
           "mAP50-95": round(metrics.get("mAP50-95", float("nan")), 4), "mAP50": round(metrics.get("mAP50", float("nan")), 4),
           "P": round(metrics.get("precision", float("nan")), 4), "R": round(metrics.get("recall", float("nan")), 4),
           "train_s": summary["train_s"], "weights_mb": round(size_mb, 2)}
    st = plain_stamp
    md = (f"# Demo checkpoint LibreYOLO9t.pt (yolo9-t on shapes)\n\nGPU {st['gpu']}, torch {st['torch']}, "
          f"{st['date']}, commit {st['commit']}.\n\nCommand: `{command}`\n\n"
          + md_table([row], list(row)) + "\n")
    (out / "train_demo.md").write_text(md)
    print(md)
    print(json.dumps({"target_met": summary["target_met"]}))


if __name__ == "__main__":
    main()
