"""PicoDet on CUDA: the SimOTA assignment and the criterion equal their CPU results, AMP training
steps stay finite and fit, and a graph replay of network + decode is bit-identical to eager.

Run on a GPU machine: ``python -m pytest tests/gpu/test_picodet_gpu.py -q``.
"""

from __future__ import annotations

import pytest
import torch

from libreyolo.model import Model
from libreyolo.models.picodet.family import PicoDet
from libreyolo.models.picodet.postprocess import anchor_grid, decode_boxes
from libreyolo.ops.anchors import flatten_levels
from libreyolo.ops.targets import build_targets

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


def _model(size: str, nc: int) -> Model:
    torch.manual_seed(0)
    model = Model(PicoDet(size=size, nc=nc))
    with torch.no_grad():  # scores of 0.5: the box-loss weights (the scores) are not ~0
        for conv in model.net.head.pred:
            conv.bias[:nc].zero_()
    return model


def test_assignment_on_cuda_equals_cpu() -> None:
    model = _model("s", 5)
    net = model.net.cuda().train()
    batch = _batch(4, 320, 5, CUDA)
    with torch.no_grad():
        preds = net(batch["img"])
    crit = model.build_criterion()
    out = {}
    for dev in ("cuda", "cpu"):
        feats = [p.to(dev).float() for p in preds]
        flat = flatten_levels(feats)
        pts, st = anchor_grid([tuple(f.shape[2:]) for f in feats], (8, 16, 32, 64), device=dev)
        boxes = decode_boxes(flat[:, 5:], pts, st, bins=8)
        targets = build_targets({k: v.to(dev) for k, v in batch.items()}, batch_size=4, img_hw=(320, 320),
                                device=torch.device(dev))
        out[dev] = crit.assigner(flat[:, :5].transpose(1, 2).sigmoid(), boxes, pts * st, st[:, 0], *targets)
    fg = out["cpu"].fg_mask
    assert int(fg.sum()) > 10
    assert torch.equal(out["cuda"].fg_mask.cpu(), fg)
    assert torch.equal(out["cuda"].gt_idx.cpu()[fg], out["cpu"].gt_idx[fg])
    torch.testing.assert_close(out["cuda"].ious.cpu(), out["cpu"].ious, rtol=1e-5, atol=1e-6)


def test_criterion_on_cuda_matches_cpu() -> None:
    model = _model("m", 5)
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
    model = _model(size, 6)
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


@pytest.mark.parametrize("size", ["s", "m"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_net_and_decode_graph_replay_is_bitwise_eager(size: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = Model(PicoDet(size=size, nc=80))
    fam = model.family
    net = model.net.cuda().eval()
    net.fuse()

    def step(x: torch.Tensor) -> torch.Tensor:
        return fam.decode(net(x))

    static = torch.zeros(1, 3, 416, 416, device="cuda")  # 416 / 64 is not whole: a ceil level
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
    probes = (torch.rand(1, 3, 416, 416, device="cuda", generator=gen),
              torch.linspace(0, 1, 416 * 416 * 3, device="cuda").view(1, 3, 416, 416))
    for x in probes:
        static.copy_(x)
        g.replay()
        replayed = out.clone()
        with torch.no_grad(), amp:
            eager = step(x)
        assert torch.equal(replayed, eager)
