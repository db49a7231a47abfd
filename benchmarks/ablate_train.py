"""Differential diagnosis of the training recipe: yolo9-t from scratch at a fixed epoch budget, one
recipe factor changed at a time.

Same setting as ``peer_train.py`` (libreyolo's ``shapes`` data, 320 train / 80 val images, 640 px,
batch 16, AMP, 15 epochs, random init, validation every epoch, ``cuda_graph=True`` by default,
which changes speed, not numbers). Every arm is the default recipe plus one change; ``base-seed1``
repeats the default with another seed, so the table shows how far two identical recipes drift
apart (differences below that are noise). Arms run as separate processes, ``--parallel`` of them
at a time on the one GPU: the measure is mAP at equal epochs, not wall time (wall times are
recorded but are not comparable between arms that shared the GPU).

Arms (``--arms`` picks; default: all):

========================  ==========================================================================
``base``                  the library's default recipe
``base-seed1``            the same, ``seed=1`` (noise level)
``old-schedule``          the schedule before issue 17: warm-up ``round(warmup_epochs * nb)`` with no
                          100-iteration floor, no accumulation ramp (full ``nbs / batch`` from step 1),
                          AdamW beta1 warmed from ``warmup_momentum``
``no-ramp``               only the accumulation ramp removed
``nbs16``                 ``nbs=16``: no accumulation at batch 16 (4x the optimizer steps), weight
                          decay normalised to 16 images
``nbs64``                 ``nbs=64``: accumulate 4 batches per step under AdamW too (the default
                          before AdamW stopped accumulating; SGD still does by default)
``warmup0``               ``warmup_epochs=0``
``warmup5``               ``warmup_epochs=5``
``warmup-no-floor``       warm-up of exactly ``warmup_epochs`` (no 100-iteration floor)
``bias-lr-0.1``           ``warmup_bias_lr=0.1`` (the default since round 2; before it AdamW's biases
                          warmed up from 0)
``bias-lr-0.1-seed1``     the same, ``seed=1``
``bias-lr-0``             ``warmup_bias_lr=0``: AdamW's biases warm up from 0 like the other groups
``adamw-lr5e-4``          ``optimizer=AdamW, lr0=5e-4``: half the automatic lr (0.002 * 5 / (4 + nc)
                          = 1e-3 with nc=6); is it right without accumulation?
``adamw-lr2e-3``          ``optimizer=AdamW, lr0=2e-3``: twice the automatic lr
``ema-off``               ``ema=False``
``close-mosaic-0``        mosaic until the end
``close-mosaic-5``        mosaic off for the last 5 epochs
``mosaic-off``            ``mosaic=0``
``sgd``                   ``optimizer=SGD, lr0=0.01`` instead of the automatic AdamW
``clip-off``              ``clip_grad=0``
``cos-lr``                ``cos_lr=True``
``<family>``              another family's smallest size with its own default recipe (yolox-s,
                          yolo7-tiny, rtmdet-t, rtdetr-r18, dfine-n; ``--arms families`` runs them all)
``<family>-old-schedule`` the same with the pre-issue-17 schedule
``<family>-nbs64``        the same accumulating to 64 images per step
========================  ==========================================================================

GPU (the lead's command; about 4-5 minutes on one H200 at the defaults: 16 arms, 8 at a time)::

    python3 benchmarks/ablate_train.py --out benchmarks/results/ablate_train
    python3 benchmarks/ablate_train.py --out benchmarks/results/ablate_train --arms families --merge

CPU dry run of the script (numbers meaningless)::

    python3 benchmarks/ablate_train.py --out /tmp/ab --epochs 1 --n-train 16 --n-val 8 --imgsz 160 \\
        --device cpu --batch 4 --workers 0 --parallel 1 --arms base old-schedule nbs16
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# arm -> (train() keys over the default recipe, name of a code patch or None)
ARMS: dict[str, tuple[dict[str, Any], str | None]] = {
    "base": ({}, None),
    "base-seed1": ({"seed": 1}, None),
    "old-schedule": ({}, "old-schedule"),
    "no-ramp": ({}, "no-ramp"),
    "nbs16": ({"nbs": 16}, None),
    "nbs64": ({"nbs": 64}, None),
    "warmup0": ({"warmup_epochs": 0.0}, None),
    "warmup5": ({"warmup_epochs": 5.0}, None),
    "warmup-no-floor": ({}, "no-floor"),
    "bias-lr-0.1": ({"warmup_bias_lr": 0.1}, None),
    "bias-lr-0.1-seed1": ({"warmup_bias_lr": 0.1, "seed": 1}, None),
    "bias-lr-0": ({"warmup_bias_lr": 0.0}, None),
    "adamw-lr5e-4": ({"optimizer": "AdamW", "lr0": 0.0005, "momentum": 0.9}, None),
    "adamw-lr2e-3": ({"optimizer": "AdamW", "lr0": 0.002, "momentum": 0.9}, None),
    "ema-off": ({"ema": False}, None),
    "close-mosaic-0": ({"close_mosaic": 0}, None),
    "close-mosaic-5": ({"close_mosaic": 5}, None),
    "mosaic-off": ({"mosaic": 0.0}, None),
    "sgd": ({"optimizer": "SGD", "lr0": 0.01}, None),
    "clip-off": ({"clip_grad": 0.0}, None),
    "cos-lr": ({"cos_lr": True}, None),
}
# other families at their smallest size, default recipe and the pre-issue-17 schedule (issue 17.2:
# does the same cause apply?); chosen with ``--arms families`` or by name
FAMILY_WEIGHTS = {"yolox-s": "LibreYOLOXs.pt", "yolo7-tiny": "LibreYOLO7tiny.pt", "rtmdet-t": "LibreRTMDett.pt",
                  "rtdetr-r18": "LibreRTDETRr18.pt", "dfine-n": "LibreDFINEn.pt"}
YOLO9_ARMS = list(ARMS)
for _fam in FAMILY_WEIGHTS:
    ARMS[f"{_fam}"] = ({}, None)
    ARMS[f"{_fam}-old-schedule"] = ({}, "old-schedule")
    ARMS[f"{_fam}-nbs64"] = ({"nbs": 64}, None)


def weights_of(arm: str) -> str:
    """The untrained model an arm builds: yolo9-t unless the arm names another family."""
    for fam, w in FAMILY_WEIGHTS.items():
        if arm == fam or arm.startswith(fam + "-"):
            return w
    return "LibreYOLO9t.pt"
logger = logging.getLogger("ablate_train")


# ------------------------------------------------------------------------------------ code patches
def apply_patch(name: str | None) -> None:
    """Recipe variants that are not train() keys, applied in the arm's own process only."""
    if name is None:
        return
    import dataclasses

    import torch

    from libreyolo.training import scheduler, trainer

    if name == "no-floor":
        scheduler.MIN_WARMUP_ITERS = 0
        real = scheduler.warmup_iterations
        trainer.warmup_iterations = lambda **kw: real(**{**kw, "min_iters": 0})
        return
    if name == "no-ramp":
        scheduler.LRSchedule.accumulate_at = lambda self, iteration: self.accumulate
        return
    if name != "old-schedule":
        raise SystemExit(f"unknown patch {name!r}")

    def old_warmup(*, warmup_epochs: float, iters_per_epoch: int, epochs: int, min_iters: int = 0) -> int:
        return round(warmup_epochs * iters_per_epoch)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class OldSchedule(scheduler.LRSchedule):
        def accumulate_at(self, iteration: int) -> int:
            return self.accumulate

        def apply(self, optimizer: torch.optim.Optimizer, *, iteration: int, epoch: int) -> None:
            f = self.factor(epoch)
            warm = iteration < self.warmup_iters
            t = iteration / self.warmup_iters if warm else 1.0
            adam = isinstance(optimizer, torch.optim.AdamW)
            for g in optimizer.param_groups:
                target = g["initial_lr"] * f
                if warm:
                    start = self.warmup_bias_lr if (g.get("is_bias") and not adam) else 0.0
                    g["lr"] = start + (target - start) * t
                    mom = self.warmup_momentum + (self.momentum - self.warmup_momentum) * t
                    if "betas" in g:
                        g["betas"] = (mom, g["betas"][1])
                    elif "momentum" in g:
                        g["momentum"] = mom
                else:
                    g["lr"] = target

    trainer.warmup_iterations = old_warmup
    trainer.LRSchedule = OldSchedule


# ------------------------------------------------------------------------------------ child side
def child(a: argparse.Namespace) -> None:
    from benchmarks.peer_train import arm_overrides, train_arm
    from libreyolo import LibreYOLO

    keys, patch = ARMS[a.arm]
    apply_patch(patch)
    model = LibreYOLO(weights_of(a.arm), pretrained=False, nc=6)
    overrides = arm_overrides(a, cuda_graph=not a.eager)
    overrides.update(keys)
    trainer, _, epochs, wall = train_arm(model, overrides)
    out = {"arm": a.arm, "model": weights_of(a.arm), "keys": keys, "patch": patch, "wall_s": round(wall, 2),
           "epochs": epochs, "optimizer_steps": trainer.total_steps, "accumulate": trainer.accumulate,
           "warmup_iters": trainer.schedule.warmup_iters, "optimizer": type(trainer.optimizer).__name__,
           "lr": trainer.optimizer.param_groups[0]["initial_lr"]}
    Path(a.arm_json).write_text(json.dumps(out, indent=2, default=str) + "\n")


# ----------------------------------------------------------------------------------- parent side
def summarise(row: dict[str, Any]) -> dict[str, Any]:
    maps = [e["mAP50-95"] for e in row.get("epochs", []) if e["mAP50-95"] == e["mAP50-95"]]
    row["final_mAP50-95"] = round(maps[-1], 4) if maps else None
    row["best_mAP50-95"] = round(max(maps), 4) if maps else None
    mid = len(maps) // 3
    row["mAP50-95_at_epoch"] = {str(i + 1): round(m, 4) for i, m in enumerate(maps)
                                if i + 1 in {mid, 2 * mid, len(maps)} and i >= 0}
    return row


def markdown(rows: list[dict[str, Any]], env: dict[str, Any], a: argparse.Namespace) -> str:
    finals = {r["arm"]: r["final_mAP50-95"] for r in rows if r.get("final_mAP50-95") is not None}
    head = ["arm", "change", "optimizer steps", "warm-up iters", "final mAP50-95", "vs base", "best mAP50-95",
            "wall s (shared GPU)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        change = ", ".join(f"{k}={v}" for k, v in ARMS[r["arm"]][0].items()) or (ARMS[r["arm"]][1] or "-")
        if weights_of(r["arm"]) != "LibreYOLO9t.pt":
            change = f"{weights_of(r['arm'])}: {change}"
        if "error" in r:
            lines.append(f"| {r['arm']} | {change} | error: {r['error']} |" + " |" * (len(head) - 3))
            continue
        ref = next((f for f in FAMILY_WEIGHTS if r["arm"].startswith(f)), "base")  # the arm's own family default
        delta = (f"{r['final_mAP50-95'] - finals[ref]:+.4f}" if ref in finals and r["final_mAP50-95"] is not None
                 else "")
        lines.append(f"| {r['arm']} | {change} | {r['optimizer_steps']} | {r['warmup_iters']} | "
                     f"{r['final_mAP50-95']} | {delta} | {r['best_mAP50-95']} | {r['wall_s']:.0f} |")
    return (f"# Training ablation from scratch (yolo9-t unless named), shapes {a.n_train}/{a.n_val}, {a.imgsz} px, "
            f"batch {a.batch}, AMP, {a.epochs} epoch{'s' if a.epochs != 1 else ''}"
            f"{'' if a.eager else ', cuda_graph=True'}\n\nGPU {env['gpu']}, "
            f"torch {env['torch']}, {env['date']}, commit {env['commit']}. One change per arm over the default "
            f"recipe; {a.parallel} arm{'s' if a.parallel != 1 else ''} at a time on the GPU. `base-seed1` gives the run-to-run noise; 'vs base' compares with the same family's default arm.\n\n"
            + "\n".join(lines) + "\n")


def parent(a: argparse.Namespace) -> None:
    from benchmarks._common import stamp, write_result
    from libreyolo.data.shapes import ensure_shapes_dataset

    a.out.mkdir(parents=True, exist_ok=True)
    work = a.work or a.out / "work"
    data = ensure_shapes_dataset(work / "data", n_train=a.n_train, n_val=a.n_val, imgsz=a.imgsz, seed=0)
    env = stamp(a.commit)
    settings = {k: getattr(a, k) for k in ("n_train", "n_val", "imgsz", "batch", "epochs", "device", "workers",
                                           "parallel", "eager")}
    path = a.out / "ablate_train.json"
    rows: list[dict[str, Any]] = []
    if a.merge and path.is_file():
        rows = [r for r in json.loads(path.read_text())["numbers"]["arms"] if r.get("arm") not in a.arms]
    pending = list(a.arms)
    running: list[tuple[str, subprocess.Popen, Path, float]] = []
    while pending or running:
        while pending and len(running) < a.parallel:
            arm = pending.pop(0)
            arm_dir = work / arm
            arm_dir.mkdir(parents=True, exist_ok=True)
            arm_json = arm_dir / "arm.json"
            arm_json.unlink(missing_ok=True)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", arm, "--data", str(data), "--arm-dir",
                   str(arm_dir), "--arm-json", str(arm_json), "--epochs", str(a.epochs), "--imgsz", str(a.imgsz),
                   "--batch", str(a.batch), "--workers", str(a.workers), "--device", a.device]
            if a.eager:
                cmd.append("--eager")
            log = open(arm_dir / "log.txt", "w")  # noqa: SIM115 - closed with the process
            logger.info("start %s", arm)
            running.append((arm, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), arm_json,
                            time.perf_counter()))
        time.sleep(1.0)
        for item in list(running):
            arm, proc, arm_json, t0 = item
            if proc.poll() is None and time.perf_counter() - t0 < a.arm_timeout:
                continue
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            running.remove(item)
            ok = proc.returncode == 0 and arm_json.is_file()
            row = summarise(json.loads(arm_json.read_text())) if ok else {
                "arm": arm, "error": f"exit {proc.returncode} (see {arm_json.parent / 'log.txt'})"}
            logger.info("done %s: %s", arm, row.get("final_mAP50-95", row.get("error")))
            rows = [r for r in rows if r.get("arm") != arm] + [row]
            rows.sort(key=lambda r: list(ARMS).index(r["arm"]))
            write_result(path, numbers={"settings": settings, "arms": rows}, env=env)
    md = markdown(rows, env, a)
    write_result(path, numbers={"settings": settings, "arms": rows}, env=env, markdown=md)
    print(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--arms", nargs="+", default=YOLO9_ARMS, choices=[*ARMS, "families"],
                    help="arms to run (default: the yolo9-t ones); 'families' = the other families' arms")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--n-train", type=int, default=320)
    ap.add_argument("--n-val", type=int, default=80)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=8, help="arms at a time")
    ap.add_argument("--eager", action="store_true", help="no cuda_graph (default: cuda_graph=True)")
    ap.add_argument("--device", default="0")
    ap.add_argument("--arm-timeout", type=float, default=900.0)
    ap.add_argument("--merge", action="store_true", help="keep the other arms already in OUT/ablate_train.json")
    ap.add_argument("--child", dest="arm", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--arm-dir", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--arm-json", type=Path, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if "families" in a.arms:
        a.arms = [x for x in a.arms if x != "families"] + [x for x in ARMS if x not in YOLO9_ARMS]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if a.arm:
        child(a)
        return
    if a.out is None:
        ap.error("--out is required")
    import torch

    if a.device != "cpu" and not torch.cuda.is_available():
        sys.exit("ablate_train.py needs a CUDA GPU (or --device cpu for a dry run)")
    os.environ.setdefault("OMP_NUM_THREADS", "2")  # the parallel arms share the host's cores
    parent(a)


if __name__ == "__main__":
    main()
