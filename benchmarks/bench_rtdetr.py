"""RT-DETR / RT-DETRv2 on a GPU: prediction and training-step timing with and without CUDA-graph
capture, per batch and ``ms_deform_attn`` provider, plus the parity evidence (SPEC G-9, G-10, K-8, T-6).

Prediction (per model, dtype, provider, batch): eager ``eager_forward`` vs the graph runner
(both stages captured: backbone+encoder, decoder+heads; denoising is off at inference); bitwise
parity of every output on two probes from different distributions (uniform noise, the sample
image); median ms over ``--iters`` calls after ``--warmup`` (synchronised clock).

Training step (same grid): forward, criterion (denoising + Hungarian), backward, SGD step,
zero-grad. Eager arm vs seam arm, where the backbone+encoder forward and backward replay from a
training graph (``libreyolo.graphs.training.TrainGraphs`` over ``family.train_stages()[0].fn``)
and the decoder + criterion run eager. Also the share of an eager step spent in the captured part
(backbone+encoder forward+backward alone / whole step).

Training parity (``--parity-models``, fp32): step-0 loss of the seam arm vs eager (bitwise),
step-0 gradient difference graph-vs-eager next to the spread of two seeded eager runs
(the "eager noise" class of SPEC T-6), and the loss after ``--parity-steps`` steps.

Providers: ``off`` (portable grid_sample path), ``triton``, ``hub`` (set through
``LIBREYOLO_KERNELS``); the compiled kernels take float32 only (K-8), so fp16 rows run ``off``.
The implementation the registry picks for the model's call signature is recorded per row.

    python benchmarks/bench_rtdetr.py --out benchmarks/results/rtdetr
    python benchmarks/bench_rtdetr.py --out /tmp/r --models rtdetr:r18 --batches 2 --providers off --iters 10
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._common import md_table, stamp, write_result  # noqa: E402
from libreyolo.bench.timing import time_wall  # noqa: E402

NC = 80
DN_SEED = 1234
TRUNK_SEED = 4321


def _families() -> dict[str, type]:
    from libreyolo.models.rtdetr.family import RTDETR
    from libreyolo.models.rtdetrv2.family import RTDETRv2
    from libreyolo.registry import register_family

    for fam in (RTDETR, RTDETRv2):
        register_family(fam)  # idempotent; the package may already register them
    return {"rtdetr": RTDETR, "rtdetrv2": RTDETRv2}


def _set_provider(name: str) -> None:
    from libreyolo.kernels import registry

    os.environ["LIBREYOLO_KERNELS"] = name  # off | triton | hub
    registry.clear_cache()


def _provider_in_use(net: Any, batch: int, imgsz: int, dtype: torch.dtype, device: torch.device) -> str:
    """The ``ms_deform_attn`` implementation the registry picks for this model's call signature."""
    from libreyolo.kernels import registry
    from libreyolo.kernels.attention import MS_DEFORM_ATTN
    from libreyolo.layers.msda import level_layout

    dec = net.decoder
    ca = dec.layers[0].cross_attn
    shapes = [(imgsz // s, imgsz // s) for s in net.strides]
    layout = level_layout(shapes, device=device)
    heads, c = ca.num_heads, ca.embed_dim // ca.num_heads
    q = min(dec.num_queries, layout.total)
    pts = ca.num_points_list[0]
    value = torch.zeros(batch, layout.total, heads, c, device=device, dtype=dtype)
    loc = torch.zeros(batch, q, heads, len(shapes), pts, 2, device=device, dtype=dtype)
    w = torch.zeros(batch, q, heads, len(shapes), pts, device=device, dtype=dtype)
    if not ca.uniform or ca.method != "default":
        return "portable (mixed points or discrete sampling)"
    name = registry.resolve_name(MS_DEFORM_ATTN, value, layout.spatial_shapes, layout.level_start_index, loc, w)
    return "portable" if name == "unavailable" else name


def _median_ms(fn: Any, *, warmup: int, iters: int, device: torch.device) -> float:
    """Median ms of ``fn`` (synchronised clock) after ``warmup`` calls."""
    return time_wall(fn, device=device, iters=iters, warmup=warmup)["median_ms"]


def _probes(batch: int, imgsz: int, device: torch.device) -> list[torch.Tensor]:
    import cv2
    import numpy as np

    from libreyolo import SAMPLE_IMAGE

    g = torch.Generator().manual_seed(0)
    noise = torch.rand(batch, 3, imgsz, imgsz, generator=g)
    img = cv2.imread(str(SAMPLE_IMAGE))
    img = cv2.resize(img, (imgsz, imgsz))[:, :, ::-1]
    nat = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float().div(255.0)
    return [noise.to(device), nat[None].expand(batch, -1, -1, -1).contiguous().to(device)]


def _synthetic_batch(batch: int, imgsz: int, device: torch.device, *, per_image: int = 6, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    n = batch * per_image
    xy = torch.rand(n, 2, generator=g) * 0.6 + 0.2
    wh = torch.rand(n, 2, generator=g) * 0.25 + 0.05
    return {"img": torch.rand(batch, 3, imgsz, imgsz, generator=g).to(device),
            "batch_idx": torch.arange(batch).repeat_interleave(per_image).to(device),
            "cls": torch.randint(0, NC, (n,), generator=g).to(device),
            "bboxes": torch.cat([xy, wh], 1).to(device)}


# ----------------------------------------------------------------------------------- prediction
def bench_predict(fam: type, size: str, *, batch: int, imgsz: int, amp: torch.dtype | None, fuse: bool,
                  warmup: int, iters: int, device: torch.device) -> dict[str, Any]:
    from libreyolo.graphs.runner import PredictGraphs

    torch.manual_seed(0)
    model = fam(size=size, nc=NC).to(device)
    if fuse:
        model.fuse()
    graphs = PredictGraphs(model, force=True)  # the flag is False until this evidence exists
    parity = []
    for x in _probes(batch, imgsz, device):
        eager = model.eager_forward(x, amp_dtype=amp)
        graph = graphs.run(x, policy=True, amp_dtype=amp)
        parity.append(all(torch.equal(a, b) for a, b in zip(eager, graph, strict=True)))
    x = _probes(batch, imgsz, device)[0]
    t_eager = _median_ms(lambda: model.eager_forward(x, amp_dtype=amp), warmup=warmup, iters=iters, device=device)
    t_graph = _median_ms(lambda: graphs.run(x, policy=True, amp_dtype=amp), warmup=warmup, iters=iters, device=device)
    info = graphs.info()
    graphs.release()
    return {"bitwise": all(parity), "probes_equal": parity, "eager_ms": round(t_eager, 3),
            "graph_ms": round(t_graph, 3), "speedup": round(t_eager / t_graph, 3),
            "capture_ms": [g.get("capture_ms") for g in info.get("graphs", [])] if isinstance(info, dict) else None}


# ----------------------------------------------------------------------------------- training
class TrainArm:
    """One training run: eager, or seam split (backbone+encoder replayed from a graph)."""

    def __init__(self, fam: type, size: str, *, device: torch.device, amp: torch.dtype | None, graph: bool,
                 seed: int = 0, lr: float = 1e-4) -> None:
        from libreyolo.graphs.training import TrainGraphs

        torch.manual_seed(seed)
        self.model = fam(size=size, nc=NC).to(device)
        self.net = self.model.net.train()
        self.crit = self.model.build_criterion()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=lr, momentum=0.9)
        self.amp = amp
        self.scaler = torch.amp.GradScaler("cuda", enabled=amp == torch.float16)
        self.tg = None
        if graph:
            trunk = self.model.train_stages()[0].fn
            self.tg = TrainGraphs(trunk, requested=True, amp_dtype=amp, reason=None, repeats=1)

    def forward(self, imgs: torch.Tensor) -> Any:
        if self.tg is not None:
            return self.tg.forward(imgs)
        if self.amp is None:
            return self.net(imgs)
        with torch.autocast("cuda", dtype=self.amp):
            return self.net(imgs)

    def step(self, batch: dict, *, grads: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
        # the same dropout draws in the trunk of every arm (Deformable DETR's encoder has dropout):
        # without this the arms drew from wherever the previous arm's step left the generator
        torch.manual_seed(TRUNK_SEED)
        feats = self.forward(batch["img"])
        torch.manual_seed(DN_SEED)  # the same denoising noise in every arm and step
        loss, _ = self.crit(feats, batch)
        self.scaler.scale(loss).backward()
        g = None
        if grads:
            g = {n: p.grad.detach().clone() for n, p in self.net.named_parameters() if p.grad is not None}
        self.scaler.step(self.opt)
        self.scaler.update()
        if self.tg is not None:
            self.tg.zero_grad(self.opt)
        else:
            self.opt.zero_grad(set_to_none=True)
        return loss.detach(), g

    def trunk_fwd_bwd(self, imgs: torch.Tensor) -> None:
        """Eager backbone+encoder forward+backward alone (the part the seam arm captures)."""
        feats = self.forward(imgs) if self.tg is None else None
        if feats is None:
            raise RuntimeError("trunk timing needs the eager arm")
        torch.autograd.backward(list(feats), [torch.ones_like(f) for f in feats])
        self.opt.zero_grad(set_to_none=True)


def bench_train(fam: type, size: str, *, batch: int, imgsz: int, amp: torch.dtype | None, warmup: int,
                iters: int, device: torch.device) -> dict[str, Any]:
    data = _synthetic_batch(batch, imgsz, device)
    eager = TrainArm(fam, size, device=device, amp=amp, graph=False)
    t_eager = _median_ms(lambda: eager.step(data), warmup=warmup, iters=iters, device=device)
    t_trunk = _median_ms(lambda: eager.trunk_fwd_bwd(data["img"]), warmup=warmup, iters=iters, device=device)
    eager = None  # free its memory before the seam arm
    seam = TrainArm(fam, size, device=device, amp=amp, graph=True)
    t_seam = _median_ms(lambda: seam.step(data), warmup=warmup, iters=iters, device=device)
    info = seam.tg.info() if seam.tg is not None else {}
    seam = None
    torch.cuda.empty_cache()
    return {"eager_ms": round(t_eager, 3), "seam_ms": round(t_seam, 3), "speedup": round(t_eager / t_seam, 3),
            "captured_share": round(t_trunk / t_eager, 3), "capture_failed": info.get("failed"),
            "replays": sum(g.get("replays", 0) for g in info.get("graphs", []))}


def global_rel(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """||a - b|| / ||a|| over every gradient together (robust where single tensors, e.g. the bias
    of a BatchNorm followed by another BatchNorm, carry only cancellation noise)."""
    num = sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in a)
    den = sum(float(a[k].double().pow(2).sum()) for k in a)
    return (num / max(den, 1e-300)) ** 0.5


def _max_rel(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[float, str]:
    worst, name = 0.0, ""
    for k in a:
        d = (a[k].float() - b[k].float()).abs().max().item()
        scale = max(a[k].float().abs().max().item(), 1e-12)
        if d / scale > worst:
            worst, name = d / scale, k
    return worst, name


def train_parity(fam: type, size: str, *, batch: int, imgsz: int, steps: int, device: torch.device) -> dict[str, Any]:
    data = _synthetic_batch(batch, imgsz, device)
    runs = {}
    for tag, graph in (("eager_a", False), ("eager_b", False), ("graph", True)):
        arm = TrainArm(fam, size, device=device, amp=None, graph=graph)
        loss0, g0 = arm.step(data, grads=True)
        losses = [loss0.item()]
        for _ in range(steps - 1):
            losses.append(arm.step(data)[0].item())
        info = arm.tg.info() if arm.tg is not None else {}
        runs[tag] = {"loss0": loss0, "grads": g0, "losses": losses, "failed": info.get("failed")}
        del arm
    spread, spread_at = _max_rel(runs["eager_a"]["grads"], runs["eager_b"]["grads"])
    diff, diff_at = _max_rel(runs["eager_a"]["grads"], runs["graph"]["grads"])
    if diff == 0.0:
        cls = "exact"
    elif diff <= spread:
        cls = "eager noise"
    else:
        cls = "differs"
    return {"loss0_bitwise": bool(torch.equal(runs["eager_a"]["loss0"], runs["graph"]["loss0"])),
            "loss0": runs["eager_a"]["loss0"].item(), "grad_rel_graph_vs_eager": diff, "at": diff_at,
            "grad_rel_eager_vs_eager": spread, "spread_at": spread_at, "class": cls,
            "loss_last_eager": runs["eager_a"]["losses"][-1], "loss_last_graph": runs["graph"]["losses"][-1],
            "capture_failed": runs["graph"]["failed"]}


# ----------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for bench_rtdetr.json / .md")
    ap.add_argument("--models", default="rtdetr:r18", help="family:size list for the timing grid")
    ap.add_argument("--batches", default="2,4,8")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--providers", default="off,triton,hub", help="ms_deform_attn providers (fp32 rows)")
    ap.add_argument("--dtypes", default="float32,float16", help="float16 rows use the portable provider only")
    ap.add_argument("--fuse", action="store_true", help="fuse BN / RepVGG before prediction timing")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--parity-models", default="rtdetr:r18,rtdetr:r34,rtdetr:r50,rtdetrv2:r18,rtdetrv2:r34")
    ap.add_argument("--parity-imgsz", type=int, default=320)
    ap.add_argument("--parity-batch", type=int, default=2)
    ap.add_argument("--parity-steps", type=int, default=3)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--commit", default=None)
    args = ap.parse_args(argv)

    if not torch.cuda.is_available():
        print("bench_rtdetr.py needs a CUDA GPU (torch sees none)", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0)
    fams = _families()
    split = lambda s: [v for v in s.split(",") if v]  # noqa: E731
    models = [m.split(":") for m in split(args.models)]
    dtypes = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for fname, size in models:
        fam = fams[fname]
        for dname in split(args.dtypes):
            amp = dtypes[dname]
            providers = split(args.providers) if amp is None else ["off"]
            for prov in providers:
                _set_provider(prov)
                for b in (int(v) for v in split(args.batches)):
                    row: dict[str, Any] = {"model": f"{fname}-{size}", "dtype": dname, "provider": prov, "batch": b}
                    try:
                        probe = fam(size=size, nc=NC).to(device)
                        row["msda_impl"] = _provider_in_use(probe.net, b, args.imgsz, torch.float32 if amp is None
                                                            else amp, device)
                        del probe
                        p = bench_predict(fam, size, batch=b, imgsz=args.imgsz, amp=amp, fuse=args.fuse,
                                          warmup=args.warmup, iters=args.iters, device=device)
                        row.update({f"pred_{k}": v for k, v in p.items()})
                        if not args.skip_train:
                            t = bench_train(fam, size, batch=b, imgsz=args.imgsz, amp=amp, warmup=args.warmup,
                                            iters=args.iters, device=device)
                            row.update({f"train_{k}": v for k, v in t.items()})
                    except Exception as e:  # noqa: BLE001 - one failing row must not lose the others
                        row["error"] = repr(e)[:300]
                    torch.cuda.empty_cache()
                    rows.append(row)
                    print(row, flush=True)
    _set_provider("off")
    parity: list[dict[str, Any]] = []
    if not args.skip_train:
        for spec in split(args.parity_models):
            fname, size = spec.split(":")
            r: dict[str, Any] = {"model": f"{fname}-{size}", "imgsz": args.parity_imgsz, "batch": args.parity_batch}
            try:
                r.update(train_parity(fams[fname], size, batch=args.parity_batch, imgsz=args.parity_imgsz,
                                      steps=args.parity_steps, device=device))
            except Exception as e:  # noqa: BLE001
                r["error"] = repr(e)[:300]
            torch.cuda.empty_cache()
            parity.append(r)
            print(r, flush=True)
    os.environ.pop("LIBREYOLO_KERNELS", None)
    env = stamp(args.commit)
    result = {"imgsz": args.imgsz, "iters": args.iters, "warmup": args.warmup, "fuse": args.fuse,
              "timing": rows, "train_parity": parity, "elapsed_s": round(time.perf_counter() - t0, 1)}
    cols = ["model", "dtype", "provider", "msda_impl", "batch", "pred_bitwise", "pred_eager_ms", "pred_graph_ms",
            "pred_speedup", "train_eager_ms", "train_seam_ms", "train_speedup", "train_captured_share", "error"]
    pcols = ["model", "imgsz", "batch", "loss0_bitwise", "class", "grad_rel_graph_vs_eager",
             "grad_rel_eager_vs_eager", "loss_last_eager", "loss_last_graph", "capture_failed", "error"]
    md = [f"# RT-DETR family: capture benchmark and parity ({env['gpu']}, torch {env['torch']}, {env['date']}, "
          f"commit {env['commit']})", "", f"imgsz {args.imgsz}, median of {args.iters} after {args.warmup} warm-up, "
          "synchronised clock. Prediction: both stages captured. Training: backbone+encoder captured, decoder + "
          "criterion eager.", "", md_table(rows, cols), "", "## Training capture parity (fp32, step 0)", "",
          md_table(parity, pcols), ""]
    write_result(args.out / "bench_rtdetr.json", numbers=result, env=env, markdown="\n".join(md))
    print("\n" + md_table(rows, cols))
    print("\n" + md_table(parity, pcols))
    print(f"\nwrote {args.out / 'bench_rtdetr.json'} and .md in {result['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
