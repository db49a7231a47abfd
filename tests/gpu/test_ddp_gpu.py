"""Two-GPU DDP training through ``model.train(device="0,1")``: torchrun, nccl, SyncBatchNorm.

Needs at least two CUDA GPUs (skipped otherwise). Each test is one real 1-epoch run of yolo9-t
from the demo checkpoint on a 64 + 16 image shapes set at 160 px, total batch 16 (8 per GPU).
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch import nn

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                       reason="needs >= 2 CUDA GPUs for a two-process nccl DDP run"),
]

# NVLink multicast (NVLS) brings nothing to a two-GPU all-reduce; keep it off in the launched workers
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@pytest.fixture(scope="module")
def shapes_160(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from libreyolo.data.shapes import ensure_shapes_dataset

    return ensure_shapes_dataset(tmp_path_factory.mktemp("shapes"), n_train=64, n_val=16, imgsz=160, seed=1)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    for k, v in NCCL_ENV.items():
        if k not in os.environ:
            monkeypatch.setenv(k, v)


def _train_two_gpus(data: Path, project: Path, name: str, **kw: Any) -> tuple[Any, dict[str, Any]]:
    from libreyolo import LibreYOLO

    model = LibreYOLO("LibreYOLO9t.pt")
    result = model.train(data=str(data), epochs=1, imgsz=160, batch=16, device="0,1", workers=2, seed=0,
                         project=str(project), name=name, exist_ok=True, plots=False, tensorboard=False,
                         close_mosaic=0, verbose=False, save_period=1, **kw)  # epoch1.pt keeps the train state
    return model, result


def _param_digest_of(last: Path) -> str:
    """Parameter digest of the live (non-EMA) network saved in a resumable checkpoint, as the ranks compute it."""
    from libreyolo import LibreYOLO
    from libreyolo.io.checkpoint import read_checkpoint
    from libreyolo.training.distributed import state_digest

    ckpt = read_checkpoint(last)
    names = {k for k, _ in LibreYOLO("LibreYOLO9t.pt").net.named_parameters()}
    net = ckpt["train_state"]["net"]
    assert names <= set(net), sorted(names - set(net))[:5]
    return state_digest({k: v for k, v in net.items() if k in names})


def _check_run(result: dict[str, Any], log: str) -> list[dict[str, str]]:
    assert result["world_size"] == 2, result
    digests = result["rank_digests"]
    assert len(digests) == 2 and digests[0] == digests[1] and len(digests[0]) == 64, digests
    last, best = Path(result["last"]), Path(result["best"])
    assert last.is_file() and best.is_file()
    # rank 0 saved exactly what every rank holds (a finished run strips last.pt; epoch1.pt is resumable)
    assert digests[0] == _param_digest_of(Path(result["save_dir"]) / "weights" / "epoch1.pt")
    with open(Path(result["save_dir"]) / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["epoch"] for r in rows] == ["1"]
    losses = {k: float(v) for k, v in rows[0].items() if k.startswith("train/")}
    assert losses and all(math.isfinite(v) and v > 0 for v in losses.values()), losses
    assert 0.0 <= float(rows[0]["metrics/mAP50-95"]) <= 1.0
    assert "DDP 2 processes x batch 8 (nccl" in log, log[-3000:]  # batch 16 split over two nccl processes
    assert "[rank1] INFO" not in log
    return rows


def test_two_gpu_nccl_run(shapes_160: Path, tmp_path: Path, clean_env: None, capfd: pytest.CaptureFixture) -> None:
    model, result = _train_two_gpus(shapes_160, tmp_path, "ddp")
    out, err = capfd.readouterr()
    _check_run(result, out + err)
    assert "SyncBatchNorm" not in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp"]  # rank 0 alone made the run directory
    assert not model.net.training and model.nc == 6


def test_two_gpu_sync_bn_run(shapes_160: Path, tmp_path: Path, clean_env: None, capfd: pytest.CaptureFixture) -> None:
    from libreyolo import SAMPLE_IMAGE, LibreYOLO

    model, result = _train_two_gpus(shapes_160, tmp_path, "ddp_syncbn", sync_bn=True)
    out, err = capfd.readouterr()
    log = out + err
    _check_run(result, log)
    assert "nccl, SyncBatchNorm)" in log, log[-3000:]  # the layers really were converted in the workers
    args = yaml.safe_load((Path(result["save_dir"]) / "args.yaml").read_text())
    assert args["sync_bn"] is True
    for m in (model, LibreYOLO(result["best"])):  # the returned model and the saved weights: plain BatchNorm
        assert not any(isinstance(x, nn.SyncBatchNorm) for x in m.net.modules())
        assert any(type(x) is nn.BatchNorm2d for x in m.net.modules())
    model.fuse()  # fuses and predicts like any single-process result
    res = model.predict(SAMPLE_IMAGE, imgsz=160, device="cuda:0", conf=0.001)
    assert len(res) == 1


def test_two_gpu_captured_training_step(shapes_160: Path, tmp_path: Path, clean_env: None,
                                        capfd: pytest.CaptureFixture) -> None:
    """``cuda_graph=True`` under DDP: each rank captures its local network (the all-reduce stays
    outside the graph, done by the trainer), the replays run, the replicas end bit-identical, and
    the epoch's training losses stay within eager noise of the eager DDP run from the same start."""
    _, eager = _train_two_gpus(shapes_160, tmp_path, "ddp_eager")
    capfd.readouterr()
    _, graph = _train_two_gpus(shapes_160, tmp_path, "ddp_graph", cuda_graph=True)
    out, err = capfd.readouterr()
    rows = _check_run(graph, out + err)
    info = graph["cuda_graph"]
    assert info["enabled"] and info["failed"] is None, info
    assert info["graphs"] and all(g["replays"] > 0 for g in info["graphs"]), info
    with open(Path(eager["save_dir"]) / "results.csv", newline="") as f:
        eager_rows = list(csv.DictReader(f))
    for k, v in rows[0].items():
        if k.startswith("train/"):
            ref = float(eager_rows[0][k])
            assert math.isclose(float(v), ref, rel_tol=0.05), (k, v, ref)


def test_two_gpu_sync_bn_trains_eager_with_cuda_graph(shapes_160: Path, tmp_path: Path, clean_env: None,
                                                     capfd: pytest.CaptureFixture) -> None:
    """SyncBatchNorm all-reduces inside the forward: ``cuda_graph=True`` trains eager with one log line."""
    _, result = _train_two_gpus(shapes_160, tmp_path, "ddp_syncbn_graph", sync_bn=True, cuda_graph=True)
    out, err = capfd.readouterr()
    log = out + err
    _check_run(result, log)
    assert log.count("training eager: SyncBatchNorm (sync_bn=True)") == 1, log[-3000:]
    assert result["cuda_graph"]["enabled"] is False
