"""CUDA graphs for prediction on a real GPU (SPEC G-1..G-9): capture, bitwise parity on two
input distributions, copy-out, the "auto" policy, invalidation, in-place weight updates, eviction,
thread safety, capture next to a pinning DataLoader, seams, and capture failures."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from torch import nn

from libreyolo.graphs.parity import build_probe_model, check_parity, compare_outputs, probe_batch
from libreyolo.graphs.runner import PredictGraphs
from libreyolo.graphs.seam import Stage
from libreyolo.model import Model
from libreyolo.models._base.family import Family
from libreyolo.registry import families

pytestmark = pytest.mark.cuda


# --------------------------------------------------------------------------- a small real network
class SmallNet(nn.Module):
    """Conv/BN/SiLU, a stride-2 branch, upsample + concat, two outputs; fuse() replaces parameters."""

    def __init__(self, nc: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, 2, 1, bias=False)
        self.b1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, 2, 1, bias=False)
        self.b2 = nn.BatchNorm2d(32)
        self.head = nn.Conv2d(48, 4 + nc, 1)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f1 = self.act(self.b1(self.c1(x)))
        f2 = self.act(self.b2(self.c2(f1)))
        up = nn.functional.interpolate(f2, scale_factor=2.0, mode="nearest")
        y = self.head(torch.cat([f1, up], 1))
        return y, y.flatten(2).softmax(-1).amax(-1)

    def fuse(self) -> SmallNet:
        for c, b in (("c1", "b1"), ("c2", "b2")):
            conv, bn = getattr(self, c), getattr(self, b)
            fused = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                              bias=True).to(conv.weight.device)
            scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
            with torch.no_grad():
                fused.weight.copy_(conv.weight * scale[:, None, None, None])
                fused.bias.copy_(bn.bias - bn.running_mean * scale)
            setattr(self, c, fused)
            setattr(self, b, nn.Identity())
        return self


class Small(Family):
    FAMILY: ClassVar[str] = "small_test"
    NAME_TOKEN: ClassVar[str] = "SMALLTEST"
    SIZES: ClassVar[tuple[str, ...]] = ("n",)
    DEFAULT_IMGSZ: ClassVar[int] = 64
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        return SmallNet(nc)

    def postprocess(self, raw: Any, **kw: Any) -> list[torch.Tensor]:
        return [torch.zeros(0, 6, device=raw[0].device) for _ in range(raw[0].shape[0])]


class SmallSeamed(Small):
    """First conv block captured, a host-syncing rescale eager, the rest captured (G-9)."""

    FAMILY: ClassVar[str] = "small_seamed_test"

    def forward_stages(self) -> list[Stage]:
        n = self.net

        def rest(f1: torch.Tensor) -> Any:
            f2 = n.act(n.b2(n.c2(f1)))
            up = nn.functional.interpolate(f2, scale_factor=2.0, mode="nearest")
            y = n.head(torch.cat([f1, up], 1))
            return y, y.flatten(2).softmax(-1).amax(-1)

        return [
            Stage(name="stem", fn=lambda x: n.act(n.b1(n.c1(x)))),
            Stage(name="rescale", fn=lambda f: f * float(1.0 / f.abs().amax().clamp_min(1e-3)),
                  capturable=False, reason="host sync"),
            Stage(name="rest", fn=rest),
        ]


class SmallUnflagged(Small):
    FAMILY: ClassVar[str] = "small_unflagged_test"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False


def _model(cls: type[Small] = Small, *, fuse: bool = True, seed: int = 0) -> Model:
    return Model(build_probe_model(cls, size="n", task="detect", device="cuda", seed=seed, fuse=fuse))


def _probes(shape=(2, 3, 64, 64)) -> tuple[torch.Tensor, torch.Tensor]:
    return probe_batch("uniform", shape, device="cuda", seed=1), probe_batch("image", shape, device="cuda", seed=2)


def _eq(a: Any, b: Any) -> bool:
    return compare_outputs(a, b)["equal"]


# --------------------------------------------------------------------------- capture and parity
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_replay_is_bitwise_equal_to_eager_on_two_distributions(amp):
    model = _model()
    xa, xb = _probes()
    for x in (xa, xb, xa):
        assert _eq(model.forward(x, cuda_graph=True, amp_dtype=amp), model.eager_forward(x, amp_dtype=amp))
    info = model.graph_info()
    assert len(info["graphs"]) == 1 and info["graphs"][0]["replays"] == 3 and info["policy"]["captures"] == 1
    g = info["graphs"][0]
    assert g["shape"] == [2, 3, 64, 64] and g["dtype"] == ("float32" if amp is None else "float16")
    assert g["device"].startswith("cuda") and g["capture_ms"] > 0
    assert not _eq(model.eager_forward(xa, amp_dtype=amp), model.eager_forward(xb, amp_dtype=amp))


def test_parity_harness_passes_on_a_capturable_net():
    row = check_parity(_model(), shape=(1, 3, 96, 96), amp_dtype=torch.float16)
    assert row["result"] == "pass", row
    assert row["copy_out_ok"] and row["probes_differ"] and row["eager_deterministic"]


def test_outputs_are_copied_out_before_the_next_replay():
    model = _model()
    xa, xb = _probes()
    out_a = model.forward(xa, cuda_graph=True)
    keep = [t.clone() for t in out_a]
    model.forward(xb, cuda_graph=True)
    assert all(torch.equal(k, t) for k, t in zip(keep, out_a, strict=False))


def test_auto_captures_only_on_the_second_sight():
    model = _model()
    xa, xb = _probes()
    model.forward(xa, cuda_graph="auto")
    info = model.graph_info()
    assert info["graphs"] == [] and "seen once" in info["eager_reason"]
    out = model.forward(xb, cuda_graph="auto")  # same shape: second sight
    assert _eq(out, model.eager_forward(xb))
    info = model.graph_info()
    assert len(info["graphs"]) == 1 and info["eager_reason"] is None
    model.forward(xa, cuda_graph="auto")
    assert model.graph_info()["graphs"][0]["replays"] == 2 and model.graph_info()["policy"]["captures"] == 1
    model.forward(probe_batch("uniform", (1, 3, 32, 32), device="cuda"), cuda_graph="auto")  # new shape: eager
    assert len(model.graph_info()["graphs"]) == 1


def test_capture_graph_ahead_then_replay_and_release():
    model = _model()
    row = model.capture_graph(imgsz=64, batch=2, dtype=torch.float16)
    assert row["shape"] == [2, 3, 64, 64] and row["dtype"] == "float16" and row["replays"] == 0
    xa, _ = _probes()
    assert _eq(model.forward(xa, cuda_graph=True, amp_dtype=torch.float16),
               model.eager_forward(xa, amp_dtype=torch.float16))
    assert model.graph_info()["policy"]["captures"] == 1
    model.release_graphs()
    assert model.graph_info()["graphs"] == []


def test_unflagged_family_is_refused_on_cuda():
    model = _model(SmallUnflagged)
    with pytest.raises(NotImplementedError, match="small_unflagged_test"):
        model.forward(_probes()[0], cuda_graph="auto")


# --------------------------------------------------------------------------- invalidation (G-8)
def test_device_move_drops_graphs_and_recaptures():
    model = _model()
    xa, _ = _probes()
    model.forward(xa, cuda_graph=True)
    other = "cuda:1" if torch.cuda.device_count() > 1 else "cpu"
    model.to(other)
    info = model.graph_info()
    assert info["graphs"] == [] and "moved" in info["invalidations"][-1]["reason"]
    assert info["invalidations"][-1]["graphs_dropped"] == 1
    if other == "cpu":
        with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
            model.forward(xa.cpu(), cuda_graph=True)
        model.to("cuda:0")
        x = xa
    else:
        x = xa.to(other)
    assert _eq(model.forward(x, cuda_graph=True), model.eager_forward(x))
    assert model.graph_info()["policy"]["captures"] == 2


def test_predict_device_argument_drops_graphs():
    model = _model()
    img = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    model.predict(img, imgsz=64, device="cuda", cuda_graph=True)
    assert len(model.graph_info()["graphs"]) == 1
    model.predict(img, imgsz=64, device="cpu")
    assert model.graph_info()["graphs"] == [] and model.graph_info()["invalidation_count"] == 1


def test_fuse_drops_graphs_and_the_recapture_matches_the_fused_eager():
    model = _model(fuse=False)
    xa, xb = _probes()
    model.forward(xa, cuda_graph=True)
    model.fuse()
    assert model.graph_info()["graphs"] == [] and "fused" in model.graph_info()["invalidations"][-1]["reason"]
    assert _eq(model.forward(xb, cuda_graph=True), model.eager_forward(xb))


def test_in_place_weight_update_keeps_the_graph_and_is_reflected():
    model = _model()
    xa, _ = _probes()
    before = model.forward(xa, cuda_graph=True)
    new = {k: (v * 1.5 if v.is_floating_point() else v) for k, v in model.net.state_dict().items()}
    model.load_weights(new)
    after = model.forward(xa, cuda_graph=True)
    info = model.graph_info()
    assert info["policy"]["captures"] == 1 and info["invalidation_count"] == 0
    assert _eq(after, model.eager_forward(xa)) and not _eq(after, before)


def test_reallocated_parameters_are_detected_and_recaptured():
    model = _model()
    xa, _ = _probes()
    model.forward(xa, cuda_graph=True)
    new = {k: v.clone() * 0.5 for k, v in model.net.state_dict().items()}
    model.net.load_state_dict(new, assign=True)  # new tensors at new addresses
    out = model.forward(xa, cuda_graph=True)
    info = model.graph_info()
    assert info["invalidation_count"] == 1 and info["policy"]["captures"] == 2
    assert _eq(out, model.eager_forward(xa))


# --------------------------------------------------------------------------- cache, threads, loader
def test_lru_eviction_with_a_small_cache(monkeypatch, caplog):
    monkeypatch.setenv("LIBREYOLO_GRAPH_CACHE_SIZE", "2")
    model = _model()
    with caplog.at_level(logging.DEBUG, logger="libreyolo.graphs.runner"):
        for s in (32, 64, 32, 96, 128):
            x = probe_batch("uniform", (1, 3, s, s), device="cuda")
            assert _eq(model.forward(x, cuda_graph=True), model.eager_forward(x))
    info = model.graph_info()
    assert [g["shape"][-1] for g in info["graphs"]] == [96, 128]
    assert info["policy"]["evictions"] == 2 and info["policy"]["captures"] == 4
    assert len([r for r in caplog.records if r.levelno == logging.WARNING and "evicted" in r.getMessage()]) == 1


@pytest.mark.parametrize("own_streams", [False, True], ids=["default-stream", "own-streams"])
def test_two_threads_on_one_model_get_their_own_correct_results(own_streams):
    model = _model()
    inputs = [probe_batch("uniform", (2, 3, 64, 64), device="cuda", seed=s) for s in range(2)]
    refs = [model.eager_forward(x) for x in inputs]
    model.forward(inputs[0], cuda_graph=True)
    failures: list[str] = []
    barrier = threading.Barrier(2)

    def worker(i: int) -> None:
        stream = torch.cuda.Stream() if own_streams else torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            stream.wait_stream(torch.cuda.default_stream())
            barrier.wait()
            for n in range(100):
                out = model.forward(inputs[i], cuda_graph=True)
                if not _eq(out, refs[i]):
                    failures.append(f"thread {i} iteration {n}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:5]
    assert model.graph_info()["graphs"][0]["replays"] == 201


class _VaryingImages(torch.utils.data.Dataset):
    """Items whose size changes every batch of 4, so pinned host buffers keep being allocated."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> torch.Tensor:
        s = 32 * (1 + (i // 4) % 4)
        return torch.rand(3, s, s, generator=torch.Generator().manual_seed(i))


def test_capture_while_a_pinning_dataloader_runs():
    model = _model()
    loader = torch.utils.data.DataLoader(_VaryingImages(), batch_size=4, num_workers=4, pin_memory=True)
    n = 0
    for batch in loader:
        x = batch.to("cuda", non_blocking=True)
        model.release_graphs()  # capture again every batch while the pin-memory thread allocates
        assert _eq(model.forward(x, cuda_graph=True), model.eager_forward(x))
        n += 1
    assert n == 24 and model.graph_info()["policy"]["captures"] == 24


# --------------------------------------------------------------------------- seams and failures
def test_seamed_family_replays_captured_stages_and_equals_eager():
    model = _model(SmallSeamed)
    xa, xb = _probes()
    for x in (xa, xb):
        assert _eq(model.forward(x, cuda_graph=True), model.eager_forward(x))
    stages = model.graph_info()["graphs"][0]["stages"]
    assert [(s["name"], s["captured"]) for s in stages] == [("stem", True), ("rescale", False), ("rest", True)]


_FAILING_CAPTURE = """
import torch
from torch import nn
from libreyolo.errors import GraphCaptureError
from libreyolo.model import Model
from libreyolo.models._base.family import Family

class N(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        y = self.conv(x)
        return y * float(y.sum())  # host sync: cannot be captured

class Syncing(Family):
    FAMILY = "syncing"; SIZES = ("n",); SUPPORTS_CUDA_GRAPH = True
    @classmethod
    def build_net(cls, *, size, nc, task):
        return N()

m = Model(Syncing(size="n"))
m.to("cuda")
try:
    m.forward(torch.rand(1, 3, 32, 32, device="cuda"), cuda_graph=True)
except GraphCaptureError as e:
    print("GraphCaptureError:", str(e)[:200])
else:
    print("NO ERROR")
"""


def test_a_capture_that_cannot_work_fails_loudly():
    # in a subprocess: a failed capture may leave the CUDA context unusable for later tests
    r = subprocess.run([sys.executable, "-c", _FAILING_CAPTURE], capture_output=True, text=True, timeout=300,
                       cwd=str(Path(__file__).resolve().parents[2]))
    assert "GraphCaptureError: capturing syncing" in r.stdout, (r.stdout, r.stderr[-2000:])


# --------------------------------------------------------------------------- the benchmark harness
def test_run_benchmark_measures_every_arm_on_gpu(tmp_path):
    from libreyolo.bench import run_benchmark

    r = run_benchmark(model=_model(), imgsz=64, batch=[1, 2], half=True, device="cuda", warmup=2, iters=5,
                      e2e_iters=2, compile=False, out=tmp_path, show=False)
    for run in r["runs"]:
        net, d = run["network"], run["derived"]
        assert "error" not in net["graph"], net["graph"]
        assert net["eager"]["kernel_count"] > 0 and net["eager"]["kernel_sum_ms"] > 0
        assert net["graph"]["median_ms"] > 0 and net["graph"]["capture_ms"] > 0
        assert net["eager"]["peak_bytes"] > 0 and net["graph"]["peak_reserved_bytes"] > 0
        assert d["network_speedup"] is not None and d["memory_ratio"] is not None
        assert "error" not in run["end_to_end"]["eager"] and "error" not in run["end_to_end"]["graph"]
        assert d["e2e_speedup"] is not None
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_run_benchmark_compile_arm_is_timed_or_reports_its_error():
    from libreyolo.bench import run_benchmark

    r = run_benchmark(model=_model(), imgsz=64, batch=1, half=True, device="cuda", warmup=2, iters=5,
                      end_to_end=False, compile=True, show=False)
    arm = r["runs"][0]["network"]["compile"]
    assert ("median_ms" in arm and arm["compile_s"] > 0) or arm["error"]


def test_run_benchmark_records_a_refused_graph_arm_for_an_unflagged_family():
    from libreyolo.bench import run_benchmark

    r = run_benchmark(model=_model(SmallUnflagged), imgsz=64, batch=1, device="cuda", warmup=1, iters=2,
                      end_to_end=False, compile=False, show=False)
    assert r["runs"][0]["network"]["graph"]["error"].startswith("refused")


# --------------------------------------------------------------------------- flagged families
FLAGGED = [(n, s) for n, c in sorted(families().items()) if c.SUPPORTS_CUDA_GRAPH for s in c.SIZES]


# Input sides where 320 is not a valid input: RF-DETR's windowed DINOv2 (base: 4x4 windows of
# 14-pixel patches) needs multiples of 56; 448 is the side its matrix rows use.
PROBE_SIDE = {"rf_detr": 448}


@pytest.mark.parametrize(("name", "size"), FLAGGED)
def test_flagged_family_keeps_bitwise_parity(name, size):
    cls = families()[name]
    model = build_probe_model(cls, size=size, task=cls.TASKS[0], device="cuda", seed=0)
    side = PROBE_SIDE.get(name, 320)
    row = check_parity(model, shape=(1, 3, side, side), amp_dtype=torch.float16)
    assert row["result"] == "pass", row


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_one_kernel_normalise_is_the_cast_then_divide_on_cuda(dtype):
    """Preprocessing's single division kernel (float32 quotient rounded once to ``dtype``) gives
    the bits of the cast-then-divide it replaced, on the device where predict runs it."""
    from libreyolo.tasks.detect.preprocess import normalized

    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(0)
    u8 = torch.randint(0, 256, (2, 480, 640, 3), dtype=torch.uint8, device=dev, generator=g).permute(0, 3, 1, 2)
    every = torch.arange(256, dtype=torch.uint8, device=dev).view(1, 1, 16, 16).expand(1, 3, 16, 16)
    resized = torch.rand(1, 3, 33, 47, device=dev, generator=g).mul_(255).round_()
    for fmt in (torch.contiguous_format, torch.channels_last):
        for x in (u8, every, resized):
            want = x.clone().to(dtype, memory_format=fmt).div_(255.0)
            got = normalized(x, dtype=dtype, memory_format=fmt)
            assert got.is_contiguous(memory_format=fmt) and torch.equal(got, want)


@pytest.mark.parametrize("chunks", [2, 3])
def test_a_stage_captured_in_chunks_replays_the_bits_of_eager_and_of_one_graph(chunks):
    """``GRAPH_CHUNKS``: the prepared half yolo9-t (channels-last, fused epilogue) captured as
    several graphs replays bit for bit what its eager forward and its one-graph replay return,
    network + decode, on two inputs, and the hooks that placed the cuts are gone afterwards."""
    from libreyolo.models._base.inference import PrepSpec, build_twin

    base = build_probe_model(families()["yolo9"], size="t", task="detect", device="cuda", seed=0, fuse=False)
    twin = build_twin(base, PrepSpec(fuse=True, dtype=torch.float16, channels_last=True, device="cuda:0"))
    xa, xb = (x.to(torch.float16, memory_format=torch.channels_last) for x in _probes((1, 3, 480, 640)))
    one, split = PredictGraphs(twin, force=True), PredictGraphs(twin, force=True, chunks=chunks)
    for x in (xa, xb, xa):
        ref = twin.eager_forward(x, decoded=True)
        got = split.run(x, policy=True, decoded=True)
        assert _eq(got, ref) and _eq(got, one.run(x, policy=True, decoded=True))
    stage = split.info()["graphs"][0]["stages"][0]
    assert stage["graphs"] == chunks, stage
    assert not any(m._forward_hooks for m in twin.net.modules())


@pytest.mark.parametrize("half", [False, True], ids=["fp32", "fp16"])
def test_graph_predict_with_the_pixel_prologue_returns_the_eager_boxes(half):
    """On the graph path the BGR swap / divide / cast / layout step runs inside the graph and a
    replay's candidates go straight to the host: predict's boxes are still those of
    ``cuda_graph=False``, bit for bit, for a photo that needs no resize, one that is resized and
    padded, and a batch; the graph is keyed on the prologue."""
    import cv2

    from libreyolo import SAMPLE_IMAGE, LibreYOLO

    model = LibreYOLO("LibreYOLO9t.pt", device="cuda")
    bgr = cv2.imread(str(SAMPLE_IMAGE))
    photos = [cv2.resize(bgr, (640, 480)), cv2.resize(bgr, (517, 333))]
    for src, kw in ((photos[0], {}), (photos[1], {"imgsz": 320}), ([photos[0], photos[0]], {"batch": 2})):
        want = model.predict(src, half=half, **kw)
        for _ in range(3):  # capture, then replays
            got = model.predict(src, half=half, cuda_graph=True, **kw)
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                assert g.boxes.data.device.type == "cpu" and torch.equal(g.boxes.data, w.boxes.data)
    assert sum(len(r.boxes) for r in want) > 0
    graphs = model.prepared(half=half).graphs.info()["graphs"]
    assert graphs and all(g["prologue"].startswith("u8/255:") and g["input_dtype"] in ("uint8", "float32")
                          for g in graphs), graphs
    assert any(g["replays"] >= 2 for g in graphs)


def test_a_replay_to_the_host_equals_the_device_copy():
    model = _model()
    x = _probes((1, 3, 64, 64))[0]
    runner = PredictGraphs(model.family)
    dev = runner.run(x, policy=True)
    host = runner.run(x, policy=True, host=True)
    assert all(t.device.type == "cpu" and t.is_pinned() for t in host)
    assert _eq(tuple(t.cpu() for t in dev), host)


FLAGGED_FIRST = sorted({n: s for n, s in reversed(FLAGGED)}.items())


@pytest.mark.parametrize(("name", "size"), FLAGGED_FIRST)
def test_flagged_family_replays_the_pixel_prologue_bit_for_bit(name, size):
    """Every flagged family whose task letterboxes: the graph predict captures (pixel
    normalisation + network, + decode where the family has one) replays the eager forward of the
    normalised pixels bit for bit, the half twin where its weights are cast (else fp32), on
    uint8 HWC pixels (channels-last strides) with the BGR swap."""
    from libreyolo.models._base.inference import channels_last, input_dtype
    from libreyolo.tasks import task_of
    from libreyolo.tasks.base import LetterboxTask
    from libreyolo.tasks.detect.preprocess import Normalize

    cls = families()[name]
    model = Model(build_probe_model(cls, size=size, task=cls.TASKS[0], device="cuda", seed=0))
    if not isinstance(task_of(model), LetterboxTask):
        pytest.skip(f"{name}: task {model.task!r} has its own preprocessing (no prologue)")
    twin = model.prepared(half=bool(cls.HALF_CAST))
    step = Normalize(dtype=input_dtype(twin), channels_last=channels_last(twin), bgr=True)
    side = PROBE_SIDE.get(name, 320)
    g = torch.Generator(device="cuda").manual_seed(3)
    decoded = bool(twin.DECODE_TOPK)
    for seed in (3, 4):
        g.manual_seed(seed)
        px = torch.randint(0, 256, (1, side, side, 3), dtype=torch.uint8, device="cuda", generator=g).permute(0, 3, 1, 2)
        want = twin.eager_forward(step(px), decoded=decoded)
        got = twin.forward(px, cuda_graph=True, decoded=decoded, prologue=step)
        assert _eq(got, want), (name, size, seed)
    info = twin.graphs.info()
    assert [g["prologue"] for g in info["graphs"]] == [step.name] and info["policy"]["replays"] == 2, info
