"""Training-capture parity matrix (SPEC T-6): writes docs/cuda-graph-training-parity.{md,json}.

For every registered family x size that has a training criterion: one training step at step
zero, eager twice (two seeded runs, to measure eager-vs-eager noise) and once through a captured
graph (libreyolo.graphs.training.TrainGraphs), all from the same initial weights and batch.
Checks: loss bit-identical to eager; no BatchNorm buffer differs; gradients compared and placed
in a numerics class:

  exact        every gradient bit-identical to eager
  1ulp         largest difference one unit in the last place
  eager-noise  graph differs from eager no more than two seeded eager runs differ from each other
  float-rounding  a few gradients differ beyond eager noise (named in the JSON)

Detection families get a synthetic detection batch; classification families (capability
``OUTPUT_KIND == "probs"``) a batch of images and one class id per image; semantic families
(``OUTPUT_KIND == "semantic"``) a batch of images and a mask of class ids per pixel; depth families
(``OUTPUT_KIND == "depth"``) a batch of images and a depth map; point families (``OUTPUT_KIND ==
"points"``) the detection batch (their loss reduces each box to its centroid cell). restoration families (``OUTPUT_KIND == "restore"``) LQ images and HQ
targets (x ``SCALE``). instance-segmentation families (``OUTPUT_KIND == "masks"``) the detection batch plus one mask per
box; pose families (``OUTPUT_KIND == "keypoints"``) the detection batch plus keypoints per box. Each step starts from
the same RNG seed, so dropout / stochastic-depth masks are drawn alike in the two eager runs.

Usage (GPU): python3 benchmarks/parity_train.py --out $OUT [--sizes t,s] [--commit SHA]
             [--families resnet,convnext] [--merge docs/cuda-graph-training-parity.json]
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))
from benchmarks._common import file_lock, md_table, stamp, write_json  # noqa: E402


def synthetic_batch(*, batch: int, imgsz: int, nc: int, seed: int, device: torch.device) -> dict[str, Any]:
    """A detection batch: images in [0, 1] and 1-6 boxes per image (normalised cxcywh)."""
    g = torch.Generator().manual_seed(seed)
    imgs = torch.rand(batch, 3, imgsz, imgsz, generator=g)
    idx, cls, boxes = [], [], []
    for i in range(batch):
        n = int(torch.randint(1, 7, (1,), generator=g))
        wh = torch.rand(n, 2, generator=g) * 0.3 + 0.05
        c = torch.rand(n, 2, generator=g) * (1 - wh) + wh / 2
        idx.append(torch.full((n,), i))
        cls.append(torch.randint(0, nc, (n,), generator=g))
        boxes.append(torch.cat([c, wh], 1))
    return {"img": imgs.to(device), "batch_idx": torch.cat(idx).to(device), "cls": torch.cat(cls).to(device),
            "bboxes": torch.cat(boxes).float().to(device)}


def classify_batch(*, batch: int, imgsz: int, nc: int, seed: int, device: torch.device) -> dict[str, Any]:
    """A classification batch: images in [0, 1] (Tensor[B, 3, S, S]) and class ids (Tensor[B] int64)."""
    g = torch.Generator().manual_seed(seed)
    imgs = torch.rand(batch, 3, imgsz, imgsz, generator=g)
    return {"img": imgs.to(device), "cls": torch.randint(0, nc, (batch,), generator=g).to(device)}


def semantic_batch(*, batch: int, imgsz: int, nc: int, seed: int, device: torch.device) -> dict[str, Any]:
    """A semantic batch: images in [0, 1] and per-pixel class ids (Tensor[B, S, S] int64) painted as
    a few rectangles on background 0, with a band of ignored pixels (-1) along the top edge."""
    g = torch.Generator().manual_seed(seed)
    imgs = torch.rand(batch, 3, imgsz, imgsz, generator=g)
    mask = torch.zeros(batch, imgsz, imgsz, dtype=torch.int64)
    for i in range(batch):
        for _ in range(3):
            y0, x0 = (int(v) for v in torch.randint(0, imgsz // 2, (2,), generator=g))
            mask[i, y0:y0 + imgsz // 3, x0:x0 + imgsz // 3] = int(torch.randint(1, nc, (1,), generator=g))
    mask[:, : max(1, imgsz // 32)] = -1
    return {"img": imgs.to(device), "mask": mask.to(device)}


def depth_batch(*, batch: int, imgsz: int, nc: int, seed: int, device: torch.device) -> dict[str, Any]:
    """A depth batch: images in [0, 1] and depths (Tensor[B, S, S] float32): a far plane tilted
    from 12 to 9 with a few nearer rectangles (2-8), and a band without depth (0) along the top edge.
    ``nc`` is unused (a depth map has no classes)."""
    g = torch.Generator().manual_seed(seed)
    imgs = torch.rand(batch, 3, imgsz, imgsz, generator=g)
    depth = torch.linspace(12.0, 9.0, imgsz).view(1, imgsz, 1).repeat(batch, 1, imgsz)
    for i in range(batch):
        for _ in range(3):
            y0, x0 = (int(v) for v in torch.randint(0, imgsz // 2, (2,), generator=g))
            depth[i, y0:y0 + imgsz // 3, x0:x0 + imgsz // 3] = 2.0 + 6.0 * float(torch.rand(1, generator=g))
    depth[:, : max(1, imgsz // 32)] = 0.0
    return {"img": imgs.to(device), "depth": depth.to(device)}


def restore_batch(*, batch: int, imgsz: int, nc: int, seed: int, device: torch.device, scale: int = 1) -> dict[str, Any]:
    """A restoration batch: LQ images in [0, 1] (Tensor[B, 3, S, S]) and HQ targets (Tensor[B, 3,
    scale*S, scale*S] uint8): a smooth field upsampled from a coarse grid, the LQ image its
    downscaled copy (``scale`` > 1) or a noisy copy (``scale`` = 1); ``nc`` is unused."""
    g = torch.Generator().manual_seed(seed)
    hq = torch.nn.functional.interpolate(torch.rand(batch, 3, 8, 8, generator=g), size=(imgsz * scale,) * 2,
                                         mode="bicubic", align_corners=False).clamp_(0, 1)
    lq = (torch.nn.functional.interpolate(hq, size=(imgsz, imgsz), mode="area") if scale > 1 else
          (hq + 0.1 * torch.randn(hq.shape, generator=g)).clamp_(0, 1))
    return {"img": lq.to(device), "target": hq.mul(255).round().to(torch.uint8).to(device)}


def segment_batch(*, batch: int, imgsz: int, nc: int, seed: int, device: torch.device) -> dict[str, Any]:
    """An instance-segmentation batch: :func:`synthetic_batch` plus ``masks`` (Tensor[N, S/4, S/4]
    uint8), one per box: the ellipse inscribed in the box, at a quarter of the image size."""
    out = synthetic_batch(batch=batch, imgsz=imgsz, nc=nc, seed=seed, device=torch.device("cpu"))
    s4 = imgsz // 4
    yy, xx = torch.meshgrid(torch.arange(s4) + 0.5, torch.arange(s4) + 0.5, indexing="ij")
    c, wh = out["bboxes"][:, None, None, :2] * s4, out["bboxes"][:, None, None, 2:] * s4 / 2
    inside = ((xx - c[..., 0]) / wh[..., 0]) ** 2 + ((yy - c[..., 1]) / wh[..., 1]) ** 2 <= 1.0
    out["masks"] = inside.to(torch.uint8)
    return {k: v.to(device) for k, v in out.items()}


def pose_batch(*, batch: int, imgsz: int, nc: int, seed: int, device: torch.device,
               nkpt: int = 17) -> dict[str, Any]:
    """A pose batch: :func:`synthetic_batch` plus ``keypoints`` (Tensor[N, nkpt, 3]), per box
    ``nkpt`` points drawn inside it (x, y normalised), about one in five unlabelled (v = 0, x = y = 0)."""
    out = synthetic_batch(batch=batch, imgsz=imgsz, nc=nc, seed=seed, device=torch.device("cpu"))
    g = torch.Generator().manual_seed(seed + 1)
    box = out["bboxes"]
    n = box.shape[0]
    xy = box[:, None, :2] + (torch.rand(n, nkpt, 2, generator=g) - 0.5) * box[:, None, 2:]
    vis = (torch.rand(n, nkpt, 1, generator=g) > 0.2).float()
    out["keypoints"] = torch.cat([xy * vis, vis * 2.0], 2)
    return {k: v.to(device) for k, v in out.items()}


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in units in the last place between two float32 tensors."""
    def ordered(t: torch.Tensor) -> torch.Tensor:
        i = t.float().contiguous().view(torch.int32).to(torch.int64)
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)

    if a.numel() == 0:
        return 0
    return int((ordered(a) - ordered(b)).abs().max())


def one_step(model: Any, net: torch.nn.Module, batch: dict[str, Any], amp: torch.dtype | None,
             graphs: Any = None) -> dict[str, Any]:
    criterion = model.build_criterion()
    for p in net.parameters():
        p.grad = None
    torch.manual_seed(123)  # same dropout / drop-path draws in every eager run
    if graphs is not None:
        preds = graphs.forward(batch["img"])
    else:
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            preds = net(batch["img"])
    loss, items = criterion(preds, batch)
    loss.backward()
    torch.cuda.synchronize()
    return {
        "loss": loss.detach().float().clone(),
        "grads": {k: p.grad.detach().float().clone() for k, p in net.named_parameters() if p.grad is not None},
        "buffers": {k: b.detach().clone() for k, b in net.named_buffers()},
    }


def compare(e1: dict[str, Any], e2: dict[str, Any], g: dict[str, Any]) -> dict[str, Any]:
    loss_equal = bool(torch.equal(e1["loss"], g["loss"]))
    bn_diff = [k for k in e1["buffers"] if not torch.equal(e1["buffers"][k], g["buffers"][k])]
    differing, max_ulp, max_abs_ge, max_abs_ee = [], 0, 0.0, 0.0
    for k, ge in e1["grads"].items():
        gg, ge2 = g["grads"][k], e2["grads"][k]
        max_abs_ee = max(max_abs_ee, float((ge - ge2).abs().max()))
        if not torch.equal(ge, gg):
            differing.append(k)
            max_ulp = max(max_ulp, ulp_distance(ge, gg))
            max_abs_ge = max(max_abs_ge, float((ge - gg).abs().max()))
    if not differing:
        cls = "exact"
    elif max_ulp <= 1:
        cls = "1ulp"
    elif max_abs_ge <= max_abs_ee:
        cls = "eager-noise"
    else:
        cls = "float-rounding"
    return {
        "loss_bit_identical": loss_equal,
        "bn_buffers_differing": bn_diff,
        "grads_total": len(e1["grads"]),
        "grads_differing": len(differing),
        "differing_params": differing[:20],
        "max_ulp": max_ulp,
        "max_abs_graph_vs_eager": max_abs_ge,
        "max_abs_eager_vs_eager": max_abs_ee,
        "numerics_class": cls,
        "pass": loss_equal and not bn_diff,
    }


def run_row(fam: type, size: str, amp: torch.dtype | None, *, batch: int, imgsz: int) -> dict[str, Any]:
    from libreyolo.graphs.training import TrainGraphs

    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = fam(size=size, nc=6)
    base = model.net.to(device).train()
    make = {"probs": classify_batch, "semantic": semantic_batch, "depth": depth_batch, "masks": segment_batch,
            "keypoints": functools.partial(pose_batch, nkpt=int(getattr(model, "nkpt", 17))),
            "restore": functools.partial(restore_batch, scale=int(getattr(model, "SCALE", 1)))}.get(
        getattr(fam, "OUTPUT_KIND", "boxes"), synthetic_batch)
    data = make(batch=batch, imgsz=imgsz, nc=6, seed=1, device=device)
    nets = [copy.deepcopy(base) for _ in range(3)]
    model.net = nets[0]
    e1 = one_step(model, nets[0], data, amp)
    model.net = nets[1]
    e2 = one_step(model, nets[1], data, amp)
    model.net = nets[2]
    # A family split at a seam (SPEC G-9) captures its training trunk, as the trainer does; the
    # rest of its step (e.g. a denoising decoder inside the criterion) runs eager in every arm.
    stages = model.train_stages()
    target = stages[0].fn if stages and stages[0].capturable else nets[2]
    graphs = TrainGraphs(target, requested=True, amp_dtype=amp, reason=None, repeats=1)
    g = one_step(model, nets[2], data, amp, graphs=graphs)
    info = graphs.info()
    row = {"family": fam.FAMILY, "task": model.task, "size": size, "dtype": str(amp or torch.float32).replace("torch.", ""),
           "batch": batch, "imgsz": imgsz, "captured": bool(info["graphs"]), "capture_failed": info["failed"],
           "captured_part": "trunk (seam)" if target is not nets[2] else "whole network"}
    row.update(compare(e1, e2, g))
    row["pass"] = row["pass"] and row["captured"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--docs", type=Path, default=None, help="also write docs/ files here")
    ap.add_argument("--sizes", default=None, help="comma list restricting sizes")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--families", default=None, help="comma list restricting families")
    ap.add_argument("--merge", type=Path, default=None,
                    help="an existing matrix JSON: its rows of other family/size/dtype are kept in the output")
    ap.add_argument("--combine", type=Path, nargs="*", default=[],
                    help="further matrix JSONs merged in order (later rows replace earlier ones), then this run's")
    ap.add_argument("--families-none", action="store_true", help="run no rows (with --merge/--combine: merge only)")
    args = ap.parse_args()
    for given in ([args.merge] if args.merge is not None else []) + list(args.combine):
        if not given.is_file():
            ap.error(f"{given} does not exist: its rows would be dropped from the matrix")
    from libreyolo.registry import families

    rows = []
    for fam in ([] if args.families_none else families().values()):
        if args.families and fam.FAMILY not in args.families.split(","):
            continue
        try:
            fam.build_criterion  # noqa: B018
        except AttributeError:
            continue
        for size in fam.SIZES:
            if args.sizes and size not in args.sizes.split(","):
                continue
            for amp in (torch.float16, None):
                try:
                    row = run_row(fam, size, amp, batch=args.batch, imgsz=args.imgsz)
                except NotImplementedError:
                    break
                except Exception as e:  # noqa: BLE001 - record the failure as a row
                    row = {"family": fam.FAMILY, "task": fam.TASKS[0], "size": size,
                           "dtype": str(amp or torch.float32).replace("torch.", ""), "pass": False,
                           "error": repr(e)[:300]}
                rows.append(row)
                print({k: row.get(k) for k in ("family", "size", "dtype", "pass", "numerics_class", "loss_bit_identical", "max_ulp", "error")}, flush=True)
    env = stamp(args.commit)
    for r in rows:
        r.setdefault("commit", env["commit"])
        r.setdefault("date", env["date"])
    with file_lock(args.out / "cuda-graph-training-parity.json"):
        docs = [json.loads(p.read_text()) for p in ([args.merge] if args.merge is not None else [])]
        docs += [json.loads(p.read_text()) for p in args.combine]
        if rows or not docs:
            docs.append({"environment": env, "rows": rows})
        result = combine(docs)
        write_outputs(result, [args.out] + ([args.docs] if args.docs else []))
    print(render_markdown(result))


def _key(r: dict[str, Any]) -> tuple:
    return (r.get("family"), r.get("size"), r.get("dtype"))


def combine(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One matrix from several runs: a later document's row replaces an earlier one of the same
    family/size/dtype; every row keeps the commit and date of the run that produced it."""
    from libreyolo.graphs.parity import merge_rows

    return {"environment": docs[-1]["environment"], "rows": merge_rows(docs, key=_key)}


def render_markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    cols = ["family", "task", "size", "batch", "imgsz", "dtype", "captured", "captured_part", "loss_bit_identical",
            "bn_buffers_differing", "grads_differing", "grads_total", "max_ulp", "max_abs_graph_vs_eager",
            "max_abs_eager_vs_eager", "numerics_class", "pass", "commit"]
    env = result["environment"]
    commits = sorted({str(r.get("commit")) for r in rows})
    return ("# CUDA-graph training parity (step zero)\n\n"
            "Generated by `benchmarks/parity_train.py` from real GPU runs; do not edit by hand.\n\n"
            f"GPU: {env['gpu']} · torch {env['torch']} (CUDA {env['cuda']}) · latest run {env['date']} · "
            f"rows from commits {', '.join(commits)} (each row names its own; batch and size per row)\n\n"
            + md_table([{**r, "bn_buffers_differing": len(r.get("bn_buffers_differing", []) or [])} for r in rows], cols)
            + "\n\nNumerics classes: exact; 1ulp (largest gradient difference one unit in the last place); "
            "eager-noise (graph-vs-eager difference no larger than eager-vs-eager between two seeded runs); "
            "float-rounding (differences beyond eager noise, parameters named in the JSON).\n")


def write_outputs(result: dict[str, Any], folders: list[Path]) -> None:
    for folder in folders:
        write_json(folder / "cuda-graph-training-parity.json", result)
        (folder / "cuda-graph-training-parity.md").write_text(render_markdown(result))


if __name__ == "__main__":
    main()
