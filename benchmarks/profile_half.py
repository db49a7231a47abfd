"""Why ``half=True`` can be slower than fp32 in an eager ``predict()``: both arms profiled side by side.

For one family, size and batch (the 640x480 photo of ``peer_predict.py`` repeated), the eager
``predict(cuda_graph=False)`` call in fp32 and with ``half=True``: the median wall time
(interleaved, synchronised), then one torch.profiler pass per arm with the CUDA kernels summed
by name (count, ms per call) and the host operators with the most self time per call, and the
GPU busy time against the call's wall time (how launch-bound the call is).

    python3 benchmarks/profile_half.py --out benchmarks/results/profile/half --model yolox:s --batch 8
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import md_table, write_result  # noqa: E402
from benchmarks.peer_predict import libre_model, photo  # noqa: E402
from libreyolo.bench.timing import sync, time_interleaved  # noqa: E402


def profile_arm(call: Any, device: torch.device, calls: int) -> dict[str, Any]:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    call()
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        sync(device)
    kernels: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    spans = []
    for ev in prof.events():
        if ev.device_type == DeviceType.CUDA:
            us = ev.device_time if hasattr(ev, "device_time") else ev.cuda_time
            kernels[ev.name[:80]][0] += 1
            kernels[ev.name[:80]][1] += us
            spans.append((ev.time_range.start, ev.time_range.end))
    busy, end = 0.0, None
    for s, e in sorted(spans):  # union of kernel intervals
        if end is None or s > end:
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    ops = sorted(((e.key, e.self_cpu_time_total, e.count) for e in prof.key_averages() if e.key.startswith("aten::")),
                 key=lambda t: -t[1])[:15]
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:15]
    return {"kernels_per_call": sum(v[0] for v in kernels.values()) / calls,
            "kernel_ms_per_call": round(sum(v[1] for v in kernels.values()) / calls / 1e3, 4),
            "gpu_busy_ms_per_call": round(busy / calls / 1e3, 4),
            "top_kernels": [{"name": n, "n": v[0] / calls, "ms": round(v[1] / calls / 1e3, 4)} for n, v in top],
            "top_host_ops": [{"op": k, "self_ms": round(t / calls / 1e3, 4), "n": c / calls} for k, t, c in ops]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="yolox:s", help="family:size (peer_predict's names)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--calls", type=int, default=5, help="profiled calls per arm")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("profile_half.py needs a CUDA device")
    dev = torch.device("cuda", 0)
    fam, size = args.model.split(":")
    rgb, what = photo()
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    batch = [bgr] * args.batch
    model = libre_model(fam, size, dev)
    arms = {half: (lambda half=half: model.predict(batch, half=half, cuda_graph=False, batch=args.batch, conf=0.25))
            for half in (False, True)}
    t = time_interleaved(arms, device=dev, iters=args.iters, warmup=5)
    rows, numbers = [], {"model": args.model, "batch": args.batch, "photo": what, "arms": {}}
    for half, call in arms.items():
        twin = model.prepared(half=half)
        from libreyolo.models._base.inference import channels_last, input_dtype

        p = profile_arm(call, dev, args.calls)
        p.update(wall_ms=round(t[half]["median_ms"], 4), weights=str(input_dtype(twin)).removeprefix("torch."),
                 channels_last=channels_last(twin))
        numbers["arms"]["fp16" if half else "fp32"] = p
        rows.append({"arm": "half=True" if half else "fp32", "weights": p["weights"], "channels_last": p["channels_last"],
                     "wall_ms": p["wall_ms"], "gpu_busy_ms": p["gpu_busy_ms_per_call"],
                     "kernel_ms": p["kernel_ms_per_call"], "kernels": p["kernels_per_call"]})
    md = [f"# Eager predict, fp32 against half=True: {args.model}, batch {args.batch}, {what}", "",
          md_table(rows, list(rows[0])), ""]
    for arm, p in numbers["arms"].items():
        md += [f"## {arm}: costliest kernels per call", "", md_table(p["top_kernels"], ["name", "n", "ms"]), "",
               f"## {arm}: host operators with the most self time per call", "",
               md_table(p["top_host_ops"], ["op", "self_ms", "n"]), ""]
    name = f"profile_half_{fam}_{size}_b{args.batch}.json"
    write_result(Path(args.out) / name, numbers=numbers, markdown="\n".join(md))
    print("\n".join(md[:4]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
