"""Does cutting the prediction graph into a few graphs shorten a batch-1 ``predict()`` call? (issue 16)

A synchronous call pays the whole ``cudaGraphLaunch`` of a ~500-node graph before the GPU starts
(benchmarks/graph_launch.py). Captured as ``n`` graphs (``Family.GRAPH_CHUNKS``, cut between the
network's top-level modules) the GPU can start the first while the host launches the rest. For
one family (default yolo9-t, the prepared half model as ``predict`` runs it, the 640x480 photo's
letterbox shape) and ``n`` = 1..4, this script checks that the chunked replay is bitwise equal to
the eager forward and to the one-graph replay, then times, interleaved in one process:

* ``call_ms``: one synchronous runner call (network + decode), host clock, device idle before it;
* ``pipelined_ms``: back-to-back replays (CUDA events): the GPU time, which chunking must not raise;
* ``e2e_ms``: ``predict(photo, cuda_graph=True, half=True)`` end to end.

    python3 benchmarks/graph_chunks.py --out benchmarks/results/profile
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._common import md_table, write_result  # noqa: E402


def photo():
    """The 640x480 photo peer_predict uses (scikit-image's coffee, resized), BGR uint8."""
    import cv2
    from skimage import data

    return cv2.resize(data.coffee()[:, :, ::-1].copy(), (640, 480), interpolation=cv2.INTER_LINEAR)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="LibreYOLO9t.pt")
    ap.add_argument("--chunks", default="1,2,3,4")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("graph_chunks.py needs a CUDA device")
    from libreyolo import LibreYOLO
    from libreyolo.graphs.parity import compare_outputs
    from libreyolo.graphs.runner import PredictGraphs
    from libreyolo.models._base.inference import cudnn_benchmark

    dev = torch.device("cuda", 0)
    img = photo()
    arms: dict[int, dict[str, Any]] = {}
    first = None
    for n in (int(v) for v in args.chunks.split(",")):
        m = LibreYOLO(args.model, pretrained=False, device="cuda")
        if first is None:
            first = m
        else:  # the same weights in every arm, so that the arms' outputs can be compared bit for bit
            m.load_weights(first.net.state_dict())
        twin = m.prepared(half=True)
        twin.use_graphs(PredictGraphs(twin.family, chunks=n))
        m.predict(img, cuda_graph=True, half=True, verbose=False)  # captures predict's shape
        entry = twin.graphs.info()["graphs"][0]
        arms[n] = {"model": m, "twin": twin, "shape": entry["shape"], "graphs": entry["stages"][0].get("graphs", 1),
                   "call_ms": [], "pipelined_ms": [], "e2e_ms": []}
    # bitwise: the chunked replay equals eager and the one-graph replay on the predict-shaped input
    ref_n = min(arms)
    shape = arms[ref_n]["shape"]
    rows_ok: dict[int, dict[str, bool]] = {}
    outs = {}
    with cudnn_benchmark(dev), torch.inference_mode():
        for n, a in arms.items():
            fam = a["twin"].family
            dtype = next(fam.net.parameters()).dtype
            fmt = torch.channels_last if getattr(fam, "prep_spec", None) and fam.prep_spec.channels_last else torch.contiguous_format
            g = torch.Generator(device=dev).manual_seed(0)
            x = torch.rand(shape, generator=g, device=dev).to(dtype, memory_format=fmt)
            a["x"] = x
            outs[n] = a["twin"].forward(x, cuda_graph=True, decoded=True)
            eager = a["twin"].eager_forward(x, decoded=True)
            rows_ok[n] = {"equals_eager": compare_outputs(outs[n], eager)["equal"]}
        for n in arms:
            rows_ok[n]["equals_one_graph"] = compare_outputs(outs[n], outs[ref_n])["equal"]
        for _ in range(args.rounds):
            for a in arms.values():
                run = a["twin"]
                calls = []
                for _ in range(args.iters):
                    torch.cuda.synchronize(dev)
                    t0 = time.perf_counter()
                    run.forward(a["x"], cuda_graph=True, decoded=True)
                    torch.cuda.synchronize(dev)
                    calls.append((time.perf_counter() - t0) * 1e3)
                a["call_ms"].append(statistics.median(calls))
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(args.iters):
                    run.forward(a["x"], cuda_graph=True, decoded=True)
                e1.record()
                e1.synchronize()
                a["pipelined_ms"].append(e0.elapsed_time(e1) / args.iters)
    for _ in range(args.rounds):
        for a in arms.values():
            calls = []
            for _ in range(max(5, args.iters // 2)):
                torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                a["model"].predict(img, cuda_graph=True, half=True, verbose=False)
                calls.append((time.perf_counter() - t0) * 1e3)
            a["e2e_ms"].append(statistics.median(calls))
    rows = []
    base = statistics.median(arms[ref_n]["e2e_ms"])
    for n, a in arms.items():
        r = {"chunks": n, "graphs": a["graphs"], "shape": "x".join(map(str, a["shape"])),
             **rows_ok[n], **{k: round(statistics.median(a[k]), 4) for k in ("call_ms", "pipelined_ms", "e2e_ms")}}
        r["e2e_over_one_graph"] = round(r["e2e_ms"] / base, 4)
        rows.append(r)
    md = [f"# Prediction graph in chunks: {args.model}, half, batch 1, the 640x480 photo", "",
          md_table(rows, list(rows[0])), "",
          f"Medians of {args.rounds} interleaved rounds ({args.iters} calls each). `graphs`: graphs the "
          "network + decode stage was captured as (the cuts fall between top-level modules).", ""]
    write_result(Path(args.out) / "graph_chunks.json", numbers={"rows": rows}, markdown="\n".join(md))
    print("\n".join(md))
    return 0 if all(r["equals_eager"] and r["equals_one_graph"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
