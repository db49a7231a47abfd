"""DDP training: device parsing, the torchrun launcher, and a real two-process gloo run on the CPU."""

from __future__ import annotations

import csv
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from libreyolo.errors import ConfigError
from libreyolo.io.checkpoint import read_checkpoint
from libreyolo.model import Model
from libreyolo.models.yolo9.family import YOLO9
from libreyolo.training import launch as launch_mod
from libreyolo.training.config import TrainConfig
from libreyolo.training.distributed import (
    DevicePlan,
    check_devices_present,
    convert_sync_batchnorm,
    parse_devices,
    revert_sync_batchnorm,
    setup_distributed,
    state_digest,
)
from libreyolo.training.trainer import Trainer


def tiny_overrides(data, project, **kw):
    base = dict(data=str(data), imgsz=64, batch=4, workers=0, device="cpu", nbs=4, mosaic=0.0, close_mosaic=0,
                warmup_epochs=0, optimizer="AdamW", lr0=0.002, verbose=False, tensorboard=False,
                project=str(project), seed=0)
    base.update(kw)
    return base


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _interrupt_at(monkeypatch, epoch_to_fail: int) -> None:
    original = Trainer._train_epoch

    def wrapped(self, epoch):
        if epoch == epoch_to_fail:
            raise KeyboardInterrupt
        return original(self, epoch)

    monkeypatch.setattr(Trainer, "_train_epoch", wrapped)


@pytest.mark.parametrize(("device", "world_size", "want"), [
    ("0,1", 0, DevicePlan(world_size=2, cuda=True, devices=(0, 1))),
    (" 2, 3 ", 0, DevicePlan(world_size=2, cuda=True, devices=(2, 3))),
    ("cuda:0,1", 2, DevicePlan(world_size=2, cuda=True, devices=(0, 1))),
    ("0", 0, DevicePlan(world_size=1, cuda=True, devices=(0,))),
    ("cuda:1", 0, DevicePlan(world_size=1, cuda=True, devices=(1,))),
    (1, 0, DevicePlan(world_size=1, cuda=True, devices=(1,))),
    ("cpu", 0, DevicePlan(world_size=1, cuda=False)),
    ("cpu", 2, DevicePlan(world_size=2, cuda=False)),
    ("CPU", 3, DevicePlan(world_size=3, cuda=False)),
])
def test_parse_devices(device, world_size, want):
    assert parse_devices(device, world_size=world_size) == want
    assert want.distributed == (want.world_size > 1)


@pytest.mark.parametrize(("device", "world_size", "match"), [
    ("0,0", 0, "listed twice"),
    ("0,,1", 0, "comma-separated"),
    ("0,a", 0, "comma-separated"),
    ("mps,cpu", 0, "comma-separated"),
    ("0,1", 3, "does not match"),
    ("0", 2, "does not match"),
    ("mps", 2, "needs CUDA GPUs or the CPU"),
    ("cpu", -1, "world_size"),
    (True, 0, "bool"),
])
def test_bad_device_strings_raise_config_error(device, world_size, match):
    with pytest.raises(ConfigError, match=match):
        parse_devices(device, world_size=world_size)


def test_train_rejects_bad_devices_before_launching(tiny_shapes, tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(launch_mod, "run_process_group", lambda *a, **k: started.append(a) or 0)
    model = Model(YOLO9(size="t", nc=6))
    with pytest.raises(ConfigError, match="comma-separated"):
        model.train(**tiny_overrides(tiny_shapes, tmp_path, device="0,x"))
    with pytest.raises(ConfigError, match="world_size must be >= 0"):
        TrainConfig.from_overrides({"world_size": -2})
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            model.train(**tiny_overrides(tiny_shapes, tmp_path, device="0,1"))
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            check_devices_present(DevicePlan(world_size=2, cuda=True, devices=(0, 1)))
    assert started == [] and not list(tmp_path.iterdir())


def test_torchrun_command_and_launch_arguments(tiny_shapes, tmp_path, monkeypatch):
    """device='cpu', world_size=2 goes to torchrun with 2 processes and the job's overrides."""
    import json

    seen = {}

    def fake_run(cmd, *, env=None, grace_s=0.0):
        seen["cmd"], seen["env"] = list(cmd), env
        job_path = Path(cmd[-1])
        seen["job"] = json.loads(job_path.read_text())
        seen["family"] = read_checkpoint(seen["job"]["checkpoint"])["libreyolo"]["family"]
        return 3  # a failed run

    monkeypatch.setattr(launch_mod, "run_process_group", fake_run)
    monkeypatch.setenv("RANK", "7")  # a stale variable must not leak into the workers
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    over = tiny_overrides(tiny_shapes, tmp_path, device="cpu", world_size=2)
    with pytest.raises(launch_mod.DistributedLaunchError, match="exit code 3"):
        Model(YOLO9(size="t", nc=6)).train(**over)
    cmd = seen["cmd"]
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc_per_node=2" in cmd and "--master_addr=127.0.0.1" in cmd
    assert cmd[-3:-1] == ["-m", "libreyolo.training.launch"]
    port = int(next(a for a in cmd if a.startswith("--master_port=")).split("=")[1])
    assert 0 < port < 65536
    assert seen["job"]["overrides"] == over and "RANK" not in seen["env"]
    assert seen["family"] == "yolo9" and not Path(seen["job"]["checkpoint"]).exists()  # temp files removed


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_ctrl_c_kills_the_whole_launched_process_group(tmp_path):
    """Even children that ignore SIGINT, in a session of their own like torchrun's workers, are gone
    after the grace period (no orphaned workers)."""
    pids = tmp_path / "pids"
    script = tmp_path / "tree.py"
    script.write_text(
        "import signal, subprocess, sys, time, os\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(40)'], start_new_session=True)\n"
        f"open({str(pids)!r} + '.tmp', 'w').write(f'{{os.getpid()}} {{c.pid}}')\n"
        f"os.replace({str(pids)!r} + '.tmp', {str(pids)!r})\n"
        "time.sleep(40)\n")
    main = threading.main_thread().ident

    def interrupt() -> None:
        for _ in range(300):
            if pids.is_file():
                break
            time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGINT)

    # The test owns its SIGINT disposition: under `nohup ... &` (or any launcher that starts
    # pytest with SIGINT ignored) Python installs no handler, and the interrupt would be lost.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            launch_mod.run_process_group([sys.executable, str(script)], grace_s=1.0)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - t0 < 30
    parent, child = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 5
    while (_pid_alive(parent) or _pid_alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(parent) and not _pid_alive(child)


def test_setup_distributed_is_inert_outside_torchrun(monkeypatch):
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert setup_distributed("cpu") is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert setup_distributed("cpu") is None  # a world of one trains as a single process


def test_sync_batchnorm_round_trip_keeps_state():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Sequential(nn.BatchNorm2d(4), nn.ReLU()))
    with torch.no_grad():
        net[1].running_mean.add_(0.5)
        net[2][0].weight.mul_(3.0)
    before = state_digest(net.state_dict())
    synced = convert_sync_batchnorm(net)
    assert isinstance(synced[1], nn.SyncBatchNorm) and isinstance(synced[2][0], nn.SyncBatchNorm)
    back = revert_sync_batchnorm(synced)
    assert type(back[1]) is nn.BatchNorm2d and type(back[2][0]) is nn.BatchNorm2d
    assert state_digest(back.state_dict()) == before
    back.eval()
    assert back(torch.randn(1, 3, 8, 8)).shape == (1, 4, 6, 6)


def test_ddp_two_cpu_processes_resume_rank0_outputs(tiny_shapes, tmp_path, monkeypatch, capfd):
    """Real torchrun launch: 2 gloo processes resume a single-process run's last.pt for one epoch.

    Checks: both ranks end with byte-identical weights equal to the saved last.pt; rank 0 alone
    wrote the run directory (no second run dir, no stray files); the result comes back to the
    calling process; cuda_graph=True logs exactly one 'training eager' line (here: the CPU device).
    """
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    over = tiny_overrides(tiny_shapes, tmp_path, epochs=2, batch=4, nbs=4, cuda_graph=True, plots=False)
    with monkeypatch.context() as m:
        _interrupt_at(m, 1)
        with pytest.raises(KeyboardInterrupt):
            Model(YOLO9(size="t", nc=6)).train(**over)
    run = tmp_path / "train"
    last = run / "weights" / "last.pt"
    before = read_checkpoint(last)
    assert before["train_state"]["epoch"] == 0
    capfd.readouterr()

    model = Model(YOLO9(size="t", nc=80))  # the launcher rebuilds the head from the run's best weights
    result = model.train(resume=str(last), device="cpu", world_size=2)
    out, err = capfd.readouterr()
    log = out + err

    after = read_checkpoint(last)  # all epochs ran: stripped to the weights
    assert "train_state" not in after and after["epoch"] == 1 and result["epochs"] == 2
    assert result["world_size"] == 2 and len(result["rank_digests"]) == 2
    params = {k for k, _ in Model(YOLO9(size="t", nc=6)).net.named_parameters()}

    def param_digest(ckpt):
        return state_digest({k: v for k, v in ckpt["train_state"]["net"].items() if k in params})

    assert result["rank_digests"][0] == result["rank_digests"][1] != param_digest(before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == [
        "args.yaml", "results.csv", "weights", "weights/best.pt", "weights/last.pt"]
    assert [r["epoch"] for r in _rows(run)] == ["1", "2"]
    assert log.count("training eager: device is cpu, CUDA graphs need a CUDA device") == 1, log[-3000:]
    assert "[rank1] INFO" not in log
    best = read_checkpoint(result["best"])
    assert model.nc == 6 and not model.net.training
    sd = model.net.state_dict()
    assert all(torch.equal(sd[k], v) for k, v in best["model"].items())


def test_ddp_captured_step_path_reduces_gradients_like_ddp(tiny_shapes, tmp_path, monkeypatch):
    """The DDP path of a captured training step, on two gloo processes.

    Under DDP a captured step's forward runs the local network, not the DDP wrapper, so DDP's
    gradient hooks never fire and the trainer all-reduces the gradients itself
    (``Distributed.reduce_gradients``). ``LIBREYOLO_TRAIN_CAPTURE_DRYRUN=1`` sends a CPU run down
    that same path without capturing. With accumulation (total batch 4 = 2 per rank, nbs 8: two
    micro-batches per optimiser step, two steps), the replicas must agree (the trainer raises if
    their parameters differ, which is what happens when the bypassed gradients are not reduced)
    and equal a DDP-eager run's parameters bit for bit (world size 2: DDP's 1/2 scaling is exact).
    """
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    results = {}
    for mode in ("eager", "captured"):
        monkeypatch.setenv("LIBREYOLO_TRAIN_CAPTURE_DRYRUN", "1" if mode == "captured" else "0")
        over = tiny_overrides(tiny_shapes, tmp_path / mode, epochs=2, batch=4, nbs=8, plots=False,
                              cuda_graph=mode == "captured")
        torch.manual_seed(0)  # the same initial weights in both runs (train's seed comes after the build)
        results[mode] = Model(YOLO9(size="t", nc=6)).train(world_size=2, **over)
    eager, captured = results["eager"], results["captured"]
    info = captured["cuda_graph"]
    assert info["enabled"] and info["failed"] is None and info["graphs"] == []
    assert info["eager_steps"] == 4  # every training batch went through the capture path
    assert len(captured["rank_digests"]) == 2 and len(set(captured["rank_digests"])) == 1
    assert captured["rank_digests"] == eager["rank_digests"]
    torch.manual_seed(0)
    start = state_digest(dict(Model(YOLO9(size="t", nc=6)).net.named_parameters()))
    assert captured["rank_digests"][0] != start  # the optimiser did step


def test_ddp_with_frozen_modules_trains_and_keeps_them_fixed(tiny_shapes, tmp_path, monkeypatch):
    """``freeze`` under DDP (two gloo processes): the frozen parameters are fixed before DDP wraps
    the network (its reducer takes the parameters that need gradients at construction), so the
    run does not wait for gradients that never come; both replicas end equal, the frozen stem's
    parameters equal to their initial values (its BatchNorm statistics still update, as without DDP)."""
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    over = tiny_overrides(tiny_shapes, tmp_path, epochs=1, batch=4, nbs=4, plots=False, freeze=2)
    torch.manual_seed(0)
    model = Model(YOLO9(size="t", nc=6))
    start = {k: v.detach().clone() for k, v in model.net.named_parameters() if k.startswith(("stem1.", "stem2."))}
    result = model.train(world_size=2, **over)
    assert len(result["rank_digests"]) == 2 and len(set(result["rank_digests"])) == 1
    last = read_checkpoint(result["last"])["model"]
    assert start and all(torch.equal(last[k].to(v.dtype), v) for k, v in start.items())
