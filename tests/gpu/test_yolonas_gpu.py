"""YOLO-NAS on CUDA: the criterion equals its CPU result, AMP training steps stay finite and fit,
fused equals unfused, and a graph replay of network + decode is bit-identical to eager.

Run on a GPU machine: ``python -m pytest tests/gpu/test_yolonas_gpu.py -q``.
"""

from __future__ import annotations

import pytest
import torch

from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.model import Model
from libreyolo.models.yolonas.family import YOLONAS

pytestmark = pytest.mark.cuda

CUDA = torch.device("cuda")


def _batch(b: int, imgsz: int, nc: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    idx, cls, boxes = [], [], []
    for i in range(b):
        n = 0 if i == b - 1 else int(torch.randint(1, 12, (1,), generator=g))  # last image: no boxes
        wh = torch.rand(n, 2, generator=g) * 0.4 + 0.03
        c = torch.rand(n, 2, generator=g) * (1 - wh) + wh / 2
        idx.append(torch.full((n,), i))
        cls.append(torch.randint(0, nc, (n,), generator=g))
        boxes.append(torch.cat((c, wh), 1))
    return {"img": torch.rand(b, 3, imgsz, imgsz, generator=g).to(device),
            "batch_idx": torch.cat(idx).to(device), "cls": torch.cat(cls).to(device),
            "bboxes": torch.cat(boxes).to(device)}


def test_criterion_on_cuda_matches_cpu() -> None:
    torch.manual_seed(0)
    model = Model(YOLONAS(size="s", nc=5))
    net = model.net.cuda().train()
    batch = _batch(4, 320, 5, CUDA)
    with torch.no_grad():
        preds = net(batch["img"])
    crit = model.build_criterion()
    loss_g, items_g = crit(preds, batch)
    loss_c, items_c = crit([p.cpu() for p in preds], {k: v.cpu() for k, v in batch.items()})
    torch.testing.assert_close(items_g.cpu(), items_c, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss_g.cpu(), loss_c, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", ["s", "m"])
def test_amp_train_steps_finite_and_decreasing(size: str) -> None:
    torch.manual_seed(0)
    model = Model(YOLONAS(size=size, nc=6))
    net = model.net.cuda().train()
    crit = model.build_criterion()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    batch = _batch(8, 416, 6, CUDA)
    taken, skipped = [], 0
    for _ in range(30):
        with torch.autocast("cuda", dtype=torch.float16):
            preds = net(batch["img"])
        loss, items = crit(preds, batch)
        assert torch.isfinite(loss) and torch.isfinite(items).all()
        opt.zero_grad()
        scaler.scale(loss).backward()
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        if scaler.get_scale() < before:  # an overflowing step at this scale was skipped
            skipped += 1
        else:
            taken.append(float(loss.detach()))
    assert skipped <= 10, (skipped, taken)
    assert sum(taken[-5:]) / 5 < 0.8 * taken[0], taken


@pytest.mark.parametrize("size", ["s", "m", "l"])
def test_fused_equals_unfused_on_cuda(size: str) -> None:
    torch.manual_seed(0)
    net = Model(YOLONAS(size=size, nc=80)).net.cuda()
    randomise_norm_stats(net, seed=0)
    net.eval()
    x = torch.rand(2, 3, 640, 640, device="cuda")
    with torch.no_grad():
        ref = [o.clone() for o in net(x)]
        got = net.fuse()(x)
    for r, g in zip(ref, got, strict=True):
        assert (r - g).abs().max().item() <= 1e-3 * max(1.0, r.abs().max().item())


@pytest.mark.parametrize("size", ["s", "m"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_net_and_decode_graph_replay_is_bitwise_eager(size: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = Model(YOLONAS(size=size, nc=80))
    fam = model.family
    net = model.net.cuda().eval()
    net.fuse()

    def step(x: torch.Tensor) -> torch.Tensor:
        return fam.decode(net(x))

    static = torch.zeros(1, 3, 640, 640, device="cuda")
    amp = torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32, cache_enabled=False)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s), amp:
        for _ in range(3):
            step(static)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g, capture_error_mode="thread_local"), amp:
        out = step(static)
    gen = torch.Generator(device="cuda").manual_seed(0)
    probes = (torch.rand(1, 3, 640, 640, device="cuda", generator=gen),
              torch.linspace(0, 1, 640 * 640 * 3, device="cuda").view(1, 3, 640, 640))
    for x in probes:
        static.copy_(x)
        g.replay()
        replayed = out.clone()
        with torch.no_grad(), amp:
            eager = step(x)
        assert torch.equal(replayed, eager)
