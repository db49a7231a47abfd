"""GPU tests of the ViT-backbone DETRs on the LW-DETR decoder (LW-DETR, RF-DETR): prediction
capture of their seam is bitwise (SPEC G-4, G-9), the ``ms_deform_attn`` provider the registry picks
on CUDA is reported (also for LW-DETR large's two-level layout), and the training seam's step zero
matches eager (T-6). Every size's prediction capture is checked. Skipped without CUDA.
Not run yet (benchmarks/manifest.yaml ``gpu_tests_lw_detr``, ``gpu_tests_rf_detr``): the families'
flags stay False until these and the parity rows pass.

Expectation for the training test: RF-DETR's decoder has dropout (p=0.1) but the decoder is the
eager stage; the captured trunk (ViT + projector) has none in either family (drop path 0), so it
draws no random numbers. LW-DETR's projector has BatchNorm, whose running statistics the captured
trunk updates in place (as the YOLO families' trunks do).
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda

IMGSZ, BATCH = 320, 2  # a multiple of 64 (LW-DETR: 16 px patches x 4 windows) and of 32 (RF-DETR)
IMGSZ_RF = 448  # a multiple of 32 and of 56 (RF-DETR base: 14 px patches x 4 windows)

# (family, its class, its smallest size, its query count)
FAMILIES = [("lw_detr", "LWDETR", "tiny", 100), ("rf_detr", "RFDETR", "nano", 300)]


@pytest.fixture(autouse=True)
def _portable(monkeypatch: pytest.MonkeyPatch):
    from libreyolo.kernels import registry

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")  # capture safety of the portable path (K-12)
    registry.clear_cache()
    yield
    registry.clear_cache()


def _family(name: str) -> type:
    import importlib

    cls = {f: c for f, c, _, _ in FAMILIES}[name]
    return getattr(importlib.import_module(f"libreyolo.models.{name}.family"), cls)


@pytest.mark.parametrize("family,size", [("lw_detr", "tiny"), ("lw_detr", "small"), ("lw_detr", "medium"),
                                         ("lw_detr", "large"), ("lw_detr", "xlarge"), ("rf_detr", "nano"),
                                         ("rf_detr", "small"), ("rf_detr", "medium"), ("rf_detr", "large"),
                                         ("rf_detr", "base")])
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_predict_capture_is_bitwise(family: str, size: str, amp: torch.dtype | None) -> None:
    from benchmarks.bench_rtdetr import _probes
    from libreyolo.graphs.runner import PredictGraphs

    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = _family(family)(size=size, nc=80).to(dev)
    graphs = PredictGraphs(model, force=True)
    for x in _probes(BATCH, IMGSZ_RF if family == "rf_detr" else IMGSZ, dev):  # two distributions: a stale copy-in
        eager = model.eager_forward(x, amp_dtype=amp)
        graph = graphs.run(x, policy=True, amp_dtype=amp)
        assert all(torch.equal(a, b) for a, b in zip(eager, graph, strict=True))
    info = graphs.info()["graphs"][0]
    assert [s["captured"] for s in info["stages"]] == [True, True] and info["replays"] == 2
    graphs.release()


@pytest.mark.parametrize("family,queries", [(f, q) for f, _, _, q in FAMILIES])
def test_provider_on_cuda_is_reported(family: str, queries: int, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Which ``ms_deform_attn`` provider runs this family on CUDA by default (fp32): one stride-16
    level, 16 heads of 16 channels, 2 points (Triton unless the pinned Hub kernel loads)."""
    from libreyolo.kernels import registry
    from libreyolo.kernels.attention import MS_DEFORM_ATTN
    from libreyolo.layers.msda import level_layout

    monkeypatch.delenv("LIBREYOLO_KERNELS")
    registry.clear_cache()
    dev = torch.device("cuda", 0)
    layout = level_layout([(IMGSZ // 16, IMGSZ // 16)], device=dev)
    value = torch.zeros(BATCH, layout.total, 16, 16, device=dev)
    loc = torch.zeros(BATCH, queries, 16, 1, 2, 2, device=dev)
    w = torch.zeros(BATCH, queries, 16, 1, 2, device=dev)
    name = registry.resolve_name(MS_DEFORM_ATTN, value, layout.spatial_shapes, layout.level_start_index, loc, w)
    print(f"{family} ms_deform_attn provider on CUDA fp32: {name}")
    assert name in {"triton", "hub"}


def test_lw_detr_two_level_layout_provider_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """LW-DETR large / xlarge: P3 + P5 levels, 24 heads of 16 channels, 4 points per level, 300 queries."""
    from libreyolo.kernels import registry
    from libreyolo.kernels.attention import MS_DEFORM_ATTN
    from libreyolo.layers.msda import level_layout

    monkeypatch.delenv("LIBREYOLO_KERNELS")
    registry.clear_cache()
    dev = torch.device("cuda", 0)
    layout = level_layout([(IMGSZ // 8, IMGSZ // 8), (IMGSZ // 32, IMGSZ // 32)], device=dev)
    value = torch.zeros(BATCH, layout.total, 24, 16, device=dev)
    loc = torch.zeros(BATCH, 300, 24, 2, 4, 2, device=dev)
    w = torch.zeros(BATCH, 300, 24, 2, 4, device=dev)
    name = registry.resolve_name(MS_DEFORM_ATTN, value, layout.spatial_shapes, layout.level_start_index, loc, w)
    print(f"lw_detr large ms_deform_attn provider on CUDA fp32: {name}")
    assert name in {"triton", "hub"}


@pytest.mark.parametrize("family,size", [(f, s) for f, _, s, _ in FAMILIES])
def test_train_seam_step_zero_matches_eager(family: str, size: str) -> None:
    from seam_checks import assert_seam_step_zero_matches_eager

    seam = assert_seam_step_zero_matches_eager(_family(family), size)
    assert seam.tg.info()["graphs"][0]["replays"] >= 2
