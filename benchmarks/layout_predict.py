"""Which memory layout (and conv epilogue) the prepared model of each family should use (issue 16, item 6).

``predict()`` runs a prepared twin (fused, weights cast once). Whether that twin is put in
channels-last memory format is a per-family flag (``Family.INFER_CHANNELS_LAST``), and whether
its captured prediction graph uses the fused bias + SiLU conv epilogue is another
(``Family.GRAPH_BIAS_ACT``). Both must be set from measurements, not guessed. For each family
(one size, batch 1, the side its parity rows use) this script builds the twin three ways and
times them interleaved, in one process:

* ``nchw``: fused, cast, contiguous (NCHW) format;
* ``nchw_ba``: the same with the fused bias + SiLU epilogue inside the captured graph (only
  families built on ``ConvBNAct`` with SiLU have pairs to fuse; elsewhere it equals ``nchw``);
* ``cl``, ``cl_ba``: the same two in channels-last.

For each arm and dtype (float16, float32): the graph network step (CUDA events over back-to-back
replays, the runner predict uses, medians of interleaved rounds after warm-up) and the eager
forward step. The recommendation per family: channels-last when the geometric mean over the two
dtypes of the graph step ratio cl / nchw is below ``--win`` (0.97) and neither dtype is more than
5 % slower; the epilogue when, in the chosen layout, ``*_ba`` / the same layout without it passes
the same test. The flags are then
set in the families by hand, and their parity rows regenerated (benchmarks/parity_predict.py).

    python3 benchmarks/layout_predict.py --out benchmarks/results/layout
    python3 benchmarks/layout_predict.py --out /tmp/l --families yolox,rtmdet --rounds 5
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._common import md_table, write_result  # noqa: E402

logger = logging.getLogger("layout_predict")

# Convolution-heavy families (detectors, classifiers, dense heads, restoration) with the side
# their committed parity rows use; transformer-only families are left out (no convolutions to
# re-layout beyond a patch embedding).
DEFAULT = ("yolo9:t:640 yolo9_seg:t:640 yolo9_pose:t:640 yolo9_p2:t:640 yolo9_e2e:t:640 yolox:s:640 "
           "yolo7:tiny:640 rtmdet:t:640 rtmdet_ins:t:640 picodet:s:640 yolonas:s:640 yolonas_pose:n:640 "
           "yolo1:b:448 yolo2:b:416 yolo3:b:416 yolo4:b:416 fomo:first:320 rtdetr:r18:640 "
           "rtdetrv2:first:640 dfine:n:640 deim:first:640 deimv2:first:640 rtdetrv4:first:640 "
           "resnet:first:224 convnext:first:224 efficientnetv2:first:224 mobilenetv4:first:224 "
           "segformer:first:512 pidnet:first:512 nafnet:first:256 esrgan:first:256")
ARMS = ("nchw", "nchw_ba", "cl", "cl_ba")
DTYPES = {"float16": torch.float16, "float32": torch.float32}


def build_arm(model: Any, arm: str, dtype: torch.dtype) -> Any:
    """The prepared twin of ``model`` for one arm: fused, weights in ``dtype``, the arm's layout."""
    from libreyolo.models._base.inference import PrepSpec, build_twin

    spec = PrepSpec(fuse=True, dtype=dtype, channels_last=arm.startswith("cl"), device=str(model.device))
    twin = build_twin(model, spec)
    if twin is model:  # fp32 NCHW of an unfused model: build_twin made no copy; fuse one anyway
        twin = build_twin(model, PrepSpec(fuse=True, dtype=dtype, channels_last=False, device=spec.device))
    twin.GRAPH_BIAS_ACT = arm.endswith("_ba")  # instance attribute: the runner reads it at capture
    return twin


def time_steps(fn: Any, device: torch.device, inner: int) -> float:
    """Milliseconds per call of ``fn`` over ``inner`` back-to-back calls (CUDA events)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(inner):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / inner


def measure_family(name: str, size: str, side: int, *, rounds: int, inner: int, warmup: int) -> dict[str, Any]:
    from libreyolo.graphs.parity import build_probe_model, probe_batch
    from libreyolo.graphs.runner import PredictGraphs
    from libreyolo.models._base.inference import cudnn_benchmark
    from libreyolo.registry import families

    cls = families()[name]
    size = cls.SIZES[0] if size == "first" else size
    device = torch.device("cuda", 0)
    model = build_probe_model(cls, size=size, task=cls.TASKS[0], device=device, seed=0, fuse=False)
    row: dict[str, Any] = {"family": name, "size": size, "imgsz": side, "batch": 1}
    steps: dict[tuple[str, str], dict[str, Any]] = {}
    with cudnn_benchmark(device):
        for dname, dtype in DTYPES.items():
            if dtype != torch.float32 and not cls.HALF_CAST:
                continue  # autocast families keep fp32 weights: the layout question is the fp32 one
            for arm in ARMS:
                twin = build_arm(model, arm, dtype)
                fmt = torch.channels_last if arm.startswith("cl") else torch.contiguous_format
                x = probe_batch("image", (1, 3, side, side), device=device, seed=1).to(dtype, memory_format=fmt)
                runner = PredictGraphs(twin, force=True, capacity=1)
                try:
                    with torch.inference_mode():
                        runner.run(x, policy=True)
                        for _ in range(warmup):
                            runner.run(x, policy=True)
                            twin.eager_forward(x)
                    torch.cuda.synchronize(device)
                    nodes = runner.info()["graphs"][0]
                    steps[(dname, arm)] = {"graph": lambda r=runner, x=x: r.run(x, policy=True),
                                           "eager": lambda t=twin, x=x: t.eager_forward(x),
                                           "graph_ms": [], "eager_ms": [], "bias_act": nodes.get("bias_act")}
                except Exception as e:  # noqa: BLE001 - recorded: one arm that cannot capture does not hide the rest
                    logger.warning("%s-%s %s %s: %s", name, size, dname, arm, e)
                    row[f"{dname}_{arm}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        for _ in range(rounds):  # interleaved: every arm once per round
            for s in steps.values():
                with torch.inference_mode():
                    s["graph_ms"].append(time_steps(s["graph"], device, inner))
                    s["eager_ms"].append(time_steps(s["eager"], device, max(1, inner // 4)))
    for (dname, arm), s in steps.items():
        row[f"{dname}_{arm}_graph_ms"] = round(statistics.median(s["graph_ms"]), 4)
        row[f"{dname}_{arm}_eager_ms"] = round(statistics.median(s["eager_ms"]), 4)
    row["flags_now"] = {"INFER_CHANNELS_LAST": bool(cls.INFER_CHANNELS_LAST), "GRAPH_BIAS_ACT": bool(cls.GRAPH_BIAS_ACT)}
    del steps, model
    torch.cuda.empty_cache()
    return row


def _ratio(row: dict[str, Any], a: str, b: str, kind: str = "graph") -> dict[str, float]:
    out = {}
    for d in DTYPES:
        x, y = row.get(f"{d}_{a}_{kind}_ms"), row.get(f"{d}_{b}_{kind}_ms")
        if x and y:
            out[d] = round(x / y, 4)
    return out


def recommend(row: dict[str, Any], win: float) -> dict[str, Any]:
    """Fill the ratios and the recommended flags into ``row`` (see the module docstring)."""

    def wins(r: dict[str, float]) -> bool:
        return bool(r) and math.exp(statistics.fmean(math.log(v) for v in r.values())) < win \
            and max(r.values()) <= 1.05

    cl = _ratio(row, "cl", "nchw")
    row["cl_over_nchw"], row["ba_over_cl"], row["ba_over_nchw"] = cl, _ratio(row, "cl_ba", "cl"), _ratio(row, "nchw_ba", "nchw")
    row["cl_over_nchw_eager"] = _ratio(row, "cl", "nchw", "eager")
    layout = wins(cl)
    row["recommend"] = {"INFER_CHANNELS_LAST": layout,
                        "GRAPH_BIAS_ACT": wins(row["ba_over_cl"] if layout else row["ba_over_nchw"])}
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--families", default=None, help="comma list of family[:size[:side]] (default: the built-in list)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--win", type=float, default=0.97)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not torch.cuda.is_available():
        raise SystemExit("layout_predict.py needs a CUDA device")
    specs = args.families.split(",") if args.families else DEFAULT.split()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in specs:
        name, size, side = (spec.split(":") + ["first", "640"])[:3]
        try:
            row = recommend(measure_family(name, size, int(side), rounds=args.rounds, inner=args.inner,
                                           warmup=args.warmup), args.win)
        except Exception as e:  # noqa: BLE001 - one family that fails to build is recorded, the rest run
            logger.warning("%s: %s", spec, e)
            row = {"family": name, "size": size, "imgsz": int(side), "error": f"{type(e).__name__}: {str(e)[:300]}"}
        rows.append(row)
        logger.info("%s", json.dumps({k: row.get(k) for k in ("family", "size", "cl_over_nchw", "ba_over_cl",
                                                                 "recommend", "error")}))
        write_result(out / "layout_predict.json", numbers={"win": args.win, "rows": rows})
    table = [{"family": r["family"], "size": r.get("size"), "imgsz": r.get("imgsz"),
              "fp16 nchw / nchw_ba / cl / cl_ba ms": " / ".join(str(r.get(f"float16_{a}_graph_ms", "-")) for a in ARMS),
              "fp32 nchw / nchw_ba / cl / cl_ba ms": " / ".join(str(r.get(f"float32_{a}_graph_ms", "-")) for a in ARMS),
              "cl/nchw": r.get("cl_over_nchw"), "ba/cl": r.get("ba_over_cl"), "ba/nchw": r.get("ba_over_nchw"),
              "eager cl/nchw": r.get("cl_over_nchw_eager"),
              "flags now": r.get("flags_now"), "recommended": r.get("recommend", r.get("error"))} for r in rows]
    md = ["# Prepared-model layout per family (graph network step, batch 1)", "",
          md_table(table, list(table[0])) if table else "(no rows)", "",
          f"Channels-last is recommended where the geometric mean of cl / nchw over the dtypes is below "
          f"{args.win} and no dtype is more than 5 % slower; the fused bias + SiLU epilogue likewise on ba / cl "
          f"(channels-last) or ba / nchw.", ""]
    write_result(out / "layout_predict.json", numbers={"win": args.win, "rows": rows}, markdown="\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
