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

BUCKETS = {  # substring of a profiled function's name -> bucket
    "dataloader.py:__next__": "data wait (loader __next__)",
    "trainer.py:_forward": "forward (launch or replay)",
    "loss.py:forward": "loss + assignment",
    "_tensor.py:backward": "backward",
    "trainer.py:_optimizer_step": "optimizer step (unscale, clip, step, EMA)",
    "ema.py:update": "EMA update",
    "bookkeeping.py:report": "progress / loss read-back",
    "bookkeeping.py:progress_text": "progress / loss read-back",
    "scheduler.py:apply": "LR schedule",
}


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

    def on_epoch(t: Any, row: dict[str, Any]) -> None:
        epochs.append(float(row["time/epoch_s"]))
        if len(epochs) == 1:
            prof.enable()
        else:
            prof.disable()

    trainer.callbacks.append(on_epoch)
    trainer.fit()
    prof.disable()
    st = pstats.Stats(prof)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45)
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
    (out / f"profile_{'graph' if graph else 'eager'}.txt").write_text(buf.getvalue())
    buckets: dict[str, float] = {}
    for (file, _line, name), (_cc, _nc, _tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        key = f"{Path(file).name}:{name}"
        for sub, bucket in BUCKETS.items():
            if key == sub:
                buckets[bucket] = buckets.get(bucket, 0.0) + ct
    nb = trainer.nb
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
