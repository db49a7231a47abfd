"""Where an RTMDet training step spends its time: network forward+backward vs assignment + loss.

For each size and box load: one batch (synthetic boxes, fixed seed) replayed; medians after
warm-up with a synchronised clock of (a) network forward + backward with unit output gradients,
(b) the assigner alone, (c) the whole criterion forward, (d) a full step (forward, criterion,
backward, SGD). Reports the network share of the step, the upper bound on what capturing the
network alone can gain (SPEC A-2).

Usage (GPU): python3 benchmarks/bench_rtmdet_step.py --out $OUT [--sizes t,s] [--batch 8]
CPU smoke test: python3 benchmarks/bench_rtmdet_step.py --out /tmp/b --device cpu \
    --sizes t --imgsz 128 --batch 2 --iters 2 --warmup 1 --boxes 4
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import md_table, stamp, write_result  # noqa: E402
from libreyolo.bench.timing import time_wall  # noqa: E402
from libreyolo.model import Model  # noqa: E402


def synthetic_batch(b: int, imgsz: int, nc: int, n_boxes: int, device: torch.device) -> dict[str, torch.Tensor]:
    """``n_boxes`` boxes per image (normalised cxcywh, 2-50% of the side), the last image empty."""
    g = torch.Generator().manual_seed(0)
    idx, cls, boxes = [], [], []
    for i in range(b):
        n = 0 if (i == b - 1 and b > 1) else n_boxes
        wh = torch.rand(n, 2, generator=g) * 0.48 + 0.02
        c = torch.rand(n, 2, generator=g) * (1 - wh) + wh / 2
        idx.append(torch.full((n,), i))
        cls.append(torch.randint(0, nc, (n,), generator=g))
        boxes.append(torch.cat((c, wh), 1))
    return {"img": torch.rand(b, 3, imgsz, imgsz, generator=g).to(device),
            "batch_idx": torch.cat(idx).to(device), "cls": torch.cat(cls).to(device),
            "bboxes": torch.cat(boxes).to(device)}


def timed(fn: Callable[[], Any], *, iters: int, warmup: int, device: torch.device) -> float:
    """Median milliseconds of ``fn`` after ``warmup`` calls (synchronised clock)."""
    return time_wall(fn, device=device, iters=iters, warmup=warmup)["median_ms"]


def measure(size: str, *, batch: int, imgsz: int, nc: int, n_boxes: int, amp: bool, iters: int, warmup: int,
            device: torch.device) -> dict[str, Any]:
    from libreyolo.models.rtmdet.family import RTMDet
    from libreyolo.models.rtmdet.loss import build_targets
    from libreyolo.models.rtmdet.postprocess import decode_boxes, grid_points
    from libreyolo.ops.anchors import flatten_levels

    torch.manual_seed(0)
    model = Model(RTMDet(size=size, nc=nc))
    net = model.net.to(device).train()
    with torch.no_grad():  # boxes of a few strides, so that the assignment has real work
        for conv in net.head.rtm_reg:
            conv.bias.fill_(0.4 if net.exp_on_reg else 1.5)
    crit = model.build_criterion()
    data = synthetic_batch(batch, imgsz, nc, n_boxes, device)
    use_amp = amp and device.type == "cuda"
    opt = torch.optim.SGD(net.parameters(), lr=1e-6, momentum=0.9)

    def forward() -> list[torch.Tensor]:
        with torch.autocast(device.type, dtype=torch.float16, enabled=use_amp):
            return net(data["img"])

    def net_fwd_bwd() -> None:
        preds = forward()
        torch.autograd.backward(preds, [torch.ones_like(p) for p in preds])

    with torch.no_grad():
        preds = [p.detach() for p in forward()]
    feats = [p.float() for p in preds]
    flat = flatten_levels(feats).transpose(1, 2)
    pts, st = grid_points([tuple(f.shape[2:]) for f in feats], (8, 16, 32), device=device)
    boxes = decode_boxes(flat[..., :4], pts, st, exp_on_reg=net.exp_on_reg)
    gl, gb, gm = build_targets(data, batch_size=batch, img_hw=(imgsz, imgsz), device=device)

    def assign() -> None:
        crit.assigner(flat[..., 4:], boxes, pts, st, gl, gb, gm)

    def criterion() -> None:
        crit(preds, data)

    def full_step() -> None:
        opt.zero_grad(set_to_none=True)
        loss, _ = crit(forward(), data)
        loss.backward()
        opt.step()

    row: dict[str, Any] = {"size": size, "batch": batch, "imgsz": imgsz, "nc": nc, "boxes_per_img": n_boxes,
                           "amp": use_amp}
    row["net_fwd_bwd_ms"] = timed(net_fwd_bwd, iters=iters, warmup=warmup, device=device)
    row["assigner_ms"] = timed(assign, iters=iters, warmup=warmup, device=device)
    row["criterion_fwd_ms"] = timed(criterion, iters=iters, warmup=warmup, device=device)
    row["step_ms"] = timed(full_step, iters=iters, warmup=warmup, device=device)
    row["network_share"] = round(row["net_fwd_bwd_ms"] / row["step_ms"], 3)
    row["assigner_share"] = round(row["assigner_ms"] / row["step_ms"], 3)
    for k in ("net_fwd_bwd_ms", "assigner_ms", "criterion_fwd_ms", "step_ms"):
        row[k] = round(row[k], 3)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for the .json and .md")
    ap.add_argument("--sizes", default="t,s")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--nc", type=int, default=80)
    ap.add_argument("--boxes", default="8,40", help="comma list: boxes per image")
    ap.add_argument("--fp32", action="store_true", help="no AMP")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--commit", default=None)
    args = ap.parse_args()
    device = torch.device(args.device)
    rows = []
    for size in args.sizes.split(","):
        for n_boxes in (int(x) for x in args.boxes.split(",")):
            row = measure(size, batch=args.batch, imgsz=args.imgsz, nc=args.nc, n_boxes=n_boxes,
                          amp=not args.fp32, iters=args.iters, warmup=args.warmup, device=device)
            rows.append(row)
            print(row, flush=True)
    cols = ["size", "batch", "imgsz", "boxes_per_img", "amp", "net_fwd_bwd_ms", "assigner_ms", "criterion_fwd_ms",
            "step_ms", "network_share", "assigner_share"]
    env = stamp(args.commit)
    table = md_table(rows, cols)
    write_result(args.out / "rtmdet-step.json", numbers={"rows": rows}, env=env, markdown=(
        f"# RTMDet training-step breakdown\n\n{env['gpu']}, torch {env['torch']}, {env['date']}, "
        f"commit {env['commit']}\n\n{table}\n"))
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
