"""Cost of the training loop's optimiser step + EMA update (issue 17 target: at most 5 ms for yolo9-t).

Arms, timed interleaved on the same network with synthetic gradients (the weights do not move: lr 0):

* ``step_module_walk``: the sequence the loop ran before, ``clip_grad_norm_(net.parameters())``
  walking the module tree on every call;
* ``step_torch_path``: :class:`libreyolo.training.optim.OptimizerStep` on torch.optim's path
  (parameters listed once);
* ``step``: the same on its lean path (what the trainer runs on CUDA);
* ``ema``: :meth:`libreyolo.training.ema.ModelEMA.update`;
* ``zero_grad``: in-place zeroing as the loop does while a training graph is live.

For each optimizer (``auto`` = fused AdamW for a short run, and fused SGD) with AMP's gradient
scaler on. A cProfile of the step's host side is written beside the numbers (top functions by
own time), to show where what is left goes.

    python3 benchmarks/bench_opt_step.py --out benchmarks/results/opt_step
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import write_result  # noqa: E402


def step_arms(net: Any, opt: Any, scaler: Any, ema: Any, step: Any, *, clip: float) -> dict[str, Callable[[], None]]:
    """The timed arms (module docstring)."""
    import torch

    from libreyolo.training.optim import OptimizerStep

    def walk() -> None:
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=clip)
        scaler.step(opt)
        scaler.update()

    torch_path = OptimizerStep(net, opt, scaler, clip_grad=clip)
    torch_path.kind = None  # the same step on torch.optim's path

    return {"step_module_walk": walk, "step_torch_path": torch_path, "step": step, "ema": lambda: ema.update(net),
            "zero_grad": lambda: opt.zero_grad(set_to_none=False)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", default="LibreYOLO9t.pt,LibreYOLOXs.pt")
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--clip", type=float, default=10.0)
    ap.add_argument("--commit", default=None)
    a = ap.parse_args(argv)

    import torch

    from libreyolo import LibreYOLO
    from libreyolo.bench.timing import time_interleaved
    from libreyolo.training.ema import ModelEMA
    from libreyolo.training.optim import OptimizerStep, build_optimizer, choose_optimizer

    if not torch.cuda.is_available():
        print("bench_opt_step.py needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    rows, profiles = [], {}
    for weights in a.models.split(","):
        model = LibreYOLO(weights, pretrained=False, nc=6)
        net = model.net.to(dev).train()
        for name, total_steps in (("auto", 100), ("SGD", 100)):
            choice = choose_optimizer(name=name, lr0=0.01, momentum=0.937, nc=6, total_steps=total_steps)
            opt = build_optimizer(net, choice, weight_decay=5e-4, device=dev)
            scaler = torch.amp.GradScaler("cuda", enabled=True)
            ema = ModelEMA(net)
            params = [p for p in net.parameters() if p.requires_grad]
            gen = torch.Generator(device=dev).manual_seed(0)
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen, device=dev) * 1e-6
            scaler.scale(torch.ones((), device=dev))  # the scale tensor exists, as after a backward
            for g in opt.param_groups:
                g["lr"] = 0.0
            step = OptimizerStep(net, opt, scaler, clip_grad=a.clip)

            arms = step_arms(net, opt, scaler, ema, step, clip=a.clip)
            res = time_interleaved(arms, device=dev, iters=a.iters, warmup=5)
            row = {"model": weights, "optimizer": choice.name, "tensors": len(params),
                   "params_m": round(sum(p.numel() for p in params) / 1e6, 3)}
            for k, r in res.items():
                row[f"{k}_ms"] = round(r["median_ms"], 3)
                row[f"{k}_host_ms"] = round(r["host_ms"]["median_ms"], 3)
            row["step_plus_ema_ms"] = round(row["step_ms"] + row["ema_ms"], 3)
            rows.append(row)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(20):
                step()
            torch.cuda.synchronize()
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(14)
            profiles[f"{weights} {choice.name}"] = buf.getvalue().splitlines()[-24:]
            print(row, flush=True)
    md = ["# Optimiser step + EMA update (median ms, synchronised; host = time until the call returned)", "",
          "| model | optimizer | tensors | walk (old) | torch path | step (lean) | EMA | step + EMA | zero_grad |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['model']} | {r['optimizer']} | {r['tensors']} | {r['step_module_walk_ms']} | {r['step_torch_path_ms']} "
                  f"| {r['step_ms']} "
                  f"| {r['ema_ms']} | **{r['step_plus_ema_ms']}** | {r['zero_grad_ms']} |")
    write_result(a.out / "opt_step.json", numbers=rows, extra={"profiles_20_steps": profiles, "clip": a.clip},
                 markdown="\n".join(md), commit=a.commit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
