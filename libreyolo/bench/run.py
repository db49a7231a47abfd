"""``run_benchmark``: eager vs CUDA graph (vs ``torch.compile``) in one run, one JSON out.

Arms, each measured after warm-up in the same process:

* network step: ``model.forward(x)`` on a preprocessed batch -- eager, graph replay, and
  ``torch.compile(mode="reduce-overhead")`` as the peer to beat; CUDA-event medians, the summed
  kernel time of one step from the profiler (the floor a replay can reach) and its kernel count,
  peak memory per arm (``max_memory_allocated`` after a reset), capture time;
* end to end: ``model.predict(images)`` on ``SAMPLE_IMAGE``-sized images, eager vs graph,
  synchronised wall-clock medians (preprocess + network + decode/NMS + copy to host).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from ..errors import CheckpointError, ConfigError
from . import timing
from .report import evaluate_targets, format_table, write_results

if TYPE_CHECKING:
    from ..backends.torch import TorchBackend
    from ..model import Model

logger = logging.getLogger(__name__)

SCHEMA = 1


def run_benchmark(
    *,
    model: str | Path | Model = "LibreYOLO9t.pt",
    imgsz: int | str | Sequence[int] | None = None,
    batch: int | str | Sequence[int] = 1,
    cuda_graph: bool | str = True,
    half: bool = True,
    device: str | int | None = None,
    warmup: int = 20,
    iters: int = 100,
    e2e_iters: int = 30,
    end_to_end: bool = True,
    compile: bool = True,  # noqa: A002 - the user-facing name of the torch.compile arm
    weights: Literal["auto", "pretrained", "untrained"] = "auto",
    force_graph: bool = False,
    profile: bool = True,
    out: str | Path | None = None,
    show: bool = True,
) -> dict[str, Any]:
    """Benchmark prediction of one model, eager vs CUDA graph, for one or more batch sizes.

    Args:
        model: weights name/path (``LibreYOLO9t.pt``) or a built model.
        imgsz: input size (int, ``(h, w)`` or ``"h,w"``); default the model's.
        batch: a batch size, or several (``[1, 8, 32]`` or ``"1,8,32"``): one run each.
        cuda_graph: ``False`` times eager only; ``True``/``"auto"`` adds the graph arm.
        half: autocast to float16 (AMP) on CUDA.
        device: default CUDA when present.
        warmup, iters: untimed and timed iterations of the network arms.
        e2e_iters: timed iterations of ``predict()`` (0 or ``end_to_end=False`` skips it).
        compile: add the ``torch.compile(mode="reduce-overhead")`` arm (a failure is recorded).
        weights: ``"auto"`` loads the weights and falls back to an untrained model when they cannot
            be had (recorded in the result); ``"pretrained"`` insists; ``"untrained"`` never loads.
        force_graph: time the graph arm even if the family has not opted in (its result then says
            ``forced``); without it such a family's graph arm records the refusal.
        profile: add the profiler's kernel sum and count per network arm. Profiling runs after every
            timing of this call (a profiler session can leave launch overhead behind it).
        out: folder for ``benchmark-<family><size>-<imgsz>.json`` and ``.md``.
        show: print the table.

    Returns:
        ``{"schema", "environment", "model", "runs": [per batch: {"config", "network":
        {"eager", "graph", "compile"}, "end_to_end": {"eager", "graph"}, "derived", "targets",
        "graph_info"}]}``; times in ms, memory in bytes.

    Example:
        >>> from libreyolo.bench import run_benchmark
        >>> r = run_benchmark(model="LibreYOLO9t.pt", imgsz=64, device="cpu", half=False, warmup=1,
        ...                   iters=3, end_to_end=False, show=False)  # on a GPU: imgsz=640, batch=[1, 8]
        >>> run = r["runs"][0]
        >>> r["model"]["family"], run["config"]["batch"], run["network"]["eager"]["n"]
        ('yolo9', 1, 3)
        >>> run["network"]["eager"]["median_ms"] > 0, "skipped" in run["network"]["graph"]
        (True, True)
    """
    from ..graphs.parity import environment
    from ..models._base.family import select_device
    from ..ops.letterbox import check_imgsz

    dev = select_device(device)
    fam, weights_note = prepare_model(model, weights=weights, device=dev, force_graph=force_graph)
    hw = check_imgsz(_parse_imgsz(imgsz) if imgsz is not None else fam.imgsz, stride=fam.stride)
    batches = _parse_batches(batch)
    graph = _parse_graph(cuda_graph) and dev.type == "cuda"
    amp = (torch.float16 if dev.type == "cuda" else torch.bfloat16) if half else None
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "environment": environment(),
        "model": {"family": fam.FAMILY, "size": fam.size, "task": fam.task, "weights": weights_note,
                  "params": sum(p.numel() for p in fam.net.parameters()), "fused": fam.fused},
        "runs": [],
    }
    # The network arms time what predict() runs: the prepared model (fused, its weights cast once
    # to half precision when ``half``, channels-last where the family measured it wins).
    twin = prepared_twin(fam, half=half, force_graph=force_graph)
    amp_net = amp if twin.net_dtype() == torch.float32 else None
    result["model"]["prepared"] = {"dtype": _dtype(twin.net_dtype()), "channels_last": twin.channels_last,
                                   "autocast": _dtype(amp_net)}
    # The network arms run the input shape predict() builds for the sample image (with rect=True
    # the smallest stride-multiple rectangle), so "e2e / network step" compares like with like.
    from ..ops.letterbox import letterbox_shape

    hw = letterbox_shape([tuple(_sample_image().shape[:2])], hw, stride=fam.stride, rect=True)
    for b in batches:
        cfg = {"imgsz": list(hw), "batch": b, "amp": _dtype(amp), "device": str(dev), "warmup": warmup,
               "iters": iters, "e2e_iters": e2e_iters if end_to_end else 0,
               "graph_forced": bool(force_graph and not fam.SUPPORTS_CUDA_GRAPH)}
        run = _bench_one(fam, twin, hw=hw, batch=b, amp=amp_net, dev=dev, graph=graph, warmup=warmup,
                         iters=iters, e2e_iters=e2e_iters if end_to_end else 0,
                         with_compile=compile and dev.type == "cuda", half=half)
        result["runs"].append({"config": cfg, **run})
    for run in result["runs"]:
        if profile and dev.type == "cuda":
            graph_ok = graph and "error" not in run["network"]["graph"]
            add_kernel_profile(run, twin, hw=hw, batch=run["config"]["batch"], amp=amp_net, dev=dev,
                               graph=graph_ok)
        finish_run(run)
    if out is not None:
        write_results(result, Path(out))
    if show:
        print(format_table(result))  # the benchmark's table is its output (CLI / script use)
    return result


# --------------------------------------------------------------------------- one batch size
class _Twin:
    """The prepared model the network arms run, with the input dtype and layout it expects."""

    def __init__(self, fam: TorchBackend) -> None:
        from ..models._base.inference import channels_last, input_dtype

        self.fam = fam
        self.channels_last = channels_last(fam)
        self._dtype = input_dtype(fam)

    def net_dtype(self) -> torch.dtype:
        return self._dtype

    def batch(self, x: torch.Tensor) -> torch.Tensor:
        fmt = torch.channels_last if self.channels_last else torch.contiguous_format
        return x.to(self._dtype, memory_format=fmt)


def prepared_twin(fam: Model, *, half: bool, force_graph: bool) -> _Twin:
    twin = fam.prepared(half=half)
    if force_graph and not twin.SUPPORTS_CUDA_GRAPH:
        from ..graphs.runner import PredictGraphs

        twin.use_graphs(PredictGraphs(twin.family, force=True))
    return _Twin(twin)


def _bench_one(owner: Model, prep: _Twin, *, hw: tuple[int, int], batch: int, amp: torch.dtype | None,
               dev: torch.device, graph: bool, warmup: int, iters: int, e2e_iters: int, with_compile: bool,
               half: bool) -> dict[str, Any]:
    from ..graphs.parity import probe_batch

    fam = prep.fam
    x = prep.batch(probe_batch("image", (batch, 3, *hw), device=dev))
    net: dict[str, Any] = {}
    fam.release()

    def eager_step() -> Any:
        return fam.forward(x, cuda_graph=False, amp_dtype=amp)

    net["eager"] = _measure(eager_step, dev=dev, warmup=warmup, iters=iters)
    if graph:
        net["graph"] = _graph_arm(fam, x, amp=amp, dev=dev, warmup=warmup, iters=iters)
    else:
        net["graph"] = {"skipped": "cuda_graph=False" if dev.type == "cuda" else f"CUDA graphs need CUDA, ran on {dev}"}
    if with_compile:
        net["compile"] = _compile_arm(fam, x, amp=amp, dev=dev, warmup=warmup, iters=iters)
    e2e: dict[str, Any] = {}
    if e2e_iters > 0:
        images = [_sample_image()] * batch
        e2e["source"] = f"{len(images)} x {images[0].shape[1]}x{images[0].shape[0]} BGR image(s)"
        e2e["eager"] = _e2e_arm(owner, images, hw=hw, batch=batch, half=half, dev=dev, policy=False, iters=e2e_iters)
        if graph and "error" not in net["graph"]:
            e2e["graph"] = _e2e_arm(owner, images, hw=hw, batch=batch, half=half, dev=dev, policy=True,
                                    iters=e2e_iters)
        peer = _ultralytics_arm(images, half=half, dev=dev, iters=e2e_iters)
        if peer is not None:
            e2e["ultralytics_yolov8n"] = peer
    info = fam.graph_info() if graph else None
    fam.release()
    return {"network": net, "end_to_end": e2e, "graph_info": info}


def prepare_model(model: Any, *, weights: str, device: torch.device, force_graph: bool) -> tuple[Model, str]:
    """Load (or take) the model, move it to ``device`` and fuse it as deployed.

    With ``force_graph`` an unflagged family gets a forced graph runner, so that its graph arm can
    be measured before its parity run (the result records ``graph_forced``).
    """
    fam, note = _load_model(model, weights)
    fam.to(device)
    fam.fuse()
    if force_graph and not fam.SUPPORTS_CUDA_GRAPH:
        from ..graphs.runner import PredictGraphs

        fam.backend.use_graphs(PredictGraphs(fam.family, force=True))
    return fam, note


def add_kernel_profile(run: dict[str, Any], prep: _Twin, *, hw: tuple[int, int], batch: int,
                       amp: torch.dtype | None, dev: torch.device, graph: bool) -> None:
    """Profile one eager step (and one replay) and merge kernel sum / count into ``run``."""
    from ..graphs.parity import probe_batch

    fam = prep.fam
    x = prep.batch(probe_batch("image", (batch, 3, *hw), device=dev))
    net = run["network"]
    net["eager"].update(_profile(lambda: fam.forward(x, cuda_graph=False, amp_dtype=amp), dev))
    if graph:
        fam.release()
        net["graph"].update(_profile(lambda: fam.forward(x, cuda_graph=True, amp_dtype=amp), dev))
        fam.release()


def profile_runs(model: Any, runs: list[dict[str, Any]], *, weights: str, half: bool, device: torch.device,
                 force_graph: bool = True) -> None:
    """A profiler pass over finished timing ``runs`` of ``model`` (kernel sum / count merged into
    each, then :func:`finish_run`): the model is loaded and prepared again as :func:`run_benchmark`
    prepares it, so the profiled step is the timed one. Run it after every timing: a profiler
    session can leave launch overhead behind it.

    Example:
        >>> from libreyolo.bench import run_benchmark
        >>> r = run_benchmark(model="LibreYOLO9t.pt", imgsz=64, device="cpu", half=False, warmup=0, iters=1,
        ...                   end_to_end=False, compile=False, weights="untrained", show=False)
        >>> profile_runs("LibreYOLO9t.pt", r["runs"], weights="untrained", half=False, device=torch.device("cpu"))
        >>> r["runs"][0]["network"]["eager"]["note"]  # the kernel profile needs a CUDA device
        'needs CUDA'
    """
    fam, _ = prepare_model(model, weights=weights, device=device, force_graph=force_graph)
    twin = prepared_twin(fam, half=half, force_graph=force_graph)
    amp = (torch.float16 if device.type == "cuda" else torch.bfloat16) if half else None
    amp_net = amp if twin.net_dtype() == torch.float32 else None
    for run in runs:
        graph_ok = device.type == "cuda" and "error" not in run["network"]["graph"]
        add_kernel_profile(run, twin, hw=tuple(run["config"]["imgsz"]), batch=run["config"]["batch"],
                           amp=amp_net, dev=device, graph=graph_ok)
        finish_run(run)
    del fam, twin
    if device.type == "cuda":
        torch.cuda.empty_cache()


def finish_run(run: dict[str, Any]) -> None:
    """(Re)compute ``derived`` ratios and the ``targets`` check of one run in place."""
    run["derived"] = _derive(run["network"], run["end_to_end"])
    run["targets"] = evaluate_targets(run)


def _measure(step: Any, *, dev: torch.device, warmup: int, iters: int) -> dict[str, Any]:
    base = timing.fresh_memory(dev)
    t = timing.time_events(step, device=dev, iters=iters, warmup=warmup)
    peak = timing.peak_memory(dev)
    return {**t, **peak, "base_bytes": base}


def _profile(step: Any, dev: torch.device) -> dict[str, Any]:
    try:
        return timing.kernel_profile(step, device=dev)
    except RuntimeError as e:  # documented: a profiler failure is reported, the timings still stand
        logger.warning("profiler failed: %s", e)
        return {"kernel_sum_ms": None, "kernel_count": None, "profile_error": str(e)[:300]}


def _graph_arm(fam: TorchBackend, x: torch.Tensor, *, amp: torch.dtype | None, dev: torch.device, warmup: int,
               iters: int) -> dict[str, Any]:
    def step() -> Any:
        return fam.forward(x, cuda_graph=True, amp_dtype=amp)

    base = timing.fresh_memory(dev)
    try:
        t0 = time.perf_counter()
        step()  # first sight: warm-up + capture + one replay
        timing.sync(dev)
        first_ms = (time.perf_counter() - t0) * 1e3
    except NotImplementedError as e:  # family not opted in: the refusal is the result
        return {"error": f"refused: {e}"}
    rows = fam.graph_info()["graphs"]
    t = timing.time_events(step, device=dev, iters=iters, warmup=warmup)
    peak = timing.peak_memory(dev)
    row = rows[-1] if rows else {}
    return {**t, **peak, "base_bytes": base, "first_call_ms": first_ms,
            "capture_ms": row.get("capture_ms"), "warmup_ms": row.get("warmup_ms")}


def _compile_arm(fam: TorchBackend, x: torch.Tensor, *, amp: torch.dtype | None, dev: torch.device, warmup: int,
                 iters: int) -> dict[str, Any]:
    """torch.compile(mode="reduce-overhead") of the same stage chain; any failure is recorded."""
    from ..device import autocast
    from ..graphs.seam import run_eager

    stages = fam.forward_stages()
    base = timing.fresh_memory(dev)
    try:
        compiled = torch.compile(lambda t: run_eager(stages, t), mode="reduce-overhead")

        def step() -> Any:
            with torch.inference_mode(), autocast(dev, amp):
                return compiled(x)

        t0 = time.perf_counter()
        step()
        timing.sync(dev)
        compile_s = time.perf_counter() - t0
        t = timing.time_events(step, device=dev, iters=iters, warmup=warmup)
        peak = timing.peak_memory(dev)
        return {**t, "compile_s": compile_s, **peak, "base_bytes": base}
    except Exception as e:  # noqa: BLE001 - documented: the peer arm may fail; the error is the result
        logger.warning("torch.compile arm failed: %s: %s", type(e).__name__, e)
        return {"error": f"{type(e).__name__}: {str(e)[:500]}"}
    finally:
        try:
            torch._dynamo.reset()
        except Exception as e:  # noqa: BLE001 - best-effort cleanup of compile caches
            logger.debug("torch._dynamo.reset() failed: %s", e)


def _e2e_arm(fam: Model, images: list[np.ndarray], *, hw: tuple[int, int], batch: int, half: bool,
             dev: torch.device, policy: Any, iters: int) -> dict[str, Any]:
    """Wall-clock medians of ``predict()`` (the user path), plus what it returned and the median
    ``Results.speed`` breakdown per batch (preprocess, inference, postprocess, results)."""
    speeds: list[dict[str, float]] = []

    def call() -> Any:
        res = fam.predict(images, imgsz=hw, batch=batch, half=half, cuda_graph=policy)
        if res and isinstance(getattr(res[0], "speed", None), dict):
            speeds.append(res[0].speed)
        return res

    base = timing.fresh_memory(dev)
    try:
        res = call()
        t = timing.time_wall(call, device=dev, iters=iters, warmup=3)
        del speeds[: len(speeds) - int(t["n"])]  # the first call and the warm-up calls are not timed
    except Exception as e:  # noqa: BLE001 - documented: a broken predict path is reported, not fatal
        logger.warning("end-to-end predict (cuda_graph=%s) failed: %s: %s", policy, type(e).__name__, e)
        return {"error": f"{type(e).__name__}: {str(e)[:500]}"}
    speed = getattr(res[0], "speed", None) if res else None
    dets = [len(r) if hasattr(r, "__len__") else None for r in res]
    breakdown = ({k: statistics.median(s[k] for s in speeds) * batch for k in speeds[0]}
                 if speeds else None)
    return {**t, **timing.peak_memory(dev), "base_bytes": base, "detections": dets[:4],
            "last_speed_ms": speed, "breakdown_ms": breakdown}


def _ultralytics_arm(images: list[np.ndarray], *, half: bool, dev: torch.device, iters: int) -> dict[str, Any] | None:
    """The peer's end-to-end ``predict()`` (YOLOv8n, random init from its yaml, same images as BGR,
    imgsz 640) when the ``ultralytics`` package is importable; ``None`` when it is not."""
    import importlib.util

    if importlib.util.find_spec("ultralytics") is None:
        return None
    try:
        from ultralytics import YOLO

        m = YOLO("yolov8n.yaml")
        src = images  # BGR, as both libraries take numpy arrays
        device = 0 if dev.type == "cuda" else "cpu"

        def call() -> Any:
            return m.predict(src if len(src) > 1 else src[0], imgsz=640, half=half and dev.type == "cuda",
                             device=device, verbose=False)

        call()
        return timing.time_wall(call, device=dev, iters=iters, warmup=3)
    except Exception as e:  # noqa: BLE001 - the peer row is informative; its failure is recorded
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def _derive(net: dict[str, Any], e2e: dict[str, Any]) -> dict[str, Any]:
    def ratio(a: Any, b: Any) -> float | None:
        return float(a) / float(b) if a is not None and b else None

    e, g, c = net.get("eager", {}), net.get("graph", {}), net.get("compile", {})
    return {
        "network_speedup": ratio(e.get("median_ms"), g.get("median_ms")),
        "graph_over_kernel_sum": ratio(g.get("median_ms"), e.get("kernel_sum_ms")),
        "eager_over_kernel_sum": ratio(e.get("median_ms"), e.get("kernel_sum_ms")),
        "compile_speedup": ratio(e.get("median_ms"), c.get("median_ms")),
        "graph_vs_compile": ratio(c.get("median_ms"), g.get("median_ms")),
        "capture_ms": g.get("capture_ms"),
        "memory_ratio": ratio(g.get("peak_bytes"), e.get("peak_bytes")),
        "memory_reserved_ratio": ratio(g.get("peak_reserved_bytes"), e.get("peak_reserved_bytes")),
        "e2e_speedup": ratio(e2e.get("eager", {}).get("median_ms"), e2e.get("graph", {}).get("median_ms")),
    }


# --------------------------------------------------------------------------- arguments
def _load_model(model: Any, weights: str) -> tuple[Model, str]:
    from ..model import LibreYOLO, Model
    from ..models._base.family import Family

    if isinstance(model, Family):
        model = Model(model)
    if isinstance(model, Model):
        return model, "given"
    if weights not in ("auto", "pretrained", "untrained"):
        raise ConfigError(f"weights must be 'auto', 'pretrained' or 'untrained', got {weights!r}")
    if weights == "untrained":
        return LibreYOLO(str(model), pretrained=False), "untrained"
    try:
        return LibreYOLO(str(model)), "pretrained"
    except CheckpointError as e:
        if weights == "pretrained":
            raise
        logger.warning("benchmark: weights %s unavailable (%s); timing an untrained model of the same "
                       "architecture (speed does not depend on the weights, detections do)", model, e)
        return LibreYOLO(str(model), pretrained=False), f"untrained (weights unavailable: {str(e)[:200]})"


def _parse_imgsz(v: Any) -> int | tuple[int, int]:
    if isinstance(v, str):
        parts = [p for p in v.replace("x", ",").split(",") if p.strip()]
        try:
            nums = [int(p) for p in parts]
        except ValueError as e:
            raise ConfigError(f"imgsz must be an int or 'h,w', got {v!r}") from e
        return nums[0] if len(nums) == 1 else (nums[0], nums[1])
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[1])) if len(v) == 2 else v  # type: ignore[return-value]
    return v


def _parse_batches(v: Any) -> list[int]:
    vals = v.split(",") if isinstance(v, str) else (list(v) if isinstance(v, (list, tuple)) else [v])
    out = []
    for b in vals:
        try:
            n = int(b)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"batch must be a positive int or a list such as 1,8,32, got {v!r}") from e
        if isinstance(b, bool) or n < 1:
            raise ConfigError(f"batch must be a positive int or a list such as 1,8,32, got {v!r}")
        out.append(n)
    return out


def _parse_graph(v: Any) -> bool:
    if isinstance(v, str):
        from ..config import parse_bool

        s = v.strip().lower()
        if s == "auto" or parse_bool(s) is not None:
            return s == "auto" or bool(parse_bool(s))
        raise ConfigError(f"cuda_graph must be false, true or auto, got {v!r}")
    from ..graphs.runner import check_policy

    return check_policy(v) is not False


def _sample_image() -> np.ndarray:
    """SAMPLE_IMAGE as BGR uint8 (H, W, 3) (what ``predict`` takes from numpy, as OpenCV gives it);
    a 810x1080 synthetic scene if the asset is absent."""
    from ..assets import SAMPLE_IMAGE

    path = Path(SAMPLE_IMAGE)
    if path.is_file():
        import cv2

        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is not None:
            return bgr
    from ..graphs.parity import probe_batch

    x = probe_batch("image", (1, 3, 810, 1080), device="cpu")[0]
    return np.ascontiguousarray((x.permute(1, 2, 0).flip(-1) * 255).round().to(torch.uint8).numpy())


def _dtype(d: torch.dtype | None) -> str:
    return "float32" if d is None else str(d).removeprefix("torch.")
