"""Eager training-loop overhead: the trainer's time per iteration against the isolated step.

Issue 17's loop target: at batch 8, the eager loop's overhead per iteration (the trainer's
iteration time minus the isolated network forward + loss + backward on the same batch) is at
most 15 % of the iteration. One process, one model, in this order:

1. ``Trainer.fit`` on the built-in shapes set (yolo9-t, AMP, mosaic on, validation and saving
   of plots off) for ``--epochs`` epochs; the last epoch's training seconds / iterations is the
   loop's time per iteration (the earlier epochs warm workers, allocator and cuDNN).
2. With the trained trainer's own network, criterion and gradient scaler, on one batch taken
   from its loader: forward + loss + scaled backward (``isolated``), and the same plus the
   trainer's optimizer step + EMA update (``isolated_with_step``), timed with CUDA events
   (median after warm-up, synchronised).

``overhead = (loop - isolated) / loop``; ``overhead_beyond_step`` uses ``isolated_with_step``
(what is left for the loader, the schedule, the bookkeeping and Python). ``--graph`` adds the
same measure for ``cuda_graph=True``.

Usage (GPU): python3 benchmarks/bench_loop_overhead.py --out benchmarks/results/loop [--graph]
CPU smoke test of the script: ... --device cpu --imgsz 64 --n-train 16 --epochs 2 --iters 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import write_result  # noqa: E402


def _timed(fn: Any, *, device: Any, warmup: int, iters: int) -> float:
    """Median milliseconds of ``fn()`` (CUDA events on CUDA, a synchronised clock elsewhere)."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _isolated(trainer: Any, *, iters: int) -> dict[str, float]:
    """The trainer's own forward + loss + scaled backward (and + optimizer step / EMA) on one batch."""
    dev = trainer.device
    raw = next(iter(trainer.data.train_loader))
    imgs = raw["img"].to(dev, non_blocking=True).float().div_(255.0)
    crit, scaler = trainer.criterion, trainer.scaler
    trainer.net.train()

    def fwd_bwd() -> None:
        preds = trainer._forward(imgs)
        loss, _ = crit(preds, raw)
        scaler.scale(loss).backward()
        del preds, loss

    def fwd_bwd_step() -> None:
        fwd_bwd()
        trainer._optimizer_step()

    out = {"isolated": _timed(fwd_bwd, device=dev, warmup=5, iters=iters)}
    trainer._zero_grad()
    out["isolated_with_step"] = _timed(fwd_bwd_step, device=dev, warmup=5, iters=iters)
    return out


def run(*, graph: bool, out: Path, batch: int, n_train: int, epochs: int, workers: int, device: str,
        imgsz: int, iters: int) -> dict[str, Any]:
    import torch

    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset
    from libreyolo.training.config import TrainConfig
    from libreyolo.training.trainer import Trainer

    data = ensure_shapes_dataset(n_train=n_train, n_val=8, imgsz=imgsz, seed=1)
    model = LibreYOLO("LibreYOLO9t.pt")
    cfg = TrainConfig.from_overrides(dict(
        data=str(data), epochs=epochs, batch=batch, imgsz=imgsz, workers=workers, device=device, amp=True,
        val=False, project=str(out / "runs"), name="graph" if graph else "eager", exist_ok=True, verbose=False,
        plots=False, tensorboard=False, close_mosaic=0, seed=0, cuda_graph=graph))
    trainer = Trainer(model, cfg)
    epoch_s: list[float] = []
    iso: dict[str, float] = {}

    def on_epoch(t: Any, row: dict[str, Any]) -> None:
        epoch_s.append(float(row["time/epoch_s"]))
        if len(epoch_s) == epochs:  # after the last timed epoch, with the run's loader, graphs and state alive
            iso.update(_isolated(t, iters=iters))

    trainer.callbacks.append(on_epoch)
    trainer.fit()
    loop_ms = 1e3 * epoch_s[-1] / trainer.nb
    iso_ms, iso_step = iso["isolated"], iso["isolated_with_step"]
    row = {"graph": graph, "batch": batch, "imgsz": imgsz, "iterations_per_epoch": trainer.nb,
           "epoch_s": [round(s, 3) for s in epoch_s], "loop_ms_per_iter": round(loop_ms, 2),
           "isolated_ms": round(iso_ms, 2), "isolated_with_step_ms": round(iso_step, 2),
           "overhead": round((loop_ms - iso_ms) / loop_ms, 3),
           "overhead_beyond_step": round((loop_ms - iso_step) / loop_ms, 3)}
    del trainer
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--n-train", type=int, default=320)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--graph", action="store_true", help="also measure the cuda_graph=True loop")
    ap.add_argument("--device", default="0", help="'cpu' only for a smoke test of the script")
    ap.add_argument("--commit", default=None)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [run(graph=g, out=args.out, batch=args.batch, n_train=args.n_train, epochs=args.epochs,
                workers=args.workers, device=args.device, imgsz=args.imgsz, iters=args.iters)
            for g in ((False, True) if args.graph else (False,))]
    eager = rows[0]
    write_result(args.out / "bench_loop_overhead.json", commit=args.commit, numbers={
        "rows": rows, "target": {"name": "eager overhead at batch 8", "max": 0.15,
                                 "value": eager["overhead"], "ok": eager["overhead"] <= 0.15}})
    for r in rows:
        print(f"{'graph' if r['graph'] else 'eager'}: loop {r['loop_ms_per_iter']} ms/iter, isolated "
              f"{r['isolated_ms']} ms (+step {r['isolated_with_step_ms']} ms): overhead {r['overhead']:.1%} "
              f"({r['overhead_beyond_step']:.1%} beyond the optimizer step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
