"""Where the host time of one ``predict()`` call goes: yolo9-t, batch 1, ``cuda_graph=True``.

For fp32 and ``half=True`` on the 640x480 photo of ``peer_predict.py``: the median wall time per
call (synchronised), the graph replay alone, then a cProfile of ``--iters`` calls (the functions
with the most own time, per call) and a torch.profiler count of the CUDA runtime calls per
predict (kernel launches outside the graph, graph launches, copies, synchronisations). The
difference between the call and the replay is the host work that issue 16's targets measure.

    python3 benchmarks/profile_predict.py --out benchmarks/results/profile
    python3 benchmarks/profile_predict.py --out /tmp/pp --device cpu --iters 5   # CPU dry run
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._common import md_table, write_result  # noqa: E402
from benchmarks.peer_predict import libre_model, photo  # noqa: E402
from libreyolo.bench.timing import sync, time_interleaved, time_wall  # noqa: E402


def wall(fn: Any, device: torch.device, iters: int, warmup: int = 0) -> float:
    """Median ms of ``iters`` synchronised calls after ``warmup`` (``libreyolo.bench.timing.time_wall``)."""
    return time_wall(fn, device=device, iters=iters, warmup=warmup)["median_ms"]


def top_functions(fn: Any, iters: int, n: int = 25) -> list[dict[str, Any]]:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(iters):
        fn()
    pr.disable()
    st = pstats.Stats(pr)
    rows = []
    for (file, line, name), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        short = file.split("site-packages/")[-1].split("/work/main/")[-1].split("libreyolo/", 1)[-1]
        rows.append({"function": f"{short}:{line}({name})", "calls_per_predict": round(nc / iters, 2),
                     "own_us_per_predict": round(tt / iters * 1e6, 1), "cum_us_per_predict": round(ct / iters * 1e6, 1)})
    rows.sort(key=lambda r: -r["own_us_per_predict"])
    return rows[:n]


def runtime_calls(fn: Any, device: torch.device, iters: int) -> dict[str, float]:
    if device.type != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        sync(device)
    counts: Counter[str] = Counter()
    for ev in prof.events():
        name = ev.name
        if name.startswith("cuda") or name.startswith("cu"):
            counts[name] += 1
        elif name.startswith("aten::"):
            counts["aten ops (all levels)"] += 1
    return {k: round(v / iters, 2) for k, v in counts.most_common(20)}


def graph_kernels(replay: Any, device: torch.device) -> dict[str, Any]:
    """Kernel count and GPU-time sum of one replay (torch.profiler), with the five slowest names."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            replay()
        sync(device)
    kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per: Counter[str] = Counter()
    for e in kern:
        per[e.name[:60]] += e.device_time_total / 5
    return {"graph_kernels": round(len(kern) / 5), "graph_kernel_sum_ms": round(sum(per.values()) / 1e3, 4),
            "graph_top_kernels": [f"{n} {v:.0f}us" for n, v in per.most_common(5)]}


def interleaved(replays: dict[bool, Any], device: torch.device, iters: int) -> dict[str, dict[str, float]]:
    """fp32 and fp16 replays alternated (no drift between arms): median ms and launch host us
    (``libreyolo.bench.timing.time_interleaved``)."""
    t = time_interleaved(replays, device=device, iters=iters)
    return {str(k): {"replay_ms": round(t[k]["median_ms"], 4), "host_us": round(t[k]["host_ms"]["median_ms"] * 1e3, 1)}
            for k in replays}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--commit", default=None)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    rgb, what = photo()
    model = libre_model("yolo9", "t", device)
    graph = device.type == "cuda"
    arms = []
    replays: dict[bool, Any] = {}
    for half in (False, True):
        def call(half: bool = half) -> Any:
            return model.predict(rgb, half=half, cuda_graph=graph, conf=0.25)

        arm: dict[str, Any] = {"half": half, "graph": graph,
                               "call_ms": round(wall(call, device, args.iters, warmup=args.warmup), 4)}
        twin = model.prepared(half=half, fuse=True)
        if graph:
            from libreyolo.models._base.inference import channels_last, input_dtype
            from libreyolo.tasks.detect.preprocess import preprocess

            x, _ = preprocess([rgb], (640, 640), device, dtype=input_dtype(twin), channels_last=channels_last(twin),
                              rect=True, stride=model.stride)
            decoded = bool(getattr(twin, "DECODE_TOPK", 0))

            def replay(x: torch.Tensor = x, twin: Any = twin, decoded: bool = decoded) -> Any:
                return twin.forward(x, cuda_graph=True, decoded=decoded)

            replay()
            arm["replay_ms"] = round(wall(replay, device, args.iters), 4)
            arm["host_ms"] = round(arm["call_ms"] - arm["replay_ms"], 4)
            replays[half] = replay
            arm.update(graph_kernels(replay, device))
        arm["speed"] = {k: round(v, 4) for k, v in call()[0].speed.items()}
        arm["top_functions"] = top_functions(call, args.iters)
        arm["runtime_calls_per_predict"] = runtime_calls(call, device, min(args.iters, 50))
        arms.append(arm)
        print(arm["half"], arm.get("call_ms"), arm.get("replay_ms"), flush=True)
    inter = interleaved(replays, device, args.iters) if len(replays) == 2 else {}
    md = [f"# Host time of predict(): yolo9-t, batch 1, {what}\n"]
    md.append(md_table([{k: a.get(k) for k in ("half", "graph", "call_ms", "replay_ms", "host_ms")} for a in arms],
                       ["half", "graph", "call_ms", "replay_ms", "host_ms"]))
    for a in arms:
        md.append(f"\n## half={a['half']}: functions with the most own time (us per predict)\n")
        md.append(md_table(a["top_functions"], ["function", "calls_per_predict", "own_us_per_predict",
                                                 "cum_us_per_predict"]))
        if a["runtime_calls_per_predict"]:
            md.append("\nCUDA runtime calls per predict: " + ", ".join(
                f"{k} {v}" for k, v in a["runtime_calls_per_predict"].items()))
    if inter:
        md.append("\n## Graph replay of the fp32 and fp16 twins, interleaved (ms; host_us = the launch call "
                  "without a sync)\n")
        md.append(md_table([{"half": k, **v} for k, v in inter.items()], ["half", "replay_ms", "host_us"]))
        md.append("\n" + "\n".join(f"- half={a['half']}: {a.get('graph_kernels')} kernels in the replay, "
                                     f"kernel sum {a.get('graph_kernel_sum_ms')} ms; slowest: "
                                     f"{a.get('graph_top_kernels')}" for a in arms))
    write_result(args.out / "profile_predict.json", numbers={"arms": arms, "interleaved": inter},
                 extra={"photo": what},
                 markdown="\n".join(md), commit=args.commit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
