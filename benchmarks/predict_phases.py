"""Where one batch-1 ``predict(cuda_graph=True)`` call spends its time, function by function (issue 16).

The pipeline's functions are wrapped with host-clock stamps at entry and exit (no syncs are
added: the stamps cost about a microsecond each), one call is the sequence of stamps it passed,
and each segment between two consecutive stamps is reported as the median over ``--iters``
calls. A segment that ends at ``D2H.exit`` waited for the GPU. Beside it, in the same process and
interleaved:

* ``floor``: the least a call can do with the same graph: pinned upload, replay with the pixel
  normalisation inside, candidates straight to the host, the numpy threshold, nothing else;
* ``replay``: the synchronous runner call alone on a preprocessed input;
* ``predict``: ``model.predict(photo, cuda_graph=True, half=...)`` end to end;

and a torch.profiler pass over a few calls that reports, per call, when the GPU first and last
ran something relative to the call's start, and how long it sat idle in between.

    python3 benchmarks/predict_phases.py --out benchmarks/results/profile/phases
    python3 benchmarks/predict_phases.py --out benchmarks/results/profile/phases --model yolox:s --name predict_phases_yolox_s
"""

from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import md_table, write_result  # noqa: E402

# (module, attribute path, label): the functions whose entry and exit are stamped
WRAPPED = [
    ("libreyolo.model", "Model._options", "options"),
    ("libreyolo.engine.predictor", "_prepared", "prepared"),
    ("libreyolo.engine.sources", "load_source", "load_source"),
    ("libreyolo.engine.predictor", "CallClock.__init__", "clock_init"),
    ("libreyolo.engine.predictor", "_Saver.__init__", "saver_init"),
    ("libreyolo.engine.predictor", "CallClock.start", "clock_start"),
    ("libreyolo.tasks.base", "LetterboxTask.preprocess", "preprocess"),
    ("libreyolo.tasks.base", "LetterboxTask.preprocess_pixels", "preprocess_pixels"),
    ("libreyolo.tasks.detect.preprocess", "_letterboxed", "letterboxed"),
    ("libreyolo.tasks.detect.preprocess", "Staging.upload", "upload"),
    ("libreyolo.ops.letterbox", "letterbox_batch", "letterbox"),
    ("libreyolo.tasks.detect.preprocess", "normalized", "normalize"),
    ("libreyolo.graphs.runner", "PredictGraphs.run", "runner"),
    ("libreyolo.graphs.runner", "_replay_entry", "replay_entry"),
    ("libreyolo.graphs.runner", "CapturedStage.replay", "graph_launch"),
    ("libreyolo.tasks.detect", "DetectTask.outputs", "outputs"),
    ("libreyolo.ops.candidates", "to_host", "D2H"),
    ("libreyolo.ops.candidates", "select_detections", "select"),
    ("libreyolo.ops.boxes", "scale_boxes", "scale_boxes"),
    ("libreyolo.engine.predictor", "CallClock.on_host", "on_host"),
    ("libreyolo.engine.predictor", "CallClock.speed", "speed"),
]


class Stamps:
    def __init__(self) -> None:
        self.on = False
        self.seq: list[tuple[str, float]] = []
        self.undo: list[Any] = []

    def wrap_all(self) -> None:
        for mod_name, path, label in WRAPPED:
            mod = importlib.import_module(mod_name)
            owner: Any = mod
            parts = path.split(".")
            for p in parts[:-1]:
                owner = getattr(owner, p)
            orig = getattr(owner, parts[-1])
            setattr(owner, parts[-1], self._wrapper(orig, label))
            self.undo.append((owner, parts[-1], orig))
            # modules that imported the function by name hold their own reference: patch those too
            for other in list(sys.modules.values()):
                if other is None or other is mod or not getattr(other, "__name__", "").startswith("libreyolo"):
                    continue
                if len(parts) != 1:
                    continue
                for name, value in list(vars(other).items()):
                    if value is orig:
                        setattr(other, name, getattr(owner, parts[-1]))
                        self.undo.append((other, name, orig))

    def _wrapper(self, fn: Any, label: str) -> Any:
        stamps = self

        @functools.wraps(fn)
        def w(*a: Any, **k: Any) -> Any:
            if stamps.on:
                stamps.seq.append((f"{label}.enter", time.perf_counter()))
            out = fn(*a, **k)
            if stamps.on:
                stamps.seq.append((f"{label}.exit", time.perf_counter()))
            return out

        return w

    def restore(self) -> None:
        for owner, name, orig in reversed(self.undo):
            setattr(owner, name, orig)
        self.undo.clear()


def segments(calls: list[list[tuple[str, float]]]) -> list[dict[str, Any]]:
    """Median duration of each (stamp -> next stamp) segment, in the order of the most common sequence."""
    keyed: dict[tuple[str, ...], list[list[tuple[str, float]]]] = {}
    for c in calls:
        keyed.setdefault(tuple(n for n, _ in c), []).append(c)
    names, same = max(keyed.items(), key=lambda kv: len(kv[1]))
    rows = []
    for i in range(len(names) - 1):
        d = [(c[i + 1][1] - c[i][1]) * 1e3 for c in same]
        rows.append({"from": names[i], "to": names[i + 1], "ms": round(statistics.median(d), 4)})
    return rows, len(same), len(calls)


def gpu_span(model: Any, img: np.ndarray, half: bool, device: torch.device, n: int = 5) -> dict[str, Any]:
    """torch.profiler over ``n`` calls: per call, GPU first/last activity after the call's start and idle time."""
    from torch.profiler import ProfilerActivity, profile

    spans = []
    for _ in range(n):
        torch.cuda.synchronize(device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            with torch.profiler.record_function("CALL"):
                model.predict(img, cuda_graph=True, half=half, conf=0.25)
            torch.cuda.synchronize(device)
        events = prof.events()
        call = next(e for e in events if e.name == "CALL" and e.device_type.name == "CPU")
        t0, t1 = call.time_range.start, call.time_range.end
        gpu = sorted((e.time_range.start, e.time_range.end) for e in events
                     if e.device_type.name == "CUDA" and e.time_range.end > e.time_range.start)
        if not gpu:
            continue
        busy, cur_s, cur_e = 0.0, gpu[0][0], gpu[0][1]
        for s, e in gpu[1:]:
            if s > cur_e:
                busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy += cur_e - cur_s
        spans.append({"call_us": t1 - t0, "gpu_first_us": gpu[0][0] - t0, "gpu_last_end_us": max(e for _, e in gpu) - t0,
                      "gpu_busy_us": busy, "gpu_events": len(gpu)})
    return {k: round(statistics.median(s[k] for s in spans), 1) for k in spans[0]} if spans else {}


def prices(device: torch.device, img: np.ndarray, n: int = 2000) -> list[dict[str, Any]]:
    """Host microseconds of the primitives a call is made of, on this host (no syncs inside)."""
    pinned = torch.empty((1, *img.shape), dtype=torch.uint8, pin_memory=True)
    view, src = pinned.numpy(), torch.from_numpy(img[None].copy())
    dev_u8 = torch.empty(pinned.shape, dtype=torch.uint8, device=device)
    small = torch.zeros(300, 6, device=device)
    ev = torch.cuda.Event()
    x = dev_u8.permute(0, 3, 1, 2)

    def f() -> None:
        return None

    def inference_mode() -> None:
        with torch.inference_mode():
            pass

    ops = {
        "python call": f,
        "torch.cuda.current_stream(dev)": lambda: torch.cuda.current_stream(device),
        "Event.record()": lambda: ev.record(),
        "torch.empty on the device": lambda: torch.empty(pinned.shape, dtype=torch.uint8, device=device),
        "np.copyto 1x480x640x3 into pinned": lambda: np.copyto(view, img[None]),
        "torch copy_ 1x480x640x3 into pinned": lambda: pinned.copy_(src),
        "device copy_ from pinned (async)": lambda: dev_u8.copy_(pinned, non_blocking=True),
        "pinned .to(device, non_blocking)": lambda: pinned.to(device, non_blocking=True),
        "flip(1) launch": lambda: x.flip(1),
        "div by 255 launch": lambda: torch.div(x, 255.0),
        "small D2H .cpu() (syncs)": lambda: small.cpu(),
        "inference_mode enter+exit": inference_mode,
    }
    rows = []
    for name, fn in ops.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        us = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize(device)
        rows.append({"primitive": name, "host_us": round(us, 2)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--model", default="yolo9:t", help="family:size (peer_predict's names)")
    ap.add_argument("--name", default="predict_phases", help="results file stem")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("predict_phases.py needs a CUDA device")
    from benchmarks.peer_predict import libre_model, photo
    from libreyolo.models._base.inference import channels_last, input_dtype
    from libreyolo.ops.candidates import to_host
    from libreyolo.tasks.detect.preprocess import Normalize, Staging, normalized

    dev = torch.device("cuda", 0)
    img, what = photo()
    results: dict[str, Any] = {"photo": what}
    fam, size = args.model.split(":")
    md = [f"# One predict(cuda_graph=True) call, function by function: {fam}-{size}, batch 1, {what}", ""]
    for half in (True, False):
        model = libre_model(fam, size, dev)
        for _ in range(20):
            model.predict(img, cuda_graph=True, half=half, conf=0.25)
        twin = model.prepared(half=half)
        dtype, cl = input_dtype(twin), channels_last(twin)
        fmt = torch.channels_last if cl else torch.contiguous_format
        staging = Staging()
        h, w = img.shape[:2]

        step = Normalize(dtype=dtype, channels_last=cl, bgr=True)

        def floor(twin: Any = twin, step: Any = step, staging: Any = staging) -> Any:
            t = staging.upload(img[None], dev).permute(0, 3, 1, 2)
            out = twin.forward(t, cuda_graph=True, decoded=True, prologue=step, host=True)
            arr = to_host(out).numpy()
            return arr[0][arr[0][:, 4] > 0.25]

        x0 = normalized(staging.upload(img[None], dev).permute(0, 3, 1, 2), dtype=dtype, memory_format=fmt)

        def replay(twin: Any = twin, x0: Any = x0) -> Any:
            out = twin.forward(x0, cuda_graph=True, decoded=True)
            torch.cuda.synchronize(dev)
            return out

        def call(model: Any = model, half: bool = half) -> Any:
            return model.predict(img, cuda_graph=True, half=half, conf=0.25)

        arms = {"predict": call, "floor": floor, "replay": replay}
        for fn in arms.values():
            for _ in range(10):
                fn()
        times: dict[str, list[float]] = {k: [] for k in arms}
        per = max(5, args.iters // args.rounds)
        for _ in range(args.rounds):
            for k, fn in arms.items():
                samples = []
                for _ in range(per):
                    torch.cuda.synchronize(dev)
                    t0 = time.perf_counter()
                    fn()
                    samples.append((time.perf_counter() - t0) * 1e3)
                times[k].append(statistics.median(samples))
        arm_row = {k: round(statistics.median(v), 4) for k, v in times.items()}
        stamps = Stamps()
        stamps.wrap_all()
        calls = []
        try:
            for i in range(args.iters + 10):
                torch.cuda.synchronize(dev)
                stamps.seq = [("call.enter", time.perf_counter())]
                stamps.on = True
                model.predict(img, cuda_graph=True, half=half, conf=0.25)
                stamps.seq.append(("call.exit", time.perf_counter()))
                stamps.on = False
                if i >= 10:
                    calls.append(stamps.seq)
        finally:
            stamps.on = False
            stamps.restore()
        rows, n_same, n_all = segments(calls)
        span = gpu_span(model, img, half, dev)
        tag = "fp16" if half else "fp32"
        results[tag] = {"arms_ms": arm_row, "segments": rows, "calls_same_sequence": n_same, "calls": n_all,
                        "gpu_span": span, "stamped_total_ms": round(sum(r["ms"] for r in rows), 4)}
        md += [f"## half={half}", "", md_table([arm_row], list(arm_row)), "",
               f"Segments of a stamped call (medians; {n_same} of {n_all} calls took the most common path), "
               f"sum {results[tag]['stamped_total_ms']} ms:", "", md_table(rows, ["from", "to", "ms"]), "",
               "GPU activity within one call (torch.profiler, us from the call's start): "
               + ", ".join(f"{k} {v}" for k, v in span.items()), ""]
        del model, twin
        torch.cuda.empty_cache()
    price_rows = prices(dev, img)
    results["prices"] = price_rows
    md += ["## Host cost of the primitives (us per call, no syncs)", "", md_table(price_rows, ["primitive", "host_us"]), ""]
    md.append("`floor`: pinned upload + graph replay (normalisation inside) + D2H + numpy threshold, "
              "nothing else; `replay`: the synchronous runner call on a prepared input.")
    write_result(Path(args.out) / f"{args.name}.json", numbers=results, markdown="\n".join(md), commit=args.commit)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
