"""YOLOX on CUDA: criterion equals its CPU result, AMP training step, graph replay of the net.

Run on a GPU machine: ``python -m pytest tests/gpu/test_yolox_gpu.py -q``.
"""

from __future__ import annotations

import pytest
import torch

from libreyolo.model import Model
from libreyolo.models.yolox.family import YOLOX
from libreyolo.models.yolox.loss import simota_assign_batch
from libreyolo.models.yolox.postprocess import decode_boxes, flatten_outputs, make_grid

pytestmark = pytest.mark.cuda


def _batch(b: int, imgsz: int, nc: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    idx, cls, boxes = [], [], []
    for i in range(b):
        n = 0 if i == b - 1 else int(torch.randint(1, 9, (1,), generator=g))  # last image: no boxes
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
    model = Model(YOLOX(size="tiny", nc=5))
    net = model.net.cuda().train()
    batch = _batch(4, 320, 5, torch.device("cuda"))
    with torch.no_grad():
        preds = net(batch["img"])
    crit = model.build_criterion()
    crit.use_l1 = True
    loss_g, items_g = crit(preds, batch)
    cpu_batch = {k: v.cpu() for k, v in batch.items()}
    loss_c, items_c = crit([p.cpu() for p in preds], cpu_batch)
    torch.testing.assert_close(items_g.cpu(), items_c, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss_g.cpu(), loss_c, rtol=1e-4, atol=1e-5)


def test_assignment_on_cuda_equals_cpu() -> None:
    torch.manual_seed(0)
    model = Model(YOLOX(size="nano", nc=3))
    net = model.net.cuda().train()
    batch = _batch(3, 256, 3, torch.device("cuda"))
    with torch.no_grad():
        preds = net(batch["img"])
    from libreyolo.models.yolox.loss import pad_targets

    out = {}
    for dev in ("cuda", "cpu"):
        feats = [p.to(dev) for p in preds]
        x = flatten_outputs(feats)
        grid, stride = make_grid([tuple(f.shape[2:]) for f in feats], (8, 16, 32), device=dev)
        gcls, gbox, gmask = pad_targets({k: v.to(dev) for k, v in batch.items()}, batch_size=3,
                                        img_hw=(256, 256), device=torch.device(dev))
        out[dev] = simota_assign_batch(pred_boxes=decode_boxes(x[..., :4], grid, stride), cls_logits=x[..., 5:],
                                       obj_logits=x[..., 4], gt_boxes=gbox, gt_cls=gcls, gt_mask=gmask,
                                       anchor_centers=(grid + 0.5) * stride, anchor_strides=stride[:, 0])
    assert torch.equal(out["cuda"].fg_mask.cpu(), out["cpu"].fg_mask)
    fg = out["cpu"].fg_mask
    assert torch.equal(out["cuda"].matched_gt.cpu()[fg], out["cpu"].matched_gt[fg])


def test_amp_train_steps_finite_and_l1_switch() -> None:
    torch.manual_seed(0)
    model = Model(YOLOX(size="s", nc=6))
    net = model.net.cuda().train()
    crit = model.build_criterion()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    batch = _batch(8, 640, 6, torch.device("cuda"))
    for step in range(6):
        if step == 3:
            model.on_close_mosaic(crit)
        with torch.autocast("cuda", dtype=torch.float16):
            preds = net(batch["img"])
        loss, items = crit(preds, batch)
        assert torch.isfinite(loss) and torch.isfinite(items).all()
        assert (items[3] > 0) == (step >= 3)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


@pytest.mark.parametrize("size", ["nano", "tiny"])
def test_net_graph_replay_is_bitwise_eager(size: str) -> None:
    torch.manual_seed(0)
    model = Model(YOLOX(size=size, nc=80))
    net = model.net.cuda().eval()
    net.fuse()
    static = torch.zeros(1, 3, 416, 416, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(3):
            net(static)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g, capture_error_mode="thread_local"):
        outs = net(static)
    gen = torch.Generator(device="cuda").manual_seed(0)
    probes = (torch.rand(1, 3, 416, 416, device="cuda", generator=gen),
              torch.linspace(0, 1, 416 * 416 * 3, device="cuda").view(1, 3, 416, 416))
    for x in probes:
        static.copy_(x)
        g.replay()
        replayed = [o.clone() for o in outs]
        with torch.no_grad():
            eager = net(x)
        for a, b in zip(replayed, eager, strict=True):
            assert torch.equal(a, b)
