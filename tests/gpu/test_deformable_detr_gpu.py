"""GPU tests of the deformable-encoder DETRs (Deformable DETR, DINO): prediction capture of their
seam is bitwise (SPEC G-4, G-9), the ``ms_deform_attn`` provider the registry picks on CUDA is
reported, and the training seam's step zero matches eager (T-6). Skipped without CUDA. Run on the
H200 at 84e948d: all pass (benchmarks/manifest.yaml ``gpu_tests_deformable_detr``).

The training test seeds the trunk before every arm's forward (``bench_rtdetr.TrainArm.step``):
Deformable DETR's encoder has dropout (p=0.1, the paper's), and a captured trunk draws its masks
from the same generator state as eager only when both start from the same state. DINO has no
dropout (the reference's 4-scale config); its denoising queries are built in the eager decoder.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda

IMGSZ, BATCH = 320, 2


@pytest.fixture(autouse=True)
def _portable(monkeypatch: pytest.MonkeyPatch):
    from libreyolo.kernels import registry

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")  # capture safety of the portable path (K-12)
    registry.clear_cache()
    yield
    registry.clear_cache()


# (family, its class, its query count): the two share the deformable encoder/decoder (_detr/deformable.py)
FAMILIES = [("deformable_detr", "DeformableDETR", 300), ("dino_detr", "DINODETR", 900)]


def _family(name: str) -> type:
    import importlib

    cls = dict((f, c) for f, c, _ in FAMILIES)[name]
    return getattr(importlib.import_module(f"libreyolo.models.{name}.family"), cls)


@pytest.mark.parametrize("family", [f for f, _, _ in FAMILIES])
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_predict_capture_is_bitwise(family: str, amp: torch.dtype | None) -> None:
    from benchmarks.bench_rtdetr import _probes
    from libreyolo.graphs.runner import PredictGraphs

    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = _family(family)(size="r50", nc=80).to(dev)
    graphs = PredictGraphs(model, force=True)
    for x in _probes(BATCH, IMGSZ, dev):  # two different distributions: catches a stale copy-in
        eager = model.eager_forward(x, amp_dtype=amp)
        graph = graphs.run(x, policy=True, amp_dtype=amp)
        assert all(torch.equal(a, b) for a, b in zip(eager, graph, strict=True))
    info = graphs.info()["graphs"][0]
    assert [s["captured"] for s in info["stages"]] == [True, True] and info["replays"] == 2
    graphs.release()


@pytest.mark.parametrize("family,queries", [(f, q) for f, _, q in FAMILIES])
def test_provider_on_cuda_is_reported(family: str, queries: int, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Which ``ms_deform_attn`` provider runs this family on CUDA by default (fp32): Triton unless
    the ``kernels`` package and the pinned Hub kernel load (no network on the lent machine)."""
    from libreyolo.kernels import registry
    from libreyolo.kernels.attention import MS_DEFORM_ATTN
    from libreyolo.layers.msda import level_layout

    monkeypatch.delenv("LIBREYOLO_KERNELS")
    registry.clear_cache()
    dev = torch.device("cuda", 0)
    shapes = [(IMGSZ // s, IMGSZ // s) for s in (8, 16, 32)] + [((IMGSZ // 32 + 1) // 2,) * 2]
    layout = level_layout(shapes, device=dev)
    value = torch.zeros(BATCH, layout.total, 8, 32, device=dev)
    loc = torch.zeros(BATCH, queries, 8, 4, 4, 2, device=dev)
    w = torch.zeros(BATCH, queries, 8, 4, 4, device=dev)
    name = registry.resolve_name(MS_DEFORM_ATTN, value, layout.spatial_shapes, layout.level_start_index, loc, w)
    print(f"{family} ms_deform_attn provider on CUDA fp32: {name}")
    assert name in {"triton", "hub"}


@pytest.mark.parametrize("family", [f for f, _, _ in FAMILIES])
def test_train_seam_step_zero_matches_eager(family: str) -> None:
    from seam_checks import assert_seam_step_zero_matches_eager

    seam = assert_seam_step_zero_matches_eager(_family(family), "r50")
    assert seam.tg.info()["graphs"][0]["replays"] >= 2
