"""Launch a DDP training run through torchrun, and the worker entry point it starts.

``model.train(device="0,1", ...)`` in a plain process ends here (:func:`launch_training`):

1. the model is written to a temporary checkpoint and the overrides to a JSON job file;
2. ``python -m torch.distributed.run --nproc_per_node=N --master_addr=127.0.0.1
   --master_port=<free port> -m libreyolo.training.launch <job.json>`` runs as a child process
   in its own process group, one worker per device; ``CUDA_VISIBLE_DEVICES`` is left alone (the
   workers index the listed GPUs by ``LOCAL_RANK``);
3. each worker (:func:`main`) rebuilds the model from the checkpoint and runs the ordinary
   :class:`~libreyolo.training.trainer.Trainer`, which joins the torchrun world;
4. rank 0 writes the result dict as JSON; this process loads the best weights into ``model``.

Ctrl-C in this process is forwarded to torchrun as SIGINT (torchrun stops its workers); if the
group is still alive after :data:`GRACE_S` seconds every process in it is killed, so no worker
outlives the call. A worker failure makes torchrun stop the other workers and exit non-zero,
which raises :class:`~libreyolo.errors.LibreYOLOError` here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, LibreYOLOError
from .distributed import DevicePlan, check_devices_present, free_port

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

GRACE_S = 20.0  # seconds between forwarding SIGINT and killing the process group


class DistributedLaunchError(LibreYOLOError):
    """A torchrun-launched training run failed or was interrupted."""


def torchrun_command(*, nproc: int, port: int, job: Path) -> list[str]:
    """The torchrun command line for one node with ``nproc`` workers."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--nnodes=1",
            "--master_addr=127.0.0.1", f"--master_port={port}", "-m", "libreyolo.training.launch", str(job)]


def run_process_group(cmd: Sequence[str], *, env: dict[str, str] | None = None, grace_s: float = GRACE_S) -> int:
    """Run ``cmd`` in a new process group and return its exit code.

    On ``KeyboardInterrupt`` (or any exception) while waiting: SIGINT goes to the whole group,
    then SIGKILL after ``grace_s`` seconds if anything is left; the exception is re-raised.
    """
    proc = subprocess.Popen(list(cmd), env=env, start_new_session=True)
    try:
        return proc.wait()
    except BaseException:
        _stop_group(proc, grace_s=grace_s)
        raise


def _descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _stop_group(proc: subprocess.Popen, *, grace_s: float) -> None:
    """SIGINT to torchrun's process group (torchrun stops its workers), SIGKILL after ``grace_s``.

    torchrun starts each worker in a session of its own, so the workers are also found as
    descendants of the launched process (before and after the grace period) and killed by group.
    """
    pgid = proc.pid  # start_new_session=True: the child leads its own process group
    tree = _descendants(pgid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    tree |= _descendants(pgid)
    for pid in (pgid, *sorted(tree)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # a worker leads its own group; the leader may have exited
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)
    logger.warning("distributed training interrupted: worker processes stopped")


def _jsonable(overrides: dict[str, Any]) -> dict[str, Any]:
    out = {k: (str(v) if isinstance(v, Path) else v) for k, v in overrides.items()}
    try:
        json.dumps(out)
    except TypeError as e:
        raise ConfigError(f"train overrides must be plain values (str, int, float, bool, None) for a "
                          f"multi-process run: {e}") from e
    return out


def launch_training(model: Family, overrides: dict[str, Any], plan: DevicePlan) -> dict[str, Any]:
    """Train ``model`` on ``plan.world_size`` processes through torchrun; returns rank 0's result dict.

    Afterwards ``model.net`` holds the best (EMA) weights, as after a single-process run.
    """
    from ..io.checkpoint import save_model

    check_devices_present(plan)
    if model.fused:
        raise ConfigError("this model was fused for inference (fuse()); a fused model cannot train: "
                          "load the checkpoint again without fusing")
    job_over = _jsonable(overrides)
    with tempfile.TemporaryDirectory(prefix="libreyolo-ddp-") as tmp:
        tmpd = Path(tmp)
        save_model(model, tmpd / "init.pt")
        job = {"checkpoint": str(tmpd / "init.pt"), "overrides": job_over, "result": str(tmpd / "result.json")}
        (tmpd / "job.json").write_text(json.dumps(job))
        env = dict(os.environ)
        for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)
        # the workers import this very copy of libreyolo, installed or not, from any working directory
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        cmd = torchrun_command(nproc=plan.world_size, port=free_port(), job=tmpd / "job.json")
        logger.info("launching DDP: %d processes on %s", plan.world_size,
                    "GPUs " + ",".join(map(str, plan.devices)) if plan.cuda else "the CPU (gloo)")
        rc = run_process_group(cmd, env=env)
        result_path = tmpd / "result.json"
        if rc != 0 or not result_path.is_file():
            raise DistributedLaunchError(f"distributed training failed (torchrun exit code {rc}); the worker "
                                         "traceback is printed above. Fix the error, then resume with "
                                         "resume='<run>/weights/last.pt' if a checkpoint was written")
        result = json.loads(result_path.read_text())
    _load_result_weights(model, result)
    return result


def _load_result_weights(model: Family, result: dict[str, Any]) -> None:
    """Put the run's best (else last) weights into ``model``, rebuilding the head for a new class count."""
    from ..io.checkpoint import load_state_into, read_checkpoint

    src = result.get("best") or result["last"]
    ckpt = read_checkpoint(src)
    meta = ckpt["libreyolo"]
    if int(meta["nc"]) != model.nc:
        model.net = model.build_net(size=model.size, nc=int(meta["nc"]), task=model.task,
                                          **(meta.get("arch") or {})).to(
            next(model.net.parameters()).device)
        model.nc = int(meta["nc"])
    model.names = {int(k): v for k, v in meta["names"].items()}
    if meta.get("imgsz"):
        model.imgsz = meta["imgsz"]
    load_state_into(model, ckpt["model"], strict=True, where=str(src))
    model.net.eval()
    model.ckpt_path = str(src)
    model.train_args = dict(ckpt.get("train_args") or {})


def main(argv: Sequence[str] | None = None) -> int:
    """Worker entry point: ``python -m libreyolo.training.launch <job.json>`` under torchrun."""
    from ..io.checkpoint import model_from_checkpoint, read_checkpoint
    from .config import TrainConfig, imgsz_multiple
    from .trainer import Trainer

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        raise SystemExit("usage: python -m torch.distributed.run ... -m libreyolo.training.launch JOB.json")
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format=f"[rank{rank}] %(levelname)s %(name)s: %(message)s")
    job = json.loads(Path(args[0]).read_text())
    model = model_from_checkpoint(read_checkpoint(job["checkpoint"]), job["checkpoint"])
    overrides = dict(job["overrides"])
    cfg = TrainConfig.from_overrides(overrides, multiple=imgsz_multiple(model))
    result = Trainer(model, cfg, explicit=set(overrides)).fit()
    if rank == 0:
        tmp = Path(job["result"] + ".tmp")
        tmp.write_text(json.dumps(result, default=str))
        os.replace(tmp, job["result"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
