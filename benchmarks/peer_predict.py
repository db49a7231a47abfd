"""End-to-end ``predict()`` against Ultralytics, in one process, on one real photo.

Arms (batch 1 and 8, fp32 and fp16, median wall time per call after warm-up, synchronised):
Ultralytics YOLOv8n, YOLO11n and YOLOv9-t (random init from their yaml; Ultralytics fuses on
its first predict) and libreyolo yolo9-t, yolox-s, rtmdet-t, rtdetr-r18 (untrained, nc=80, the
head's prior bias like Ultralytics'), eager and ``cuda_graph=True``. For yolo9-t it also
times the network step of the prepared half model (eager, graph replay, profiler kernel sum,
``torch.compile(mode="reduce-overhead")``) on the photo's letterboxed input, and records the
``Results.speed`` breakdown of each libreyolo arm.

The photo: scikit-image's ``coffee`` (a real photograph shipped with the package), resized to
640x480; without scikit-image, the bundled ``SAMPLE_IMAGE``. Ultralytics is an optional
benchmark dependency (carry its wheel, SPEC A-4); without it only the libreyolo arms run.

    python3 benchmarks/peer_predict.py --out benchmarks/results/peer
    python3 benchmarks/peer_predict.py --out /tmp/p --iters 5 --warmup 1 --batches 1 --families yolo9:t --device cpu
"""

from __future__ import annotations

import argparse
import logging
import os
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

logger = logging.getLogger("peer_predict")
ULTRALYTICS = ("yolov8n", "yolo11n", "yolov9t")
TOKENS = {"yolo9": "YOLO9", "yolox": "YOLOX", "rtmdet": "RTMDet", "rtdetr": "RTDETR"}


def photo() -> tuple[np.ndarray, str]:
    """(RGB uint8 (480, 640, 3), description)."""
    import cv2

    try:
        from skimage import data

        rgb = data.coffee()
        what = "scikit-image data.coffee() (400x600 photo) resized to 640x480"
    except ImportError:
        from libreyolo import SAMPLE_IMAGE

        rgb = cv2.imread(str(SAMPLE_IMAGE))[:, :, ::-1]
        what = "libreyolo SAMPLE_IMAGE resized to 640x480 (scikit-image not installed)"
    rgb = cv2.resize(np.ascontiguousarray(rgb), (640, 480), interpolation=cv2.INTER_LINEAR)
    return np.ascontiguousarray(rgb), what


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn: Any, *, device: torch.device, warmup: int, iters: int) -> dict[str, Any]:
    """Median wall time per call, synchronised after each (``libreyolo.bench.timing.time_wall``)."""
    from libreyolo.bench import timing

    return timing.time_wall(fn, device=device, iters=iters, warmup=warmup)


class ArmTimer:
    """Times the end-to-end arms: each one at once (``interleave=False``), or all of them
    together at the end, one call of each arm per round (``interleave=True``,
    ``libreyolo.bench.timing.time_interleaved``), so a change of the shared host's load hits every
    arm alike instead of whichever arm ran at that moment."""

    def __init__(self, *, interleave: bool, device: torch.device, warmup: int, iters: int) -> None:
        self.interleave, self.device, self.warmup, self.iters = interleave, device, warmup, iters
        self.pending: list[tuple[dict[str, Any], Any, Any]] = []

    def add(self, row: dict[str, Any], fn: Any, done: Any = None) -> None:
        """Time ``fn`` into ``row`` (now or at :meth:`finish`); then ``done(row)`` if given."""
        if not self.interleave:
            row.update(time_calls(fn, device=self.device, warmup=self.warmup, iters=self.iters))
            if done is not None:
                done(row)
            return
        self.pending.append((row, fn, done))

    def finish(self) -> None:
        if not self.pending:
            return
        from libreyolo.bench import timing

        fns = {i: fn for i, (_, fn, _) in enumerate(self.pending)}
        res = timing.time_interleaved(fns, device=self.device, iters=self.iters, warmup=self.warmup)
        for i, (row, _, done) in enumerate(self.pending):
            row.update(res[i])
            row["timing"] = "interleaved"
            if done is not None:
                done(row)
        self.pending.clear()


# --------------------------------------------------------------------------- Ultralytics
def ultralytics_arms(bgr: np.ndarray, *, batches: list[int], device: torch.device, timer: ArmTimer,
                     ) -> list[dict[str, Any]]:
    try:
        import ultralytics
        from ultralytics import YOLO
    except ImportError as e:
        return [{"peer": "ultralytics", "error": f"not installed: {e}"}]
    rows = []
    dev = 0 if device.type == "cuda" else "cpu"
    for name in ULTRALYTICS:
        for half in (False, True):
            if half and device.type != "cuda":
                continue
            for b in batches:
                row: dict[str, Any] = {"library": f"ultralytics {ultralytics.__version__}", "model": name,
                                       "half": half, "batch": b, "graph": False}
                try:
                    m = YOLO(f"{name}.yaml")
                    src = bgr if b == 1 else [bgr] * b

                    def call(m: Any = m, src: Any = src, half: bool = half) -> Any:
                        return m.predict(src, imgsz=640, half=half, device=dev, verbose=False, conf=0.25)

                    res = call()
                    row["input_shape"] = list(getattr(getattr(m, "predictor", None), "imgsz", []) or [])
                    timer.add(row, call)
                    row["detections"] = len(res[0].boxes)
                    sp = res[0].speed
                    row["speed"] = {k: round(float(v), 3) for k, v in sp.items()}
                except Exception as e:  # noqa: BLE001 - a failing arm is recorded, the rest still run
                    row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                rows.append(row)
                logger.info("%s", row)
    return rows


# --------------------------------------------------------------------------- libreyolo
def libre_model(fam: str, size: str, device: torch.device) -> Any:
    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    return LibreYOLO(f"Libre{TOKENS[fam]}{size}.pt", pretrained=False, nc=80).to(device)


def libre_arms(rgb: np.ndarray, *, families: list[tuple[str, str]], batches: list[int], device: torch.device,
               timer: ArmTimer) -> list[dict[str, Any]]:
    rows, keep = [], []
    graphs = (False, True) if device.type == "cuda" else (False,)
    for fam, size in families:
        try:
            model = libre_model(fam, size, device)
        except Exception as e:  # noqa: BLE001
            rows.append({"library": "libreyolo", "model": f"{fam}-{size}", "error": f"build: {e}"})
            continue
        for half in (False, True):
            for graph in graphs:
                for b in batches:
                    row: dict[str, Any] = {"library": "libreyolo", "model": f"{fam}-{size}", "half": half,
                                           "batch": b, "graph": graph}
                    imgs = rgb if b == 1 else [rgb] * b

                    def call(imgs: Any = imgs, b: int = b, half: bool = half, graph: bool = graph,
                             model: Any = model) -> Any:
                        return model.predict(imgs, batch=b, half=half, cuda_graph=graph, conf=0.25)

                    try:
                        res = call()
                        speeds: list[dict[str, float]] = []

                        def timed(call: Any = call, speeds: list = speeds) -> None:
                            speeds.append(call()[0].speed)

                        def done(row: dict[str, Any], speeds: list = speeds, b: int = b) -> None:
                            row["speed"] = {k: round(statistics.median(s[k] for s in speeds) * b, 3)
                                            for k in speeds[0]}  # per batch, to compare with the call
                            row["speed_sum_ms"] = round(sum(row["speed"].values()), 3)

                        timer.add(row, timed, done)
                        row["detections"] = len(res[0])
                        info = model.graph_info()
                        row["prepared"] = info.get("prepared")
                        if graph:
                            row["graph_shapes"] = [g["shape"] for g in info["graphs"]]
                    except Exception as e:  # noqa: BLE001
                        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                    rows.append(row)
                    logger.info("%s", row)
        if timer.interleave:  # timed at the end, beside every other arm
            keep.append(model)
            continue
        model.release_graphs()
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    timer.finish()
    return rows


def network_step(rgb: np.ndarray, *, families: list[tuple[str, str]], device: torch.device, warmup: int,
                 iters: int, with_compile: bool) -> dict[str, Any]:
    """Per family, the prepared model's network step (decode inside where the family has one) on
    the photo's letterboxed input, fp32 and fp16, NCHW and channels-last (cuDNN autotuning on):
    eager and graph replay; for yolo9-t also the profiler's kernel sum and torch.compile."""
    from libreyolo.bench import timing
    from libreyolo.graphs.seam import run_eager
    from libreyolo.models._base.inference import channels_last, cudnn_benchmark, input_dtype, uses_graph_bias_act
    from libreyolo.tasks.detect.preprocess import preprocess

    out: dict[str, Any] = {}
    for fam, size in families:
        model = libre_model(fam, size, device)
        cls = type(model.family)
        default_cl, default_half_cl, default_ba = cls.INFER_CHANNELS_LAST, cls.HALF_CHANNELS_LAST, cls.GRAPH_BIAS_ACT
        for half in (False, True):
            for cl in (False, True):
                cls.INFER_CHANNELS_LAST = cl
                cls.HALF_CHANNELS_LAST = None  # both dtypes in the arm's layout
                model.backend.drop_prepared()
                twin = model.prepared(half=half)
                decoded = bool(twin.DECODE_TOPK)
                x, _ = preprocess([rgb], (640, 640), device, dtype=input_dtype(twin), channels_last=channels_last(twin),
                                  rect=True, stride=twin.stride)
                key = f"{fam}-{size} {'fp16' if half else 'fp32'} {'channels_last' if cl else 'nchw'}"
                r: dict[str, Any] = {"input": list(x.shape), "dtype": str(x.dtype), "channels_last": cl,
                                     "decode_in_graph": decoded}
                try:
                    with cudnn_benchmark(device):
                        eager = lambda: twin.forward(x, decoded=decoded)  # noqa: E731, B023 - used in this iteration
                        graph = lambda: twin.forward(x, cuda_graph=True, decoded=decoded)  # noqa: E731, B023
                        r["eager"] = timing.time_events(eager, device=device, iters=iters, warmup=warmup)
                        r["graph"] = timing.time_events(graph, device=device, iters=iters, warmup=warmup)
                        if fam == "yolo9":
                            try:
                                r["eager_profile"] = timing.kernel_profile(eager, device=device)
                                r["graph_profile"] = timing.kernel_profile(graph, device=device)
                            except RuntimeError as e:
                                r["profile_error"] = str(e)[:300]
                            # the replay's own kernels (with the fused conv epilogue they are fewer than eager's)
                            ks = ((r.get("graph_profile") or {}).get("kernel_sum_ms")
                                  or (r.get("eager_profile") or {}).get("kernel_sum_ms"))
                            r["graph_over_kernel_sum"] = r["graph"]["median_ms"] / ks if ks else None
                        if uses_graph_bias_act(twin):  # A/B in the same run: ATen's conv epilogue
                            twin.release()
                            cls.GRAPH_BIAS_ACT = False
                            try:
                                r["graph_aten_epilogue"] = timing.time_events(graph, device=device, iters=iters,
                                                                              warmup=warmup)
                                if fam == "yolo9":
                                    r["graph_aten_epilogue_profile"] = timing.kernel_profile(graph, device=device)
                            finally:
                                cls.GRAPH_BIAS_ACT = default_ba
                                twin.release()
                        default_arm = default_half_cl if half and default_half_cl is not None else default_cl
                        if with_compile and fam == "yolo9" and half and cl == default_arm:
                            r["compile"] = compile_arm(twin, x, decoded=decoded, device=device, warmup=warmup,
                                                       iters=iters, run_eager=run_eager, timing=timing)
                except Exception as e:  # noqa: BLE001 - a failing arm is recorded
                    r["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                out[key] = r
                logger.info("network %s: %s", key, {k: v for k, v in r.items() if k in ("eager", "graph", "error")})
                model.release_graphs()
        cls.INFER_CHANNELS_LAST, cls.HALF_CHANNELS_LAST = default_cl, default_half_cl
        model.backend.drop_prepared()
        del model
        torch.cuda.empty_cache()
    return out


def compile_arm(twin: Any, x: torch.Tensor, *, decoded: bool, device: torch.device, warmup: int, iters: int,
                run_eager: Any, timing: Any) -> dict[str, Any]:
    stages = twin.predict_stages() if decoded else twin.forward_stages()
    try:
        compiled = torch.compile(lambda t: run_eager(stages, t), mode="reduce-overhead")

        def step() -> Any:
            with torch.inference_mode():
                return compiled(x)

        t0 = time.perf_counter()
        step()
        sync(device)
        r = {"compile_s": time.perf_counter() - t0}
        r.update(timing.time_events(step, device=device, iters=iters, warmup=warmup))
        return r
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    finally:
        torch._dynamo.reset()


def best(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    ok = [r for r in rows if "error" not in r and all(r.get(k) == v for k, v in match.items())]
    return min(ok, key=lambda r: r["median_ms"]) if ok else None


def _default_cl() -> bool:
    import torch

    from libreyolo.models._base.inference import twin_channels_last
    from libreyolo.models.yolo9.family import YOLO9

    return twin_channels_last(YOLO9, torch.float16)  # the layout of the half twin the target is about


def targets(rows: list[dict[str, Any]], net: dict[str, Any]) -> dict[str, Any]:
    t: dict[str, Any] = {}
    v8 = best(rows, model="yolov8n", batch=1)
    ours = best(rows, model="yolo9-t", batch=1, graph=True, half=True)
    if v8 and ours:
        t["graph_half_over_v8n_best"] = {"value": ours["median_ms"] / v8["median_ms"], "target": "<= 0.5"}
    v9 = best(rows, model="yolov9t", batch=1, graph=False, half=False)
    eag = best(rows, model="yolo9-t", batch=1, graph=False, half=False)
    if v9 and eag:
        t["eager_fp32_over_ul_v9t_fp32"] = {"value": eag["median_ms"] / v9["median_ms"], "target": "<= 1.0"}
    cl = "channels_last" if _default_cl() else "nchw"
    h = net.get(f"yolo9-t fp16 {cl}", {})
    if ours and h.get("graph"):
        t["e2e_over_graph_step"] = {"value": ours["median_ms"] / h["graph"]["median_ms"], "target": "<= 1.3"}
    if h.get("graph_over_kernel_sum"):
        t["graph_step_over_kernel_sum"] = {"value": h["graph_over_kernel_sum"], "target": "<= 1.1"}
    c = (h.get("compile") or {}).get("median_ms")
    if c and h.get("graph"):
        t["graph_step_over_compile"] = {"value": h["graph"]["median_ms"] / c, "target": "<= 1.0"}
    worst = None
    for r in rows:
        if r.get("library") != "libreyolo" or "error" in r or not r.get("half"):
            continue
        f = best(rows, model=r["model"], batch=r["batch"], graph=r["graph"], half=False)
        if f:
            ratio = r["median_ms"] / f["median_ms"]
            worst = max(worst or 0.0, ratio)
    if worst is not None:
        t["worst_half_over_fp32"] = {"value": worst, "target": "<= 1.0"}
    for v in t.values():
        v["met"] = bool(eval(f"{v['value']} {v['target']}"))  # noqa: S307 - our own fixed strings
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "peer")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--families", default="yolo9:t,yolox:s,rtmdet:t,rtdetr:r18")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-ultralytics", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--interleave", action="store_true",
                    help="time every end-to-end arm together, one call of each per round (fair on a busy host)")
    ap.add_argument("--commit", default=None, help="commit to record (default: LIBREYOLO_COMMIT or git)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("YOLO_OFFLINE", "1")
    device = torch.device(args.device if args.device != "cuda" or torch.cuda.is_available() else "cpu")
    batches = [int(b) for b in args.batches.split(",") if b]
    fams = [tuple(f.split(":")) for f in args.families.split(",") if f]
    rgb, what = photo()
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    timer = ArmTimer(interleave=args.interleave, device=device, warmup=args.warmup, iters=args.iters)
    if not args.no_ultralytics:
        rows += ultralytics_arms(np.ascontiguousarray(rgb[:, :, ::-1]), batches=batches, device=device,
                                 timer=timer)
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])  # both libraries take numpy arrays in OpenCV (BGR) order
    rows += libre_arms(bgr, families=fams, batches=batches, device=device, timer=timer)  # times every arm
    net = network_step(rgb, families=fams, device=device, warmup=args.warmup, iters=args.iters,
                       with_compile=not args.no_compile) if device.type == "cuda" else {}
    tg = targets(rows, net)
    cols = ["library", "model", "batch", "half", "graph", "median_ms", "p90_ms", "detections", "speed_sum_ms"]
    table = [{**r, "median_ms": round(r["median_ms"], 3) if "median_ms" in r else r.get("error", ""),
              "p90_ms": round(r["p90_ms"], 3) if "p90_ms" in r else ""} for r in rows]
    md = [f"# End-to-end predict() vs Ultralytics ({what})", "", md_table(table, cols), ""]
    if net:
        md += ["## Network step of the prepared model (decode inside where the family has one), ms", "",
               md_table([{"arm": k, "eager": round(v["eager"]["median_ms"], 3) if "eager" in v else v.get("error"),
                          "graph": round(v["graph"]["median_ms"], 3) if "graph" in v else "",
                          "kernel_sum": (v.get("eager_profile") or {}).get("kernel_sum_ms"),
                          "kernels": (v.get("eager_profile") or {}).get("kernel_count"),
                          "graph_kernel_sum": (v.get("graph_profile") or {}).get("kernel_sum_ms"),
                          "graph_kernels": (v.get("graph_profile") or {}).get("kernel_count"),
                          "graph_aten_epilogue": round(v["graph_aten_epilogue"]["median_ms"], 3)
                          if "graph_aten_epilogue" in v else "",
                          "compile": (v.get("compile") or {}).get("median_ms")} for k, v in net.items()],
                        ["arm", "eager", "graph", "kernel_sum", "kernels", "graph_kernel_sum", "graph_kernels",
                         "graph_aten_epilogue", "compile"]), "",
               "`graph`: the replay as predict captures it (a family with `GRAPH_BIAS_ACT` fuses each conv's bias "
               "add and SiLU in one kernel); `graph_aten_epilogue`: the same replay captured with ATen's two "
               "kernels instead, timed in the same run; `kernel_sum` / `kernels`: the eager forward's.", ""]
    md += ["## Targets", "", md_table([{"measure": k, **v} for k, v in tg.items()], ["measure", "value", "target", "met"])]
    args.out.mkdir(parents=True, exist_ok=True)
    write_result(args.out / "peer_predict.json",
                 numbers={"arms": rows, "network_step": net, "targets": tg, "seconds": time.perf_counter() - t0},
                 extra={"photo": what, "device": str(device), "warmup": args.warmup, "iters": args.iters,
                        "interleave": args.interleave},
                 markdown="\n".join(md), commit=args.commit)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
