"""What a CUDA-graph launch costs the host, and where one batch-1 ``predict()`` call spends its time.

Issue 16 asks for the end-to-end graph call within 1.3x of the graph network step. The step is
timed as GPU time (events, launches queued back to back); a single synchronous call also pays
the host side of ``cudaGraphLaunch`` and everything around it. This script measures both sides:

1. Synthetic graphs of ``N`` tiny kernels (N = 50, 200, 500, 1000): a straight line, the same with a
   device-to-device copy node every 10 kernels, and with a forked side stream every 10 kernels. Per
   graph: the host time of ``replay()`` (no synchronisation), the synchronised replay, the
   pipelined time per replay, and (torch.profiler) how long after the launch call began the
   first kernel started on the GPU.
2. The yolo9-t prediction graph (fp16 and fp32, as ``predict`` prepares it), captured here with
   debug mode on: its node types and edge count (is it a straight line?), the same host / GPU
   numbers.
3. One ``predict(cuda_graph=True)`` call cut into phases by wrapping the pipeline's functions
   (setup before the clock starts, preprocess, network call returned, outputs on the host,
   Results built, call returned), medians over ``--iters`` synchronised calls.

    python3 benchmarks/graph_launch.py --out benchmarks/results/profile
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._common import md_table, write_result  # noqa: E402
from libreyolo.bench.timing import sync, time_pipelined, time_wall  # noqa: E402


def host_launch_us(replay: Any, device: torch.device, iters: int) -> float:
    """Median microseconds the ``replay()`` call itself takes, the device idle before each."""
    samples = []
    for _ in range(iters):
        sync(device)
        t0 = time.perf_counter()
        replay()
        samples.append((time.perf_counter() - t0) * 1e6)
    sync(device)
    return statistics.median(samples)


def first_kernel_delay_us(replay: Any, device: torch.device, reps: int = 5) -> dict[str, float] | None:
    """torch.profiler view of ``reps`` isolated replays: median gap from the start of the
    ``cudaGraphLaunch`` call to its first kernel's start, and the launch call's duration."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            sync(device)
            replay()
        sync(device)
    launches = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                      if e.name == "cudaGraphLaunch")
    kernels = sorted(e.time_range.start for e in prof.events() if e.device_type == DeviceType.CUDA)
    if not launches or not kernels:
        return None
    delays, durs = [], []
    for (s, e) in launches:
        after = [k for k in kernels if k >= s]
        if after:
            delays.append(after[0] - s)
        durs.append(e - s)
    return {"first_kernel_after_launch_start_us": round(statistics.median(delays), 1) if delays else None,
            "launch_call_us": round(statistics.median(durs), 1)}


def node_census(capture: Any) -> dict[str, Any]:
    """Capture with debug mode on, dump the graph as DOT and count node types and edges."""
    g = torch.cuda.CUDAGraph()
    g.enable_debug_mode()
    capture(g)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.dot"
        try:
            g.debug_dump(str(path))
            text = path.read_text(errors="replace")
        except (OSError, RuntimeError) as e:  # torch builds differ in what debug_dump writes
            return {"node_census_error": f"{type(e).__name__}: {str(e)[:200]}"}
    kinds: dict[str, int] = {}
    for m in re.finditer(r"\b(KERNEL|MEMCPY|MEMSET|HOST|EMPTY|EVENT_RECORD|WAIT_EVENT|MEM_ALLOC|MEM_FREE|"
                         r"CONDITIONAL|GRAPH|EXT_SEMAS_SIGNAL|EXT_SEMAS_WAIT|BATCH_MEM_OP)\b", text):
        kinds[m.group(1)] = kinds.get(m.group(1), 0) + 1
    edges = text.count("->")
    return {"node_types_in_dot": kinds, "edges": edges}


def synthetic(device: torch.device, n: int, kind: str) -> tuple[Any, Any]:
    x = torch.zeros(1024, device=device)
    y = torch.zeros(1024, device=device)
    z = torch.zeros(1024, device=device)
    side = torch.cuda.Stream(device)

    def body() -> None:
        for i in range(n):
            x.add_(1.0)
            if i % 10 == 9:
                if kind == "copy":
                    y.copy_(x)
                elif kind == "fork":
                    cur = torch.cuda.current_stream(device)
                    side.wait_stream(cur)
                    with torch.cuda.stream(side):
                        z.add_(1.0)
                    cur.wait_stream(side)

    def capture(g: Any) -> None:
        s = torch.cuda.Stream(device)
        s.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(s):
            body()
        torch.cuda.current_stream(device).wait_stream(s)
        with torch.cuda.graph(g):
            body()

    g = torch.cuda.CUDAGraph()
    capture(g)
    return g.replay, capture


def measure(replay: Any, device: torch.device, iters: int) -> dict[str, Any]:
    replay()
    sync(device)
    r = {"host_launch_us": round(host_launch_us(replay, device, iters), 1),
         "sync_replay_ms": round(time_wall(replay, device=device, iters=iters, warmup=5)["median_ms"], 4),
         "pipelined_ms": round(time_pipelined(replay, device=device, iters=iters), 4)}
    fk = first_kernel_delay_us(replay, device)
    if fk:
        r.update(fk)
    return r


def yolo_graph(device: torch.device, half: bool, iters: int) -> dict[str, Any]:
    from benchmarks.peer_predict import libre_model, photo
    from libreyolo.graphs.seam import run_eager
    from libreyolo.layers.conv import graph_bias_act
    from libreyolo.models._base.inference import channels_last, cudnn_benchmark, input_dtype, uses_graph_bias_act
    from libreyolo.tasks.detect.preprocess import preprocess

    rgb, _ = photo()
    model = libre_model("yolo9", "t", device)
    twin = model.prepared(half=half)
    x, _ = preprocess([rgb], (640, 640), device, dtype=input_dtype(twin), channels_last=channels_last(twin),
                      rect=True, stride=twin.stride)
    stages = twin.predict_stages() if twin.DECODE_TOPK else twin.forward_stages()
    bias_act = uses_graph_bias_act(twin)
    out: dict[str, Any] = {"input": list(x.shape), "dtype": str(x.dtype), "bias_act": bias_act}

    def capture(g: Any) -> None:
        with torch.inference_mode(), cudnn_benchmark(device), graph_bias_act(bias_act):
            s = torch.cuda.Stream(device)
            s.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(s):
                for _ in range(3):
                    run_eager(stages, x)
            torch.cuda.current_stream(device).wait_stream(s)
            with torch.cuda.graph(g):
                run_eager(stages, x)

    out.update(node_census(capture))
    g = torch.cuda.CUDAGraph()
    capture(g)
    out.update(measure(g.replay, device, iters))
    # the same replay through predict's runner (what an end-to-end call launches)
    with cudnn_benchmark(device):
        def runner_replay() -> Any:
            return twin.forward(x, cuda_graph=True, decoded=bool(twin.DECODE_TOPK))

        runner_replay()
        out["runner_profile"] = runner_profile(runner_replay, device, iters)
        out["runner"] = {"host_launch_us": round(host_launch_us(runner_replay, device, iters), 1),
                         "sync_replay_ms": round(time_wall(runner_replay, device=device, iters=iters,
                                                           warmup=5)["median_ms"], 4),
                         "pipelined_ms": round(time_pipelined(runner_replay, device=device, iters=iters), 4)}
    model.release_graphs()
    return out


def runner_profile(fn: Any, device: torch.device, iters: int, top: int = 14) -> list[dict[str, Any]]:
    """cProfile of ``iters`` synchronised runner calls: the functions with the most own time (us per call)."""
    import cProfile
    import pstats

    pr = cProfile.Profile()
    for _ in range(iters):
        sync(device)
        pr.enable()
        fn()
        pr.disable()
    sync(device)
    rows = []
    for (file, line, name), (_cc, nc, tt, ct, _callers) in pstats.Stats(pr).stats.items():  # type: ignore[attr-defined]
        short = file.split("site-packages/")[-1].split("libreyolo/", 1)[-1]
        rows.append({"function": f"{short}:{line}({name})", "calls": round(nc / iters, 2),
                     "own_us": round(tt / iters * 1e6, 1), "cum_us": round(ct / iters * 1e6, 1)})
    rows.sort(key=lambda r: -r["own_us"])
    return rows[:top]


class Phases:
    """perf_counter stamps at the pipeline's seams (functions wrapped on their classes/modules)."""

    def __init__(self) -> None:
        self.stamps: dict[str, float] = {}

    def wrap(self, owner: Any, name: str, before: str | None, after: str | None) -> None:
        fn = getattr(owner, name)
        stamps = self.stamps

        def wrapped(*a: Any, **k: Any) -> Any:
            if before:
                stamps[before] = time.perf_counter()
            r = fn(*a, **k)
            if after:
                stamps[after] = time.perf_counter()
            return r

        setattr(owner, name, wrapped)


def predict_phases(device: torch.device, half: bool, iters: int) -> dict[str, Any]:
    from benchmarks.peer_predict import libre_model, photo
    from libreyolo.engine import predictor
    from libreyolo.tasks.detect import DetectTask

    rgb, _ = photo()
    model = libre_model("yolo9", "t", device)
    ph = Phases()
    ph.wrap(predictor.CallClock, "start", "setup_done", None)
    ph.wrap(DetectTask, "preprocess", None, "preprocess_done")
    ph.wrap(DetectTask, "outputs", "network_returned", "outputs_on_host")
    ph.wrap(predictor.CallClock, "speed", "results_built", None)
    order = ["setup_done", "preprocess_done", "network_returned", "outputs_on_host", "results_built"]
    segs: dict[str, list[float]] = {k: [] for k in [*order, "call_returned"]}
    for i in range(iters + 10):
        sync(device)
        ph.stamps.clear()
        t0 = time.perf_counter()
        model.predict(rgb, half=half, cuda_graph=device.type == "cuda", conf=0.25)
        t_end = time.perf_counter()
        if i < 10:
            continue
        prev = t0
        for k in order:
            t = ph.stamps[k]
            segs[k].append((t - prev) * 1e3)
            prev = t
        segs["call_returned"].append((t_end - prev) * 1e3)
    med = {k: round(statistics.median(v), 4) for k, v in segs.items()}
    med["total"] = round(sum(med.values()), 4)
    return med


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--commit", default=None)
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    synth = []
    for kind in ("line", "copy", "fork"):
        for n in (50, 200, 500, 1000):
            replay, capture = synthetic(device, n, kind)
            row = {"graph": kind, "kernels": n, **measure(replay, device, args.iters)}
            if n == 200:
                row.update(node_census(capture))
            synth.append(row)
            print(row, flush=True)
    yolo = {}
    for half in (True, False):
        try:
            yolo["fp16" if half else "fp32"] = yolo_graph(device, half, args.iters)
        except Exception as e:  # noqa: BLE001 - recorded
            yolo["fp16" if half else "fp32"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(yolo, flush=True)
    phases = {}
    for half in (True, False):
        try:
            phases["fp16" if half else "fp32"] = predict_phases(device, half, args.iters)
        except Exception as e:  # noqa: BLE001
            phases["fp16" if half else "fp32"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(phases, flush=True)
    cols = ["graph", "kernels", "host_launch_us", "sync_replay_ms", "pipelined_ms",
            "first_kernel_after_launch_start_us", "launch_call_us"]
    md = ["# CUDA-graph launch cost and one predict() call by phase (yolo9-t, batch 1, 640x480 photo)\n",
          "## Synthetic graphs (tiny kernels)\n", md_table(synth, cols),
          "\n## yolo9-t prediction graph (captured here; `runner`: the same replay through predict's runner)\n"]
    yrows = [{"arm": k, **{c: v.get(c) for c in cols[2:]}, "nodes": v.get("node_types_in_dot"),
              "edges": v.get("edges"), "runner_host_launch_us": (v.get("runner") or {}).get("host_launch_us"),
              "runner_sync_ms": (v.get("runner") or {}).get("sync_replay_ms"),
              "runner_pipelined_ms": (v.get("runner") or {}).get("pipelined_ms"), "error": v.get("error")}
             for k, v in yolo.items()]
    md.append(md_table(yrows, list(yrows[0])))
    for k, v in yolo.items():
        if v.get("runner_profile"):
            md.append(f"\n### {k}: predict's runner call, functions with the most own time (cProfile, us per call)\n")
            md.append(md_table(v["runner_profile"], ["function", "calls", "own_us", "cum_us"]))
    md.append("\n## One predict(cuda_graph=True) call by phase (ms, medians; each phase ends at the named point)\n")
    prow = [{"arm": k, **v} for k, v in phases.items()]
    md.append(md_table(prow, list(prow[0])))
    write_result(args.out / "graph_launch.json", numbers={"synthetic": synth, "yolo9_t": yolo, "predict_phases": phases},
                 markdown="\n".join(md), commit=args.commit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
