"""Training throughput of yolo9-t at 640 px on the built-in shapes dataset (issue 3 benchmark).

Whole epochs through the real trainer (data loader with mosaic augmentation, AMP forward and
backward, loss and assignment, optimiser step, EMA; validation off), at batch 8 and 16. Epoch 1
includes warm-up (allocator, cuDNN heuristics); the reported figure is the median of the later
epochs. images/s = training images per epoch / epoch wall time (synchronised at epoch end by the
checkpoint write, which is excluded from the timing).

Usage (GPU): python3 benchmarks/bench_train.py --out $OUT [--commit SHA]
             [--n-train 400] [--epochs 3] [--batches 8 16] [--workers 8]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import md_table, stamp, write_result  # noqa: E402


def run_arm(*, data: Path, batch: int, epochs: int, workers: int, out: Path, imgsz: int,
            device: str) -> dict[str, Any]:
    from libreyolo import LibreYOLO
    from libreyolo.training.config import TrainConfig
    from libreyolo.training.trainer import Trainer

    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=6)
    cfg = TrainConfig.from_overrides(dict(
        data=str(data), epochs=epochs, batch=batch, imgsz=imgsz, workers=workers, device=device, amp=True,
        val=False, deterministic=False, project=str(out / "runs"), name=f"bench_b{batch}", exist_ok=True,
        verbose=False, plots=False, tensorboard=False, close_mosaic=0, seed=0))
    trainer = Trainer(model, cfg)
    epoch_s: list[float] = []
    trainer.callbacks.append(lambda t, row: epoch_s.append(float(row["time/epoch_s"])))
    t0 = time.perf_counter()
    trainer.fit()
    n = len(trainer.train_ds)
    steady = statistics.median(epoch_s[1:]) if len(epoch_s) > 1 else epoch_s[0]
    return {"batch": batch, "imgsz": imgsz, "images": n, "iterations_per_epoch": trainer.nb,
            "epoch_s_all": [round(e, 3) for e in epoch_s], "epoch_s": round(steady, 3),
            "images_per_s": round(n / steady, 1), "ms_per_iter": round(1000 * steady / trainer.nb, 2),
            "first_epoch_s": round(epoch_s[0], 3), "wall_s": round(time.perf_counter() - t0, 1),
            "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--n-train", type=int, default=400)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--device", default="0", help="'cpu' only for a smoke test of the script")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.device != "cpu" and not torch.cuda.is_available():
        sys.exit("bench_train.py needs a CUDA GPU")
    from libreyolo.data.shapes import ensure_shapes_dataset

    args.out.mkdir(parents=True, exist_ok=True)
    data = ensure_shapes_dataset(n_train=args.n_train, n_val=16, imgsz=args.imgsz, seed=0)  # the default cache dir
    rows: list[dict[str, Any]] = []
    numbers = {"model": "yolo9-t", "dataset": "shapes", "amp": "float16", "rows": rows}
    for b in args.batches:
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        try:
            rows.append(run_arm(data=data, batch=b, epochs=args.epochs, workers=args.workers, out=args.out,
                                imgsz=args.imgsz, device=args.device))
        except Exception as e:  # noqa: BLE001 - keep the other arm's numbers
            logging.exception("arm batch=%d failed", b)
            rows.append({"batch": b, "error": f"{type(e).__name__}: {e}"})
        write_result(args.out / "bench_train.json", numbers=numbers, commit=args.commit)  # partial results survive
    st = stamp(args.commit)
    cols = ["batch", "imgsz", "images", "epoch_s", "images_per_s", "ms_per_iter", "first_epoch_s", "peak_mem_gib"]
    md = (f"# Training throughput: yolo9-t, shapes, {args.imgsz} px, AMP float16\n\n"
          f"GPU {st['gpu']}, torch {st['torch']}, CUDA {st['cuda']}, {st['date']}, commit {st['commit']}.\n"
          f"Whole epochs through the trainer (data loading with mosaic, {args.workers} workers; validation off); "
          f"median of epochs 2..{args.epochs}.\n\n" + md_table(rows, cols) + "\n")
    write_result(args.out / "bench_train.json", numbers=numbers, env=st, markdown=md)
    print(md)


if __name__ == "__main__":
    main()
