"""Where the time of a real training epoch goes (host view), eager vs ``cuda_graph=True``.

Runs the trainer on the built-in shapes dataset (yolo9-t, 640 px, AMP, mosaic, validation off)
and profiles the main process with cProfile during the second epoch (the first one warms up
workers, allocator and capture). Host time is what matters in a launch-bound step: time spent
waiting for the GPU shows up in the synchronising calls (``item``, ``cpu``), time waiting for
data in the loader's ``__next__``. Writes ``profile_<arm>.txt`` (top functions by cumulative
and by own time) and ``profile_train_loop.json`` (epoch times and the few named buckets).

Usage (GPU): python3 benchmarks/profile_train_loop.py --out $OUT [--commit SHA]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import write_result  # noqa: E402


class BucketTimer:
    """Wall seconds spent in the loop's named functions while :attr:`on` (the profiled epoch),
    on the thread that runs them; nested buckets overlap (the optimiser step includes the EMA)."""

    def __init__(self) -> None:
        self.on = False
        self.seconds: dict[str, float] = {}
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, bucket: str) -> None:
        import time

        fn = getattr(owner, name)
        seconds = self.seconds

        def timed(*a: Any, **k: Any) -> Any:
            if not self.on:
                return fn(*a, **k)
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                seconds[bucket] = seconds.get(bucket, 0.0) + time.perf_counter() - t0

        self._undo.append((owner, name, fn))
        setattr(owner, name, timed)

    def wrap_classes(self) -> None:
        import torch
        from torch.utils.data import dataloader

        from libreyolo.training import bookkeeping, ema, scheduler, trainer

        self.wrap(dataloader._BaseDataLoaderIter, "__next__", "data wait (loader __next__)")
        self.wrap(trainer.Trainer, "_forward", "forward (launch or replay)")
        self.wrap(torch.Tensor, "backward", "backward")
        self.wrap(trainer.Trainer, "_optimizer_step", "optimizer step (unscale, clip, step, EMA)")
        self.wrap(ema.ModelEMA, "update", "EMA update")
        self.wrap(bookkeeping.EpochLosses, "report", "progress / loss read-back")
        self.wrap(scheduler.LRSchedule, "apply", "LR schedule")

    def wrap_criterion(self, t: Any) -> None:
        """The criterion is an attribute of the set-up trainer (built in ``fit``)."""
        if not getattr(t.criterion, "_bucket_timed", False):
            self.wrap(t, "criterion", "loss + assignment")
            t.criterion._bucket_timed = True

    def unwrap(self) -> None:
        for owner, name, fn in reversed(self._undo):
            setattr(owner, name, fn)
        self._undo.clear()


def run(*, graph: bool, out: Path, batch: int, n_train: int, workers: int, device: str, imgsz: int) -> dict[str, Any]:
    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset
    from libreyolo.training.config import TrainConfig
    from libreyolo.training.trainer import Trainer

    data = ensure_shapes_dataset(n_train=n_train, n_val=16, imgsz=imgsz, seed=1)
    model = LibreYOLO("LibreYOLO9t.pt")
    cfg = TrainConfig.from_overrides(dict(
        data=str(data), epochs=2, batch=batch, imgsz=imgsz, workers=workers, device=device, amp=True, val=False,
        project=str(out / "runs"), name="graph" if graph else "eager", exist_ok=True, verbose=False,
        plots=False, tensorboard=False, close_mosaic=0, seed=0, cuda_graph=graph))
    trainer = Trainer(model, cfg)
    prof = cProfile.Profile()
    epochs: list[float] = []
    timer = BucketTimer()
    timer.wrap_classes()

    def on_epoch(t: Any, row: dict[str, Any]) -> None:
        epochs.append(float(row["time/epoch_s"]))
        if len(epochs) == 1:
            timer.wrap_criterion(t)
            timer.on = True
            prof.enable()
        else:
            prof.disable()
            timer.on = False

    trainer.callbacks.append(on_epoch)
    try:
        trainer.fit()
    finally:
        prof.disable()
        timer.unwrap()
    st = pstats.Stats(prof)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45)
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
    (out / f"profile_{'graph' if graph else 'eager'}.txt").write_text(buf.getvalue())
    del st
    buckets = dict(timer.seconds)
    nb = trainer.nb
    top = ("data wait (loader __next__)", "forward (launch or replay)", "loss + assignment", "backward",
           "optimizer step (unscale, clip, step, EMA)", "progress / loss read-back", "LR schedule")
    if epochs:  # the rest of the profiled epoch: the loop's own Python, the input upload, the zeroing
        buckets["other (epoch minus the buckets above)"] = max(0.0, epochs[-1] - sum(buckets.get(k, 0.0) for k in top))
    return {"graph": graph, "epoch_s": epochs, "iterations": nb,
            "ms_per_iter_epoch2": round(1e3 * epochs[-1] / nb, 2),
            "buckets_ms_per_iter": {k: round(1e3 * v / nb, 2) for k, v in sorted(buckets.items())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--n-train", type=int, default=200)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--device", default="0", help="'cpu' only for a smoke test of the script")
    ap.add_argument("--commit", default=None)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [run(graph=g, out=args.out, batch=args.batch, n_train=args.n_train, workers=args.workers,
                device=args.device, imgsz=args.imgsz)
            for g in (False, True)]
    write_result(args.out / "profile_train_loop.json", commit=args.commit,
                 numbers={"batch": args.batch, "note": "cProfile host times (profiling slows Python)", "rows": rows})
    for r in rows:
        print(("graph" if r["graph"] else "eager"), r["ms_per_iter_epoch2"], "ms/iter (profiled epoch)")
        for k, v in r["buckets_ms_per_iter"].items():
            print(f"   {k:<45} {v:8.2f} ms/iter")


if __name__ == "__main__":
    main()
