"""Benchmark of the attention kernels (GPU): ``ms_deform_attn`` providers and SDPA vs the equation.

MSDA: batch 4, 300 queries, 8 heads, 32 channels per head, 3 levels (80x80, 40x40, 20x20),
4 points, float32 and float16: portable (grid_sample) vs Triton (and the Hub kernel when the
``kernels`` package, a pinned revision and its files are available), forward and
forward+backward. Attention: SDPA vs the explicit equation on Swin-T window shapes (7x7 windows,
3 heads, 32 channels, 64 images x 64 windows, relative-position bias) and ViT-S/16 at 224 px
(197 tokens, 6 heads, 64 channels, batch 64), under fp16 autocast.

Timings are medians of CUDA-event intervals after warm-up. Writes ``attention.json`` and
``attention.md`` to ``--out`` and prints the table.

    python benchmarks/bench_attention.py --out benchmarks/results --commit $(git rev-parse HEAD)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import stamp, write_result  # noqa: E402
from libreyolo.bench.timing import time_events  # noqa: E402

SHAPES = [(80, 80), (40, 40), (20, 20)]
TARGETS = {"triton_fwd": 3.0, "triton_fwd_bwd": 2.0, "sdpa_window": 1.5}


def _time(fn: Callable[[], object], *, warmup: int, iters: int) -> float:
    """Median milliseconds of ``fn`` over ``iters`` CUDA-event intervals (each waited for)."""
    dev = torch.device("cuda", torch.cuda.current_device())
    return time_events(fn, device=dev, iters=iters, warmup=warmup, sync_each=True)["median_ms"]


def _msda_inputs(dtype: torch.dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    b, q, h, c, p = 4, 300, 8, 32, 4
    s = sum(hh * ww for hh, ww in SHAPES)
    value = torch.randn(b, s, h, c, device="cuda", generator=g).to(dtype)
    loc = torch.rand(b, q, h, len(SHAPES), p, 2, device="cuda", generator=g).to(dtype)
    w = torch.rand(b, q, h, len(SHAPES), p, device="cuda", generator=g).softmax(-1).to(dtype)
    return value, loc, w


def bench_msda(args: argparse.Namespace) -> tuple[list[dict], dict[str, str]]:
    from libreyolo.layers.msda import level_layout, ms_deform_attn_portable

    layout = level_layout(SHAPES, device="cuda")
    arms: dict[str, Callable] = {
        "portable": lambda v, s, st, sl, w: ms_deform_attn_portable(v, SHAPES, sl, w)
    }
    notes: dict[str, str] = {}
    try:
        from libreyolo.kernels.attention.msda_triton import ms_deform_attn_triton

        arms["triton"] = ms_deform_attn_triton
    except ImportError as e:
        notes["triton"] = f"not importable: {e}"
    hub = None
    if not args.skip_hub:
        from libreyolo.kernels.attention import msda_hub

        if args.hub_revision or args.hub_local:
            loader = msda_hub.local_loader(args.hub_local) if args.hub_local else None
            msda_hub.configure(loader=loader, revision=args.hub_revision or "local")
        v, sl, w = _msda_inputs(torch.float32)
        if msda_hub.applies(v, layout.spatial_shapes, layout.level_start_index, sl, w):
            hub = msda_hub.ms_deform_attn_hub
            arms["hub"] = hub
        else:
            notes["hub"] = (
                f"not run: revision={msda_hub.revision()!r}, kernel not loadable here "
                "(needs the `kernels` package and the pinned files)"
            )
    rows = []
    for dtype in (torch.float32, torch.float16):
        value, loc, w = _msda_inputs(dtype)
        ref = ms_deform_attn_portable(value.double(), SHAPES, loc.double(), w.double())
        for name, fn in arms.items():
            if name == "hub" and dtype != torch.float32:
                continue
            call_args = (value, layout.spatial_shapes, layout.level_start_index, loc, w)
            with torch.no_grad():
                err = (fn(*call_args).double() - ref).abs().max().item()
                fwd = _time(lambda fn=fn, a=call_args: fn(*a), warmup=args.warmup, iters=args.iters)
            gv, gl, gw = (t.detach().clone().requires_grad_() for t in (value, loc, w))
            grad = torch.randn(4, 300, 256, device="cuda", dtype=dtype)
            grad_args = (gv, layout.spatial_shapes, layout.level_start_index, gl, gw)

            def step(fn=fn, a=grad_args, g=grad):
                torch.autograd.grad(fn(*a), (a[0], a[3], a[4]), g)

            fwd_bwd = _time(step, warmup=args.warmup, iters=args.iters)
            rows.append(
                {"dtype": str(dtype).replace("torch.", ""), "impl": name, "fwd_ms": fwd,
                 "fwd_bwd_ms": fwd_bwd, "max_abs_err_vs_fp64": err}
            )  # fmt: skip
    for row in rows:
        base = next(r for r in rows if r["dtype"] == row["dtype"] and r["impl"] == "portable")
        row["fwd_speedup"] = base["fwd_ms"] / row["fwd_ms"]
        row["fwd_bwd_speedup"] = base["fwd_bwd_ms"] / row["fwd_bwd_ms"]
    return rows, notes


def bench_sdpa(args: argparse.Namespace) -> list[dict]:
    import torch.nn.functional as F

    from libreyolo.layers.attention import attention_equation

    cases = [
        ("swin_t_window_7x7", 64 * 64, 3, 49, 32, True),
        ("vit_s16_224", 64, 6, 197, 64, False),
    ]
    rows = []
    for name, bsz, heads, n, c, with_bias in cases:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (
            torch.randn(bsz, heads, n, c, device="cuda", generator=g).half() for _ in range(3)
        )
        bias = torch.randn(1, heads, n, n, device="cuda", generator=g).half() if with_bias else None
        scale = c**-0.5

        def explicit(q=q, k=k, v=v, bias=bias, scale=scale):
            with torch.autocast("cuda", dtype=torch.float16):
                return attention_equation(q, k, v, scale=scale, bias=bias)

        def fused(q=q, k=k, v=v, bias=bias, scale=scale):
            with torch.autocast("cuda", dtype=torch.float16):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)

        with torch.no_grad():
            err = (explicit().float() - fused().float()).abs().max().item()
            t_exp = _time(explicit, warmup=args.warmup, iters=args.iters)
            t_sdpa = _time(fused, warmup=args.warmup, iters=args.iters)
        rows.append(
            {"case": name, "shape": f"B={bsz} H={heads} N={n} C={c} bias={with_bias}",
             "explicit_ms": t_exp, "sdpa_ms": t_sdpa, "speedup": t_exp / t_sdpa,
             "max_abs_diff": err}
        )  # fmt: skip
    return rows


def _markdown(report: dict) -> str:
    lines = [
        "# Attention kernels benchmark",
        "",
        f"GPU {report['gpu']}, torch {report['torch']}, triton {report['triton']}, "
        f"{report['date']}, commit `{report['commit']}`. Medians of {report['iters']} CUDA-event "
        "timings after warm-up.",
        "",
        "## ms_deform_attn (B=4, Q=300, H=8, C=32, levels 80x80/40x40/20x20, P=4)",
        "",
        "| dtype | impl | fwd ms | fwd x | fwd+bwd ms | fwd+bwd x | max err vs fp64 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["msda"]:
        lines.append(
            f"| {r['dtype']} | {r['impl']} | {r['fwd_ms']:.4f} | {r['fwd_speedup']:.2f} | "
            f"{r['fwd_bwd_ms']:.4f} | {r['fwd_bwd_speedup']:.2f} | {r['max_abs_err_vs_fp64']:.2e} |"
        )
    for impl, note in report["msda_notes"].items():
        lines.append(f"\n{impl}: {note}")
    lines += [
        "",
        "## SDPA vs explicit equation (fp16 autocast)",
        "",
        "| case | shape | explicit ms | SDPA ms | speedup | max abs diff |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["sdpa"]:
        lines.append(
            f"| {r['case']} | {r['shape']} | {r['explicit_ms']:.4f} | {r['sdpa_ms']:.4f} | "
            f"{r['speedup']:.2f} | {r['max_abs_diff']:.2e} |"
        )
    lines += ["", "## Targets", ""]
    for key, ok in report["targets"].items():
        lines.append(
            f"- {key}: {'met' if ok else 'NOT met'} (target {TARGETS[key.split(':')[0]]}x)"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for JSON + markdown")
    parser.add_argument("--commit", default=None, help="commit recorded in the report")
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--skip-hub", action="store_true", help="do not try the Hub kernel")
    parser.add_argument("--hub-revision", default=None, help="candidate Hub revision to audit")
    parser.add_argument("--hub-local", default=None, help="local kernel folder to load instead")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_attention: needs a CUDA GPU", file=sys.stderr)
        return 2
    msda_rows, notes = bench_msda(args)
    sdpa_rows = bench_sdpa(args)
    targets = {}
    for r in msda_rows:
        if r["impl"] == "triton":
            targets[f"triton_fwd:{r['dtype']}"] = r["fwd_speedup"] >= TARGETS["triton_fwd"]
            targets[f"triton_fwd_bwd:{r['dtype']}"] = (
                r["fwd_bwd_speedup"] >= TARGETS["triton_fwd_bwd"]
            )
    for r in sdpa_rows:
        if r["case"].startswith("swin"):
            targets[f"sdpa_window:{r['case']}"] = r["speedup"] >= TARGETS["sdpa_window"]
    numbers = {"iters": args.iters, "msda": msda_rows, "msda_notes": notes, "sdpa": sdpa_rows,
               "targets": targets}
    env = stamp(args.commit)
    md = _markdown({**env, **numbers})
    write_result(args.out / "attention.json", numbers=numbers, env=env, markdown=md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
