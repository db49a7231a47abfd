"""Benchmark of the quantization kernels (SPEC K-5, K-11; docs/kernels.md). GPU only.

1. ``fake_quant_fp8``: Triton kernel vs the reference torch ops, 1M..256M elements, with the
   achieved bandwidth (bytes read + written per second) against a measured device-to-device
   copy of the same bytes (target: >= 70 % of copy at >= 64M elements).
2. FP8 GEMM: ``torch._scaled_mm`` (bare, tensorwise, float32 out) and the full ``fp8_gemm``
   (Triton prologue + ``_scaled_mm`` + Triton epilogue) vs a bfloat16 matmul, on square sizes
   1024..8192 and on the conv-as-GEMM shapes of yolo9-t at 640 px (M = B*H*W, K = Cin*k*k,
   N = Cout; K and N padded up to multiples of 16 where needed).

Timings: CUDA events, median of ``--reps`` samples (each the mean of 10 back-to-back calls, so
the device queue stays full) after ``--warmup`` calls; the Triton fake-quant rows also give the
latency of one call from an idle queue (host launch time included). Writes
``bench_quant.json`` and ``bench_quant.md`` to ``--out`` and prints the tables.

    python benchmarks/bench_quant.py --out benchmarks/results/quant --commit <sha>
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import md_table, stamp, write_result  # noqa: E402
from libreyolo.bench.timing import time_events  # noqa: E402
from libreyolo.model import Model  # noqa: E402

# conv-as-GEMM shapes of yolo9-t at 640 px, batch 1 (Cin, Cout, k, Hout, Wout), used when the
# model cannot be built here; measured with forward hooks on the real network otherwise.
FALLBACK_CONVS = [
    (80, 80, 3, 80, 80), (16, 16, 3, 80, 80), (24, 24, 3, 40, 40), (64, 80, 3, 80, 80),
    (16, 32, 3, 160, 160), (128, 64, 1, 80, 80), (192, 96, 1, 40, 40), (256, 128, 1, 20, 20),
]


def time_ms(fn: Callable[[], Any], *, warmup: int, reps: int, inner: int = 10) -> float:
    """Milliseconds per call of ``fn``: the median over ``reps`` samples, each the mean of ``inner``
    back-to-back calls between two CUDA events, after ``warmup`` calls.

    Back-to-back calls keep the device queue full, so a sample measures device time, not the gap
    while the host prepares one launch (``inner=1`` measures that single-call latency instead).
    """
    dev = torch.device("cuda", torch.cuda.current_device())
    return time_events(fn, device=dev, iters=reps, warmup=warmup, inner=inner, sync_each=True)["median_ms"]


def _fake_quant_row(m: int, dtype: torch.dtype, warmup: int, reps: int) -> dict:
    from libreyolo.kernels.quant.simulate.triton_fake_quant import fake_quant_fp8_triton
    from libreyolo.quant import compute_scale, fake_quant_fp8_reference

    x = torch.randn(m * 2**20, device="cuda", dtype=dtype)
    scale = compute_scale(x, fmt="fp8")
    dst = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()  # read x + write out
    t_copy = time_ms(lambda: dst.copy_(x), warmup=warmup, reps=reps)
    t_tri = time_ms(lambda: fake_quant_fp8_triton(x, scale), warmup=warmup, reps=reps)
    t_ref = time_ms(lambda: fake_quant_fp8_reference(x, scale), warmup=warmup, reps=reps)
    t_call = time_ms(lambda: fake_quant_fp8_triton(x, scale), warmup=warmup, reps=reps, inner=1)
    same = torch.equal(fake_quant_fp8_triton(x, scale), fake_quant_fp8_reference(x, scale))
    return {
        "dtype": str(dtype).replace("torch.", ""), "elements": f"{m}M",
        "copy_ms": round(t_copy, 4), "triton_ms": round(t_tri, 4), "reference_ms": round(t_ref, 4),
        "speedup": round(t_ref / t_tri, 2), "copy_GBps": round(nbytes / t_copy / 1e6, 1),
        "triton_GBps": round(nbytes / t_tri / 1e6, 1), "pct_of_copy": round(100 * t_copy / t_tri, 1),
        "triton_single_call_ms": round(t_call, 4), "bit_identical": same,
    }


def bench_fake_quant(sizes_m: list[int], dtypes: list[torch.dtype], warmup: int, reps: int) -> list[dict]:
    """``fake_quant_fp8`` Triton vs reference, per dtype and size (Mi elements)."""
    rows = []
    for dtype in dtypes:
        for m in sizes_m:
            rows.append(_fake_quant_row(m, dtype, warmup, reps))
            torch.cuda.empty_cache()
    return rows


def _pad16(v: int) -> int:
    return (v + 15) // 16 * 16


def yolo9t_gemm_shapes(imgsz: int, batch: int, top: int) -> tuple[list[dict], str]:
    """The ``top`` conv layers of yolo9-t by FLOPs as GEMM shapes (M, K, N)."""
    convs: dict[tuple, int] = {}
    source = "measured (forward hooks on yolo9-t)"
    try:
        from torch import nn

        from libreyolo.models.yolo9.family import YOLO9

        net = Model(YOLO9(size="t", nc=80)).net.eval()

        def hook(mod: nn.Conv2d, _inp: Any, out: torch.Tensor) -> None:
            if mod.groups == 1:
                key = (mod.in_channels, mod.out_channels, mod.kernel_size[0], out.shape[2], out.shape[3])
                convs[key] = convs.get(key, 0) + 1

        handles = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, nn.Conv2d)]
        with torch.no_grad():
            net(torch.zeros(1, 3, imgsz, imgsz))
        for h in handles:
            h.remove()
    except Exception as e:  # noqa: BLE001 - the benchmark still runs on the fallback table
        source = f"fallback table (yolo9-t not buildable here: {type(e).__name__})"
        convs = {c: 1 for c in FALLBACK_CONVS}
    rows = []
    for (cin, cout, k, h, w), count in convs.items():
        m_, k_, n_ = batch * h * w, cin * k * k, cout
        rows.append({"layer": f"{cin}->{cout} k{k} @{h}x{w}", "count": count, "M": m_,
                     "K": _pad16(k_), "N": _pad16(n_), "padded": (_pad16(k_), _pad16(n_)) != (k_, n_),
                     "flops": 2 * m_ * k_ * n_ * count})
    rows.sort(key=lambda r: -r["flops"])
    return rows[:top], source


def _gemm_row(shape: dict, warmup: int, reps: int) -> dict:
    from libreyolo.kernels.quant.execute.gemm import fp8_gemm
    from libreyolo.quant import compute_scale, pack_weight

    m, k, n = shape["M"], shape["K"], shape["N"]
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    wt16 = w.t()
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    xs = compute_scale(x, fmt="fp8")
    p = pack_weight(w, fmt="fp8")
    xq = (x.float() * xs.reciprocal()).clamp(-448, 448).to(torch.float8_e4m3fn)
    wt = p.data.t()  # (K, N) column-major, as _scaled_mm wants
    one = torch.ones((), device="cuda")
    t_bf16 = time_ms(lambda: torch.mm(x, wt16), warmup=warmup, reps=reps)
    t_mm = time_ms(lambda: torch._scaled_mm(xq, wt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                   warmup=warmup, reps=reps)
    t_bf16_fused = time_ms(lambda: F.silu(F.linear(x, w, bias)), warmup=warmup, reps=reps)
    t_full = time_ms(lambda: fp8_gemm(x, p.data, xs, p.scale, bias, activation="silu"),
                     warmup=warmup, reps=reps)
    flop = 2 * m * k * n
    return {
        **{key: shape[key] for key in ("layer", "count", "M", "K", "N") if key in shape},
        "bf16_mm_ms": round(t_bf16, 4), "fp8_scaled_mm_ms": round(t_mm, 4),
        "bf16_TFLOPs": round(flop / t_bf16 / 1e9, 1), "fp8_TFLOPs": round(flop / t_mm / 1e9, 1),
        "speedup_bare": round(t_bf16 / t_mm, 2),
        "bf16_linear_silu_ms": round(t_bf16_fused, 4), "fp8_fused_ms": round(t_full, 4),
        "speedup_fused": round(t_bf16_fused / t_full, 2),
    }


def bench_gemm(shapes: list[dict], warmup: int, reps: int) -> list[dict]:
    """FP8 ``_scaled_mm`` (bare and fused) vs bfloat16 matmul for each (M, K, N)."""
    rows = []
    for shape in shapes:
        try:
            rows.append(_gemm_row(shape, warmup, reps))
        except RuntimeError as e:  # one unsupported shape must not lose the other rows
            rows.append({key: shape[key] for key in ("layer", "M", "K", "N") if key in shape}
                        | {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"})
        torch.cuda.empty_cache()
    return rows


def _columns(rows: list[dict]) -> list[str]:
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    return cols


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for bench_quant.json / .md")
    ap.add_argument("--commit", default=None, help="git commit of the code (git may be absent here)")
    ap.add_argument("--sizes", default="1,4,16,64,128,256", help="fake-quant sizes in Mi elements")
    ap.add_argument("--squares", default="1024,2048,4096,8192", help="square GEMM sizes")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batch", type=int, default=1, help="batch of the conv-as-GEMM shapes")
    ap.add_argument("--layers", type=int, default=8, help="yolo9-t conv layers (by FLOPs) to time")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_quant needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    meta = stamp(args.commit)
    meta["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    result: dict[str, Any] = {"warmup": args.warmup, "reps": args.reps, "statistic": "median"}

    sizes = [int(v) for v in args.sizes.split(",") if v]
    fq = bench_fake_quant(sizes, [torch.float32, torch.bfloat16], args.warmup, args.reps)
    result["fake_quant_fp8"] = fq
    big = [r for r in fq if int(r["elements"][:-1]) >= 64]
    result["fake_quant_target_met"] = bool(big) and all(r["pct_of_copy"] >= 70 for r in big)

    fp8_ok = torch.cuda.get_device_capability(0) >= (8, 9) and hasattr(torch, "_scaled_mm")
    md = [f"# Quantization kernels — {meta['gpu']}", "",
          f"torch {meta['torch']}, CUDA {meta['cuda']}, triton {meta['triton']}, capability "
          f"{meta['capability']}, {meta['date']}, commit {meta['commit']}. Median of {args.reps} "
          f"samples after {args.warmup} warm-up calls, CUDA events; each sample is the mean of 10 "
          "back-to-back calls (device time with a full queue). `triton_single_call_ms`: one call "
          "from an idle queue, host launch time included.", "",
          "## fake_quant_fp8: Triton vs reference torch ops", "",
          "Bandwidth counts one read and one write of the tensor; `pct_of_copy` compares with a "
          "device-to-device copy of the same bytes (target >= 70 % at >= 64M elements: "
          f"{'met' if result['fake_quant_target_met'] else 'NOT met'}).", "",
          md_table(fq, _columns(fq)), ""]
    if fp8_ok:
        squares = [{"layer": f"{s}^3", "M": s, "K": s, "N": s} for s in (int(v) for v in args.squares.split(",") if v)]
        convs, source = yolo9t_gemm_shapes(args.imgsz, args.batch, args.layers)
        result["gemm_square"] = bench_gemm(squares, args.warmup, args.reps)
        result["gemm_yolo9t"] = bench_gemm(convs, args.warmup, args.reps)
        result["gemm_yolo9t_source"] = source
        md += ["## FP8 GEMM vs bfloat16 matmul (square)", "",
               "`speedup_bare`: bfloat16 `torch.mm` vs the bare `torch._scaled_mm` (tensorwise, "
               "pre-quantized operands). `speedup_fused`: bfloat16 `silu(linear(x, w, b))` vs "
               "`fp8_gemm` (Triton prologue quantizing the bfloat16 activations + `_scaled_mm` + "
               "Triton epilogue with dequant, bias, SiLU). Above 1 means FP8 is faster.", "",
               md_table(result["gemm_square"], _columns(result["gemm_square"])), "",
               f"## FP8 GEMM at yolo9-t conv-as-GEMM shapes ({args.imgsz} px, batch {args.batch}; {source})", "",
               "Small GEMMs are launch/latency bound: FP8 is often slower there, and the fused "
               "prologue/epilogue add two launches.", "",
               md_table(result["gemm_yolo9t"], _columns(result["gemm_yolo9t"])), ""]
    else:
        result["gemm_skipped"] = "FP8 tensor cores need compute capability >= 8.9"
        md += ["FP8 GEMM skipped: compute capability < 8.9.", ""]
    write_result(args.out / "bench_quant.json", numbers=result, env=meta, extra={"capability": meta["capability"]},
                 markdown="\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
