"""Time to accuracy, training from scratch: libreyolo yolo9-t against Ultralytics YOLOv8n and YOLOv9-t.

The same data for every arm: libreyolo's built-in ``shapes`` generator written once as a YOLO-format
folder (``--n-train`` / ``--n-val`` images, long side ``--imgsz``), trained at ``--imgsz`` px,
batch ``--batch``, AMP, ``--epochs`` epochs, random initialisation, each library's own default
recipe (what a new user gets), validation every epoch. One subprocess per arm, run one after the
other, so no arm inherits another's CUDA context, caches or allocator state.

Arms: ``ul-yolov8n`` (``YOLO("yolov8n.yaml")``), ``ul-yolov9t`` (``yolov9t.yaml``), ``lib-eager``
(``LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=6)``), ``lib-graph`` (the same with
``cuda_graph=True``). Per arm: wall seconds of the whole ``train()`` call, the cumulative time and
mAP50-95 / mAP50 at the end of every epoch (recorded by an end-of-epoch callback in both
libraries, i.e. after validation and checkpointing; Ultralytics' ``results.csv`` is read as a
cross-check), and the first epoch and time at which mAP50-95 reached each ``--levels`` value.

Ultralytics is an optional benchmark dependency (SPEC A-4; ``pip install ultralytics==8.3.160``;
give its interpreter with ``--ul-python`` when it lives in another environment). It is used as a
measuring instrument only; nothing of it is imported by libreyolo. Offline: ``YOLO_OFFLINE=1``,
``plots=False`` (no font download) and its AMP self-check (which downloads a checkpoint) replaced
by ``True``.

GPU (the lead's command; about 4 minutes on one H200 at the defaults)::

    python3 benchmarks/peer_train.py --out benchmarks/results/peer_train

or, as two shorter calls into the same file::

    python3 benchmarks/peer_train.py --out benchmarks/results/peer_train --arms ul-yolov8n ul-yolov9t
    python3 benchmarks/peer_train.py --out benchmarks/results/peer_train --arms lib-eager lib-graph --merge

CPU dry run of the script (minutes, numbers meaningless)::

    python3 benchmarks/peer_train.py --out /tmp/pt --epochs 1 --n-train 16 --n-val 8 --imgsz 160 \\
        --device cpu --batch 4 --workers 0
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ARMS = ("ul-yolov8n", "ul-yolov9t", "lib-eager", "lib-graph")
LEVELS = (0.1, 0.2, 0.33, 0.5)
logger = logging.getLogger("peer_train")


# ------------------------------------------------------------------------------------ child side
def _ultralytics_offline() -> None:
    """No network from Ultralytics: offline flag, and its AMP check (it downloads a model) -> True."""
    os.environ["YOLO_OFFLINE"] = "true"  # its is_online() reads exactly "true" (also skips the pip update check)
    import ultralytics.utils.checks as checks

    checks.check_amp = lambda *a, **k: True
    import ultralytics.engine.trainer as trainer_mod

    if hasattr(trainer_mod, "check_amp"):
        trainer_mod.check_amp = lambda *a, **k: True


def run_ultralytics(arm: str, a: argparse.Namespace) -> dict[str, Any]:
    _ultralytics_offline()
    import ultralytics
    from ultralytics import YOLO

    model = YOLO(f"{arm.split('-', 1)[1]}.yaml")  # random init, offline
    epochs: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    final: dict[str, Any] = {}

    def on_fit_epoch_end(trainer: Any) -> None:
        m = trainer.metrics or {}
        e = {"epoch": int(trainer.epoch) + 1, "time_s": round(time.perf_counter() - t0, 2),
             "mAP50-95": float(m.get("metrics/mAP50-95(B)", float("nan"))),
             "mAP50": float(m.get("metrics/mAP50(B)", float("nan")))}
        if epochs and e["epoch"] == epochs[-1]["epoch"]:  # its final evaluation of best.pt fires it again
            final.update(e)
        else:
            epochs.append(e)

    model.add_callback("on_fit_epoch_end", on_fit_epoch_end)
    model.train(data=str(a.data), epochs=a.epochs, imgsz=a.imgsz, batch=a.batch, amp=True, device=a.device,
                workers=a.workers, project=str(a.arm_dir), name="run", exist_ok=True, plots=False, seed=0,
                verbose=False)
    wall = time.perf_counter() - t0
    csv_map: list[float] = []
    for path in Path(a.arm_dir).glob("run*/results.csv"):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                row = {k.strip(): v for k, v in row.items()}
                csv_map.append(float(row["metrics/mAP50-95(B)"]))
    return {"library": f"ultralytics {ultralytics.__version__}", "model": model.model.yaml.get("yaml_file", arm),
            "wall_s": round(wall, 2), "epochs": epochs, "final_eval_best": final, "results_csv_mAP50-95": csv_map}


def arm_overrides(a: argparse.Namespace, *, cuda_graph: bool) -> dict[str, Any]:
    """The train() keys every libreyolo arm shares (this script's and ablate_train.py's)."""
    return dict(data=str(a.data), epochs=a.epochs, imgsz=a.imgsz, batch=a.batch, amp=True, device=a.device,
                workers=a.workers, project=str(a.arm_dir), name="run", exist_ok=True, plots=False,
                tensorboard=False, verbose=False, seed=0, cuda_graph=cuda_graph)


def train_arm(model: Any, overrides: dict[str, Any]) -> tuple[Any, dict[str, Any], list[dict[str, Any]], float]:
    """Train ``model`` with ``overrides`` (under the family's defaults) through the Trainer and
    record every epoch: cumulative seconds, mAP50-95, mAP50, summed train loss and the epoch's
    own training seconds. Returns (trainer, result, epochs, wall seconds)."""
    from libreyolo.training.config import TrainConfig
    from libreyolo.training.trainer import Trainer, with_family_defaults

    epochs: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    trainer = Trainer(model, TrainConfig.from_overrides(with_family_defaults(model, overrides)),
                      explicit=set(overrides))

    def on_epoch(t: Trainer, row: dict[str, float]) -> None:
        epochs.append({"epoch": int(row["epoch"]), "time_s": round(time.perf_counter() - t0, 2),
                       "mAP50-95": float(row.get("metrics/mAP50-95", float("nan"))),
                       "mAP50": float(row.get("metrics/mAP50", float("nan"))),
                       "loss": round(sum(v for k, v in row.items() if k.startswith("train/")), 5),
                       "train_s": round(float(row["time/epoch_s"]), 3),
                       "val_s": round(float(row.get("time/val_s", float("nan"))), 3),
                       "save_s": round(float(row.get("time/save_s", float("nan"))), 3)})

    trainer.callbacks.append(on_epoch)
    result = trainer.fit()
    return trainer, result, epochs, time.perf_counter() - t0


def run_libreyolo(arm: str, a: argparse.Namespace) -> dict[str, Any]:
    import libreyolo
    from libreyolo import LibreYOLO

    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=6)
    overrides = arm_overrides(a, cuda_graph=arm == "lib-graph")
    overrides.update(json.loads(a.lib_overrides or "{}"))
    prof = profile_validation() if a.profile_val else None
    trainer, result, epochs, wall = train_arm(model, overrides)
    step_cost = time_step_and_ema(trainer)
    extra = {"profile_val": prof.report()} if prof is not None else {}
    return {**extra, "step_cost_ms": step_cost, "library": f"libreyolo {libreyolo.__version__}", "model": "yolo9-t", "wall_s": round(wall, 2),
            "epochs": epochs, "optimizer_steps": trainer.total_steps, "accumulate": trainer.accumulate,
            "warmup_iters": trainer.schedule.warmup_iters, "cuda_graph": result.get("cuda_graph"),
            "overrides": overrides}


class _ValidationProfile:
    """cProfile of every validation the trainer runs (``Trainer._validate`` wrapped)."""

    def __init__(self) -> None:
        import cProfile

        from libreyolo.training.trainer import Trainer

        self.prof, original = cProfile.Profile(), Trainer._validate

        def profiled(trainer: Any, *, final: bool) -> Any:
            self.prof.enable()
            try:
                return original(trainer, final=final)
            finally:
                self.prof.disable()

        Trainer._validate = profiled  # this child process trains one arm only

    def report(self, top: int = 25) -> list[str]:
        import io
        import pstats

        buf = io.StringIO()
        pstats.Stats(self.prof, stream=buf).sort_stats("tottime").print_stats(top)
        return [ln for ln in buf.getvalue().splitlines() if ln.strip()][-(top + 2):]


def profile_validation() -> _ValidationProfile:
    return _ValidationProfile()


def time_step_and_ema(trainer: Any, iters: int = 50) -> dict[str, float]:
    """Median ms of the trainer's own optimizer step (``trainer.opt_step``: unscale, clip, step,
    scaler update) and of one EMA update, on the trained network with synthetic gradients,
    synchronised around each call (issue 17 target: both together at most 5 ms for yolo9-t). Runs
    after training: the results are already written."""
    import torch

    from libreyolo.bench.timing import time_wall

    net, opt, ema = trainer.net, trainer.optimizer, trainer.ema
    params = [p for p in net.parameters() if p.requires_grad]
    gen = torch.Generator(device=params[0].device).manual_seed(0)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, device=p.device, dtype=p.dtype) * 1e-6
    for g in opt.param_groups:
        g["lr"] = 0.0  # the weights keep their values while timing

    out: dict[str, float] = {}
    arms = {"optimizer_step": trainer.opt_step}
    if ema is not None:
        arms["ema_update"] = lambda: ema.update(net)
    for name, fn in arms.items():  # 5 warm-up calls, then the median of ``iters`` synchronised calls
        out[name] = round(time_wall(fn, device=params[0].device, iters=iters, warmup=5)["median_ms"], 3)
    out["total"] = round(sum(out.values()), 3)
    return out


def child(a: argparse.Namespace) -> None:
    import torch

    runner = run_ultralytics if a.arm.startswith("ul-") else run_libreyolo
    if a.device != "cpu" and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    out = runner(a.arm, a)
    out["arm"] = a.arm
    if a.device != "cpu" and torch.cuda.is_available():
        out["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    Path(a.arm_json).write_text(json.dumps(out, indent=2, default=str) + "\n")


# ----------------------------------------------------------------------------------- parent side
def time_to(epochs: list[dict[str, Any]], levels: tuple[float, ...]) -> dict[str, Any]:
    """{level: {"epoch", "time_s"} of the first epoch with mAP50-95 >= level, or None}."""
    out: dict[str, Any] = {}
    for lv in levels:
        hit = next((e for e in epochs if e["mAP50-95"] == e["mAP50-95"] and e["mAP50-95"] >= lv), None)
        out[str(lv)] = {"epoch": hit["epoch"], "time_s": hit["time_s"]} if hit else None
    return out


def summarise(row: dict[str, Any], levels: tuple[float, ...]) -> dict[str, Any]:
    eps = row.get("epochs") or []
    maps = [e["mAP50-95"] for e in eps if e["mAP50-95"] == e["mAP50-95"]]
    row["final_mAP50-95"] = round(maps[-1], 4) if maps else None
    row["best_mAP50-95"] = round(max(maps), 4) if maps else None
    row["time_to"] = time_to(eps, levels)
    return row


def markdown(rows: list[dict[str, Any]], levels: tuple[float, ...], env: dict[str, Any], a: argparse.Namespace) -> str:
    head = ["arm", "wall s", "final mAP50-95", "best mAP50-95"] + [f"to {lv}: epoch / s" for lv in levels]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['arm']} | error: {r['error'][:120]} |" + " |" * (len(head) - 2))
            continue
        cells = [r["arm"], f"{r['wall_s']:.1f}", str(r["final_mAP50-95"]), str(r["best_mAP50-95"])]
        for lv in levels:
            t = r["time_to"][str(lv)]
            cells.append(f"{t['epoch']} / {t['time_s']:.1f}" if t else "-")
        lines.append("| " + " | ".join(cells) + " |")
    per_epoch = ["", "mAP50-95 per epoch:", ""]
    for r in rows:
        if "error" not in r:
            per_epoch.append(f"- {r['arm']}: " + ", ".join(f"{e['mAP50-95']:.3f}" for e in r["epochs"]))
    for r in rows:
        if r.get("step_cost_ms"):
            c = r["step_cost_ms"]
            per_epoch.append(f"- {r['arm']}: optimizer step {c['optimizer_step']} ms + EMA update "
                             f"{c.get('ema_update', 0)} ms = {c['total']} ms (median, synchronised)")
    return (f"# Time to accuracy from scratch: shapes {a.n_train}/{a.n_val} images, {a.imgsz} px, batch {a.batch}, "
            f"AMP, {a.epochs} epoch{'s' if a.epochs != 1 else ''}\n\nGPU {env['gpu']}, torch {env['torch']}, {env['date']}, commit "
            f"{env['commit']}. One process per arm; each library's default recipe; validation every epoch "
            f"(included in the times).\n\n" + "\n".join(lines) + "\n" + "\n".join(per_epoch) + "\n")


def parent(a: argparse.Namespace) -> None:
    from benchmarks._common import stamp, write_result
    from libreyolo.data.shapes import ensure_shapes_dataset

    a.out.mkdir(parents=True, exist_ok=True)
    work = a.work or a.out / "work"
    data = ensure_shapes_dataset(work / "data", n_train=a.n_train, n_val=a.n_val, imgsz=a.imgsz, seed=0)
    levels = tuple(a.levels)
    env = stamp(a.commit)
    rows: list[dict[str, Any]] = []
    previous = a.out / "peer_train.json"
    if a.merge and previous.is_file():  # keep the other arms of an earlier run (two shorter GPU calls)
        rows = [r for r in json.loads(previous.read_text())["numbers"]["arms"] if r.get("arm") not in a.arms]
    settings = {"dataset": "libreyolo shapes (generator v1, seed 0)", "n_train": a.n_train, "n_val": a.n_val,
                "imgsz": a.imgsz, "batch": a.batch, "epochs": a.epochs, "amp": True, "device": a.device,
                "workers": a.workers, "init": "random", "levels": list(levels)}
    for arm in a.arms:
        arm_dir = work / arm
        arm_json = arm_dir / "arm.json"
        shutil.rmtree(arm_dir, ignore_errors=True)  # no earlier run's files (results.csv) leak in
        arm_dir.mkdir(parents=True, exist_ok=True)
        py = a.ul_python if arm.startswith("ul-") and a.ul_python else sys.executable
        cmd = [py, str(Path(__file__).resolve()), "--child", arm, "--data", str(data), "--arm-dir", str(arm_dir),
               "--arm-json", str(arm_json), "--epochs", str(a.epochs), "--imgsz", str(a.imgsz), "--batch",
               str(a.batch), "--workers", str(a.workers), "--device", a.device]
        if a.lib_overrides:
            cmd += ["--lib-overrides", a.lib_overrides]
        if a.profile_val:
            cmd += ["--profile-val"]
        logger.info("arm %s: %s", arm, " ".join(cmd))
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env={**os.environ, "YOLO_OFFLINE": "true"}, timeout=a.arm_timeout, check=False)
        if proc.returncode == 0 and arm_json.is_file():
            row = summarise(json.loads(arm_json.read_text()), levels)
        else:
            row = {"arm": arm, "error": f"exit {proc.returncode} after {time.perf_counter() - t0:.0f} s"}
        rows = [r for r in rows if r.get("arm") != arm] + [row]
        rows.sort(key=lambda r: ARMS.index(r["arm"]) if r.get("arm") in ARMS else len(ARMS))
        write_result(a.out / "peer_train.json", numbers={"settings": settings, "arms": rows}, env=env)
    md = markdown(rows, levels, env, a)
    write_result(a.out / "peer_train.json", numbers={"settings": settings, "arms": rows}, env=env, markdown=md)
    print(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for peer_train.json / .md")
    ap.add_argument("--work", type=Path, default=None, help="data and run folders (default OUT/work)")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--n-train", type=int, default=320)
    ap.add_argument("--n-val", type=int, default=80)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--device", default="0", help="'cpu' only for a dry run of the script")
    ap.add_argument("--levels", type=float, nargs="+", default=list(LEVELS))
    ap.add_argument("--ul-python", default=None, help="interpreter that has ultralytics (default: this one)")
    ap.add_argument("--lib-overrides", default=None, help='JSON train() keys for the libreyolo arms, e.g. \'{"nbs": 16}\'')
    ap.add_argument("--arm-timeout", type=float, default=1800.0)
    ap.add_argument("--profile-val", action="store_true",
                    help="libreyolo arms: cProfile of the validations, top functions in the arm's JSON")
    ap.add_argument("--merge", action="store_true", help="keep the other arms already in OUT/peer_train.json")
    ap.add_argument("--child", dest="arm", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--arm-dir", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--arm-json", type=Path, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if a.arm:
        child(a)
        return
    if a.out is None:
        ap.error("--out is required")
    import torch

    if a.device != "cpu" and not torch.cuda.is_available():
        sys.exit("peer_train.py needs a CUDA GPU (or --device cpu for a dry run)")
    parent(a)


if __name__ == "__main__":
    main()
