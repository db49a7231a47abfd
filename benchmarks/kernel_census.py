"""Where torch.compile's kernels beat the captured graph's: one prepared model, both arms, kernels by kind.

Issue 16 asks for the prepared half model's graph step to be no slower than
``torch.compile(mode="reduce-overhead")`` of the same network. ``bench_predict`` shows compile
ahead on every row with a compile arm; this script says where: it profiles a few replays of the
prediction graph (the runner ``predict`` uses) and of the compiled network, and groups each side's
GPU kernels into kinds (layout transforms, pooling, convolution, Triton, elementwise, concatenation, resampling, copies,
reductions, other) with their count and summed time per step, plus the ten costliest kernel names.

    python3 benchmarks/kernel_census.py --out benchmarks/results/profile --model yolo9:t --imgsz 480x640
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._common import md_table, write_result  # noqa: E402

KINDS = (  # first match wins
    ("layout", re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw", re.I)),  # cuDNN's format transforms
    ("triton", re.compile(r"^triton_|^_bias_")),  # Inductor's kernels and the bias_act provider's
    ("pool", re.compile(r"pool", re.I)),
    ("conv", re.compile(r"conv|cudnn|implicit_gemm|xmma|cutlass|sm\d+_|nhwc|nchw.*kernel|gemm|wgrad|dgrad", re.I)),
    ("concat", re.compile(r"cat|CatArray", re.I)),
    ("resample", re.compile(r"upsample|interpolate|nearest", re.I)),
    ("copy", re.compile(r"copy|Memcpy|Memset|contiguous", re.I)),
    ("reduce", re.compile(r"reduce|softmax|sort|topk|max|sum", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|silu|sigmoid|add|mul", re.I)),
)


def kind_of(name: str) -> str:
    for kind, pat in KINDS:
        if pat.search(name):
            return kind
    return "other"


def census(step: Any, device: torch.device, steps: int) -> dict[str, Any]:
    """Profile ``steps`` calls of ``step`` (after one untimed call): kernels per kind per step."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize(device)
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        if ev.device_type != DeviceType.CUDA:
            continue
        us = ev.device_time if hasattr(ev, "device_time") else ev.cuda_time
        k = kind_of(ev.name)
        by_kind[k][0] += 1
        by_kind[k][1] += us
        by_name[ev.name][0] += 1
        by_name[ev.name][1] += us
    kinds = {k: {"n": v[0] / steps, "ms": round(v[1] / steps / 1e3, 4)} for k, v in sorted(by_kind.items())}
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:10]
    return {"kinds": kinds, "kernels_per_step": sum(v["n"] for v in kinds.values()),
            "kernel_ms_per_step": round(sum(v["ms"] for v in kinds.values()), 4),
            "top": [{"name": n[:90], "n": v[0] / steps, "ms": round(v[1] / steps / 1e3, 4)} for n, v in top]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="yolo9:t", help="family:size")
    ap.add_argument("--imgsz", default="480x640", help="HxW (the 640x480 photo's rect letterbox)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--fp32", action="store_true", help="the fp32 twin instead of the half one")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("kernel_census.py needs a CUDA device")
    from libreyolo.graphs.parity import build_probe_model, probe_batch
    from libreyolo.graphs.runner import PredictGraphs
    from libreyolo.graphs.seam import run_eager
    from libreyolo.models._base.inference import PrepSpec, build_twin, cudnn_benchmark, twin_channels_last, uses_graph_bias_act
    from libreyolo.registry import families

    name, size = args.model.split(":")
    h, w = (int(v) for v in args.imgsz.split("x"))
    dev = torch.device("cuda", 0)
    cls = families()[name]
    model = build_probe_model(cls, size=size, task=cls.TASKS[0], device=dev, seed=0, fuse=False)
    dtype = torch.float32 if args.fp32 or not cls.HALF_CAST else torch.float16
    cl = twin_channels_last(cls, dtype)
    twin = build_twin(model, PrepSpec(fuse=True, dtype=dtype, channels_last=cl, device=str(dev)))
    fmt = torch.channels_last if cl else torch.contiguous_format
    x = probe_batch("image", (1, 3, h, w), device=dev, seed=1).to(dtype, memory_format=fmt)
    rows: dict[str, Any] = {}
    with cudnn_benchmark(dev), torch.inference_mode():
        runner = PredictGraphs(twin, force=True, capacity=1)
        rows["graph"] = census(lambda: runner.run(x, policy=True), dev, args.steps)
        stages = twin.forward_stages()
        compiled = torch.compile(lambda t: run_eager(stages, t), mode="reduce-overhead")
        for _ in range(3):
            compiled(x)
        rows["compile"] = census(lambda: compiled(x), dev, args.steps)
    kinds = sorted(set(rows["graph"]["kinds"]) | set(rows["compile"]["kinds"]))
    table = [{"kind": k, **{f"{arm} n": rows[arm]["kinds"].get(k, {}).get("n", 0) for arm in rows},
              **{f"{arm} ms": rows[arm]["kinds"].get(k, {}).get("ms", 0) for arm in rows}} for k in kinds]
    table.append({"kind": "total", **{f"{a} n": rows[a]["kernels_per_step"] for a in rows},
                  **{f"{a} ms": rows[a]["kernel_ms_per_step"] for a in rows}})
    md = [f"# Kernel census: {name}-{size} {str(dtype).removeprefix('torch.')} {h}x{w}, batch 1, "
          f"channels_last={cl}, graph bias_act={uses_graph_bias_act(twin)}", "",
          "GPU kernels per step by kind (torch.profiler, CUDA time):", "",
          md_table(table, list(table[0])), ""]
    for arm in rows:
        md += [f"## {arm}: costliest kernels", "", md_table(rows[arm]["top"], ["name", "n", "ms"]), ""]
    write_result(Path(args.out) / f"kernel_census_{name}_{size}.json", numbers=rows, markdown="\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
