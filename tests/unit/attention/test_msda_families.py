"""Every deformable family really runs its ``ms_deform_attn`` through the kernel slot.

Upstream once shipped a Hub provider that the slot consulted behind a condition RF-DETR never met,
so the compiled kernel never ran in any forward. Here a fake provider is registered in the slot
(and selected by name, ``LIBREYOLO_KERNELS=<name>``), and each wired family's published size runs
an eager forward and a training step (forward + criterion + backward) on a tiny input. The test
fails unless the provider was called exactly (deformable attention modules per forward) times:
decoder layers x one cross-attention each, plus the encoder layers for Deformable DETR. Layouts the
slot must not take (different point counts per level, SPEC K-8) expect zero calls and still work.
"""

from __future__ import annotations

import pytest
import torch

from libreyolo.kernels import registry
from libreyolo.kernels.attention import MS_DEFORM_ATTN
from libreyolo.kernels.attention.msda_ref import ms_deform_attn_portable
from libreyolo.model import Model
from libreyolo.registry import get_family

FAKE = "fake-msda-counter"

# (family, size) -> provider calls per forward, from the published architecture:
#   rtdetr / rtdetrv2 r18: 3 decoder layers, 4 points on each of 3 levels;
#   dfine / deim n: 3 decoder layers, 6 points on each of 2 levels;
#   dfine s: points (3, 6, 3) differ per level -> the portable path (K-8), no call;
#   deimv2 atto: points (4, 2), rtdetrv4 s: points (3, 6, 3) -> the portable path, no call;
#   deformable_detr r50, r50refine and r50twostage: 6 encoder + 6 decoder layers, 4 points on each of 4 levels
#   (r50refine's decoder layers 2-6 sample around 4-d reference boxes: still the standard layout);
#   dino_detr r50: 6 encoder + 6 decoder layers, 4 points on each of 4 levels (the training step adds
#   denoising queries: more queries per call, not more calls);
#   lw_detr tiny / small: 3 decoder layers, 2 points on 1 level (no deformable encoder: a ViT);
#   lw_detr large: 3 decoder layers, 4 points on each of 2 levels (the P3 + P5 projector);
#   rf_detr nano / small / medium: 2 / 3 / 4 decoder layers, 2 points on 1 level (the training step's
#   13 query groups are more queries per call, not more calls).
EXPECTED = {
    ("rtdetr", "r18"): 3,
    ("rtdetrv2", "r18"): 3,
    ("dfine", "n"): 3,
    ("dfine", "s"): 0,
    ("deim", "n"): 3,
    ("deimv2", "atto"): 0,
    ("rtdetrv4", "s"): 0,
    ("deformable_detr", "r50"): 12,
    ("deformable_detr", "r50refine"): 12,
    ("deformable_detr", "r50twostage"): 12,
    ("dino_detr", "r50"): 12,
    ("lw_detr", "tiny"): 3,
    ("lw_detr", "small"): 3,
    ("lw_detr", "large"): 3,
    ("rf_detr", "nano"): 2,
    ("rf_detr", "small"): 3,
    ("rf_detr", "medium"): 4,
}


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch):
    calls: list[tuple[int, ...]] = []

    def fake(value, spatial_shapes, level_start_index, loc, weights):
        calls.append(tuple(loc.shape))
        shapes = [tuple(int(v) for v in hw) for hw in spatial_shapes.tolist()]
        return ms_deform_attn_portable(value, shapes, loc, weights)

    monkeypatch.setenv("LIBREYOLO_KERNELS", FAKE)  # only the fake may be chosen
    monkeypatch.delenv("LIBREYOLO_QUANT_KERNELS", raising=False)
    registry.register(MS_DEFORM_ATTN, fake, name=FAKE, predicate=lambda *a, **k: True)
    registry.clear_cache()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield calls
    torch.set_num_threads(n)
    registry.unregister(MS_DEFORM_ATTN, FAKE)
    registry.clear_cache()


def _batch() -> dict[str, torch.Tensor]:
    return dict(img=torch.rand(2, 3, 64, 64), batch_idx=torch.tensor([0, 0, 1]), cls=torch.tensor([0, 2, 1]),
                bboxes=torch.tensor([[0.3, 0.3, 0.3, 0.4], [0.7, 0.6, 0.2, 0.3], [0.5, 0.5, 0.5, 0.5]]))


@pytest.mark.parametrize(("family", "size"), sorted(EXPECTED))
def test_fake_provider_runs_in_eager_forward_and_training_step(counter, family: str, size: str) -> None:
    torch.manual_seed(0)
    model = Model(get_family(family)(size=size, nc=3))
    net = model.net
    want = EXPECTED[(family, size)]
    x = torch.rand(2, 3, 64, 64)

    net.eval()
    with torch.no_grad():
        logits, boxes = net(x)
    assert torch.isfinite(logits).all() and torch.isfinite(boxes).all()
    assert len(counter) == want, f"{family}-{size}: provider called {len(counter)} times, expected {want}"
    assert all(c[0] == 2 and len(c) == 6 for c in counter)  # batch 2, standard (B, Q, H, L, P, 2) layout

    counter.clear()
    net.train()
    batch = _batch()
    loss, _ = model.family.build_criterion()(net(batch["img"]), batch)
    assert len(counter) == want, f"{family}-{size}: training forward called it {len(counter)} times"
    loss.backward()
    grads = [p.grad for name, p in net.named_parameters() if "sampling_offsets" in name and p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)  # gradients flow back through the provider's output


def test_provider_declines_under_tracing(counter, monkeypatch: pytest.MonkeyPatch) -> None:
    """K-8: under tracing / compiling / exporting the layer never consults the slot."""
    model = Model(get_family("rtdetr")(size="r18", nc=3))
    net = model.net.eval()
    for probe in ("is_tracing", "is_compiling", "is_exporting", "is_onnx_exporting"):
        with monkeypatch.context() as m:
            m.setattr(f"libreyolo.kernels.context.{probe}", lambda: True)
            with torch.no_grad():
                net(torch.rand(1, 3, 64, 64))
        assert counter == [], probe
    with torch.no_grad():
        net(torch.rand(1, 3, 64, 64))
    assert len(counter) == EXPECTED[("rtdetr", "r18")]
