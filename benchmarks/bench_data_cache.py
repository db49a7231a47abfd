"""Training items per second from disk and from the in-memory cache (``cache="auto"``, issue 17).

A detection training item with mosaic reads four images; on the lent GPU host the loader's wait
was 17 ms of a 77 ms yolo9-t step at batch 16 (benchmarks/results/profile/train_loop_b16). This
script builds the ``shapes`` training split (640 px, as peer_train) twice, ``cache=False`` and
``cache="auto"``, checks that both give the same items bit for bit, and times ``dataset[i]`` over
the whole split, the arms interleaved, one process, one thread (what one loader worker does).

    python3 benchmarks/bench_data_cache.py --out benchmarks/results/data_cache
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._common import md_table, write_result  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-train", type=int, default=96)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from libreyolo.data.config import load_data_config
    from libreyolo.data.shapes import ensure_shapes_dataset
    from libreyolo.tasks.detect import DetectTask
    from libreyolo.training.config import TrainConfig

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_data_config(str(ensure_shapes_dataset(Path(tmp), n_train=args.n_train, n_val=8, imgsz=args.imgsz)))
        arms, build_s = {}, {}
        for cache in (False, "auto"):
            t0 = time.perf_counter()
            arms[cache] = DetectTask().dataset(cfg, cfg.train, split="train", imgsz=args.imgsz, augment=True,
                                               train_cfg=TrainConfig(cache=cache))
            build_s[cache] = time.perf_counter() - t0
            arms[cache].set_epoch(1)
        n = len(cfg.train)
        same = all(torch.equal(arms[False][i]["img"], arms["auto"][i]["img"])
                   and torch.equal(arms[False][i]["bboxes"], arms["auto"][i]["bboxes"]) for i in range(n))
        ms: dict[object, list[float]] = {False: [], "auto": []}
        for _ in range(args.rounds):
            for cache, ds in arms.items():
                t0 = time.perf_counter()
                for i in range(n):
                    ds[i]
                ms[cache].append((time.perf_counter() - t0) / n * 1e3)
        rows = [{"cache": str(c), "cached": arms[c]._ram is not None, "build_s": round(build_s[c], 3),
                 "ms_per_item": round(statistics.median(ms[c]), 3)} for c in arms]
    speedup = rows[0]["ms_per_item"] / rows[1]["ms_per_item"]
    md = [f"# Training items from disk vs cache='auto' ({n} shapes images, {args.imgsz} px, mosaic on, one thread)", "",
          md_table(rows, list(rows[0])), "",
          f"Items identical in both arms: {same}. Per item, the cache is **{speedup:.2f}x** faster; medians of "
          f"{args.rounds} interleaved passes over the split.", ""]
    write_result(Path(args.out) / "bench_data_cache.json",
                 numbers={"rows": rows, "identical_items": same, "speedup": round(speedup, 3)}, markdown="\n".join(md))
    print("\n".join(md))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
