"""Generate the prediction CUDA-graph parity matrix (SPEC G-4, G-6) on a GPU.

For every registered family x task x size and each dtype (fp32, AMP fp16): build an untrained,
seeded, fused model; capture; replay on two probe inputs from different distributions (uniform
noise, a natural image); compare with eager using torch.equal on every output. Writes
``<out>/cuda-graph-parity.json`` and ``<out>/cuda-graph-parity.md`` and prints a summary plus the
``SUPPORTS_CUDA_GRAPH`` value each family must carry.

    python benchmarks/parity_predict.py --out docs            # the committed matrix
    python benchmarks/parity_predict.py --out /tmp/p --families yolo9 --sizes t --imgsz 320
    python benchmarks/parity_predict.py --out /tmp/p --families resnet,convnext --imgsz 224 \
        --merge docs/cuda-graph-parity.json   # add rows, keep the other families' rows
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the .json and .md")
    ap.add_argument("--families", default="", help="comma-separated family names (default: all registered)")
    ap.add_argument("--sizes", default="", help="comma-separated sizes (default: all)")
    ap.add_argument("--dtypes", default="float32,float16", help="float32, float16, bfloat16")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-fuse", action="store_true", help="probe the unfused model")
    ap.add_argument("--arch", default=None,
                    help='architecture variant as JSON (the family\'s set_arch keys), e.g. \'{"box_groups": 1}\'')
    ap.add_argument("--commit", default=None, help="commit id to record (default: git rev-parse HEAD)")
    ap.add_argument("--merge", type=Path, default=None,
                    help="an existing matrix JSON: its rows of other family/task/size/dtype are kept in the output")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    import torch

    from benchmarks._common import file_lock
    from libreyolo.graphs.parity import (
        environment,
        expected_flag,
        merge_rows,
        row_key,
        run_matrix,
        write_matrix,
    )
    from libreyolo.registry import families

    if not torch.cuda.is_available():
        print("parity_predict.py needs a CUDA GPU (torch sees none)", file=sys.stderr)
        return 2
    split = lambda s: [v for v in s.split(",") if v]  # noqa: E731
    t0 = time.perf_counter()
    rows = run_matrix(families=split(args.families) or None, sizes=split(args.sizes) or None,
                      imgsz=args.imgsz, batch=args.batch, dtypes=tuple(split(args.dtypes)),
                      device="cuda", seed=args.seed, fuse=not args.no_fuse,
                      arch=json.loads(args.arch) if args.arch else None)
    env = environment(commit=args.commit)
    settings = {"imgsz": args.imgsz, "batch": args.batch, "seed": args.seed, "fuse": not args.no_fuse,
                "probes": ["uniform", "image"], "dtypes": split(args.dtypes)}
    jp, mp = args.out / "cuda-graph-parity.json", args.out / "cuda-graph-parity.md"
    with file_lock(jp):  # the runner's lanes may merge into the same matrix at the same moment
        docs = [{"environment": env, "rows": rows}]  # each row names the run that produced it
        if args.merge is not None and args.merge.is_file():
            docs.insert(0, json.loads(args.merge.read_text()))
        rows = merge_rows(docs, key=row_key)
        write_matrix(rows, env=env, settings=settings, json_path=jp, md_path=mp)

    print(f"\n{env['gpu']} · torch {env['torch']} · {len(rows)} rows in {time.perf_counter() - t0:.0f} s")
    print(f"{'family':<14}{'task':<9}{'size':<6}{'dtype':<10}{'result':<8}capture ms / error")
    for r in rows:
        tail = r.get("error") or r.get("capture_ms")
        print(f"{r['family']:<14}{r['task']:<9}{r['size']:<6}{r['dtype']:<10}{r['result']:<8}{tail}")
    print()
    for name, cls in sorted(families().items()):
        want, why = expected_flag(cls, rows)
        mark = "ok" if want == cls.SUPPORTS_CUDA_GRAPH else "CHANGE"
        print(f"{name}: SUPPORTS_CUDA_GRAPH should be {want} ({why}) [{mark}]")
    print(f"wrote {jp} and {mp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
