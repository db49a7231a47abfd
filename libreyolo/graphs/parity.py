"""The prediction parity harness (SPEC G-4, G-6): graph replay must equal eager bit for bit.

For each registered family x task x size, an untrained model is built with a fixed seed (its
normalisation statistics randomised so that fused biases are not trivially zero), fused as deployed,
captured, and replayed on two probe batches drawn from different distributions. Every output is
compared with the eager forward using :func:`torch.equal` -- no tolerance. The resulting rows are
the evidence a family's ``SUPPORTS_CUDA_GRAPH`` is set from (:func:`expected_flag`).

The harness captures regardless of the flag (``PredictGraphs(model, force=True)``): it is what
proves the flag.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os as _os
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .seam import flatten

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

SCHEMA = 1
DTYPES = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}


# --------------------------------------------------------------------------- probes
def probe_batch(kind: str, shape: tuple[int, int, int, int], *, device: torch.device | str,
                seed: int = 0) -> Tensor:
    """A probe batch (Tensor[B, 3, H, W], float32 in [0, 1]) on ``device``.

    kind: ``"uniform"`` (i.i.d. U[0, 1] noise), ``"image"`` (``SAMPLE_IMAGE`` letterboxed and
    tiled over the batch; if the asset is missing, a smooth synthetic scene) or ``"normal"``
    (N(0.5, 0.2) clamped to [0, 1]).
    """
    b, c, h, w = shape
    gen = torch.Generator().manual_seed(seed)
    if kind == "uniform":
        x = torch.rand(shape, generator=gen)
    elif kind == "normal":
        x = (0.5 + 0.2 * torch.randn(shape, generator=gen)).clamp_(0.0, 1.0)
    elif kind == "image":
        x = _image_probe((h, w), gen).expand(b, c, h, w).contiguous()
    else:
        raise ValueError(f"unknown probe kind {kind!r}; use 'uniform', 'image' or 'normal'")
    return x.to(device)


def _image_probe(hw: tuple[int, int], gen: torch.Generator) -> Tensor:
    """SAMPLE_IMAGE letterboxed to ``hw`` (Tensor[1, 3, H, W] float32), or a synthetic scene."""
    from ..assets import SAMPLE_IMAGE
    from ..ops.letterbox import letterbox

    path = Path(SAMPLE_IMAGE)
    if path.is_file():
        from ..data.images import read_image

        rgb_arr = read_image(path)  # OpenCV or Pillow, RGB either way
        if rgb_arr is not None:
            rgb = torch.from_numpy(rgb_arr.copy()).permute(2, 0, 1)
            boxed, _ = letterbox(rgb, hw)
            return boxed[None].float() / 255.0
    # Low-frequency colour field with a few rectangles: spatially correlated like a photo.
    h, w = hw
    coarse = torch.rand(1, 3, 6, 8, generator=gen)
    img = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bicubic", align_corners=False)
    for _ in range(6):
        y0, x0 = int(torch.randint(0, h // 2, (1,), generator=gen)), int(torch.randint(0, w // 2, (1,), generator=gen))
        img[:, :, y0 : y0 + h // 4, x0 : x0 + w // 4] = torch.rand(1, 3, 1, 1, generator=gen)
    return img.clamp_(0.0, 1.0)


# --------------------------------------------------------------------------- comparison
def compare_outputs(a: Any, b: Any) -> dict[str, Any]:
    """Bitwise comparison of two output trees: ``{"equal": bool, "max_abs_diff": float, "n": int}``.

    ``equal`` is ``torch.equal`` on every tensor (same structure, shapes, dtypes and bits);
    ``max_abs_diff`` is diagnostic only (NaN where shapes differ).
    """
    la, sa = flatten(a)
    lb, sb = flatten(b)
    if sa != sb or len(la) != len(lb):
        return {"equal": False, "max_abs_diff": math.nan, "n": len(la), "note": "output structure differs"}
    equal, worst = True, 0.0
    for ta, tb in zip(la, lb, strict=False):
        same = ta.shape == tb.shape and ta.dtype == tb.dtype and bool(torch.equal(ta, tb))
        equal = equal and same
        if ta.shape != tb.shape:
            worst = math.nan
        elif not same and ta.numel():
            d = (ta.double() - tb.double()).abs()
            worst = max(worst, float(torch.nan_to_num(d, nan=math.inf).max()))
    return {"equal": equal, "max_abs_diff": worst, "n": len(la)}


def check_parity(model: Family, *, shape: tuple[int, int, int, int], amp_dtype: torch.dtype | None,
                 probes: tuple[str, str] = ("uniform", "image"), seed: int = 0,
                 decoded: bool = False) -> dict[str, Any]:
    """Capture ``model`` for ``shape`` and compare replay with eager on two probe batches.

    Pass means: eager is deterministic (two eager runs equal), the replay equals eager on both
    probes, the first probe's returned output is unchanged after the second replay (copy-out),
    a third replay of the first probe equals eager again, and the probes produce different outputs
    (otherwise the test would be vacuous).
    """
    from ..models._base.inference import channels_last, input_dtype
    from .runner import PredictGraphs

    model = getattr(model, "family", model)  # a Model: the harness runs its family's network
    device = model.device
    runner = PredictGraphs(model, force=True, capacity=2)
    fmt = torch.channels_last if channels_last(model) else torch.contiguous_format
    xa, xb = (probe_batch(p, shape, device=device, seed=seed + i).to(input_dtype(model), memory_format=fmt)
              for i, p in enumerate(probes))
    row: dict[str, Any] = {}
    try:
        ref_a = model.eager_forward(xa, amp_dtype=amp_dtype, decoded=decoded)
        ref_b = model.eager_forward(xb, amp_dtype=amp_dtype, decoded=decoded)
        row["eager_deterministic"] = compare_outputs(
            ref_a, model.eager_forward(xa, amp_dtype=amp_dtype, decoded=decoded))["equal"]
        out_a = runner.run(xa, policy=True, amp_dtype=amp_dtype, decoded=decoded)  # capture (+ one replay)
        snap_a = [t.clone() for t in flatten(out_a)[0]]
        out_b = runner.run(xb, policy=True, amp_dtype=amp_dtype, decoded=decoded)  # replay
        out_a2 = runner.run(xa, policy=True, amp_dtype=amp_dtype, decoded=decoded)  # replay
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        cmp_a, cmp_b, cmp_a2 = compare_outputs(out_a, ref_a), compare_outputs(out_b, ref_b), compare_outputs(out_a2, ref_a)
        row["probes"] = {probes[0]: cmp_a, probes[1]: cmp_b, f"{probes[0]}_again": cmp_a2}
        row["copy_out_ok"] = all(torch.equal(s, t) for s, t in zip(snap_a, flatten(out_a)[0], strict=False))
        row["probes_differ"] = not compare_outputs(ref_a, ref_b)["equal"]
        info = runner.info()["graphs"][0]
        row["capture_ms"], row["stages"] = info["capture_ms"], info["stages"]
        if info.get("bias_act"):  # captured with the fused conv epilogue; the eager reference ran ATen's
            row["bias_act"] = True
        ok = (row["eager_deterministic"] and cmp_a["equal"] and cmp_b["equal"] and cmp_a2["equal"]
              and row["copy_out_ok"] and row["probes_differ"])
        row["result"] = "pass" if ok else "fail"
    finally:
        runner.release()
    return row


def check_prepared_parity(model: Family, *, shape: tuple[int, int, int, int], dtype: torch.dtype | None,
                          seed: int = 0) -> dict[str, Any]:
    """Parity of what ``predict()`` replays: the prepared twin (weights cast once for float16,
    channels-last where the family sets it; autocast for other half dtypes), its raw network and,
    for a family with a captured decode, network + decode; under cuDNN autotuning as in predict."""
    from ..models._base.inference import (
        build_twin,
        channels_last,
        cudnn_benchmark,
        input_dtype,
        prep_spec,
    )

    model = getattr(model, "family", model)  # a Model: the harness runs its family's network
    cast = dtype == torch.float16 and model.device.type == "cuda" and model.HALF_CAST
    twin = build_twin(model, prep_spec(model, half=cast, fuse=True))
    amp = None if cast or dtype in (None, torch.float32) else dtype
    with cudnn_benchmark(model.device):
        row = check_parity(twin, shape=shape, amp_dtype=amp, seed=seed)
        row["prepared"] = {"fused": bool(twin.fused), "weights": str(input_dtype(twin)).removeprefix("torch."),
                           "channels_last": channels_last(twin), "autocast": str(amp).removeprefix("torch.")
                           if amp else None}
        if twin.DECODE_TOPK:
            dec = check_parity(twin, shape=shape, amp_dtype=amp, seed=seed, decoded=True)
            row["decode"] = {k: dec.get(k) for k in ("result", "probes", "eager_deterministic", "copy_out_ok",
                                                     "probes_differ")}
            if dec["result"] != "pass":
                row["result"] = "fail"
    return row


# --------------------------------------------------------------------------- the matrix
def randomise_norm_stats(net: torch.nn.Module, *, seed: int) -> None:
    """Give every BatchNorm non-trivial statistics and affine weights (deterministic per seed)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                n = m.num_features
                m.running_mean.copy_(0.1 * torch.randn(n, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(n, generator=gen))
                if m.affine:
                    m.weight.copy_(0.5 + torch.rand(n, generator=gen))
                    m.bias.copy_(0.1 * torch.randn(n, generator=gen))


def calibrate_norm_stats(net: torch.nn.Module, *, seed: int, imgsz: int = 640) -> None:
    """Set every BatchNorm's running statistics to the batch statistics of a probe batch.

    For networks whose default initialisation shrinks the signal layer by layer (PicoDet's
    ESNet: depthwise convolutions, squeeze-excite gates), randomised statistics leave the output
    independent of the input, and a parity row would compare two constant outputs. Calibrated
    statistics normalise the real activations, as trained ones do. Deterministic per seed.
    """
    bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    saved = [(m.momentum, m.training) for m in bns]
    was_training = net.training
    dev = next(net.parameters()).device  # the statistics of the matrix's two probe kinds together
    x = torch.cat([probe_batch(k, (1, 3, imgsz, imgsz), device=dev, seed=seed + i)
                   for i, k in enumerate(("uniform", "image"))])
    with torch.no_grad():
        for m in bns:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average: after one batch, exactly its statistics
        net.train()
        net(x)
    for m, (momentum, training) in zip(bns, saved, strict=True):
        m.momentum = momentum
        m.train(training)
    net.train(was_training)


def build_probe_model(cls: type[Family], *, size: str, task: str, device: torch.device | str, seed: int,
                      fuse: bool = True, arch: dict[str, Any] | None = None, imgsz: int = 640) -> Family:
    """An untrained ``cls`` model built with a fixed seed, on ``device``, fused as deployed.
    ``arch``: architecture options of the family's ``set_arch`` (a variant, e.g. the yolo9 head of
    Ultralytics checkpoints, ``{"box_groups": 1}``). ``imgsz``: the probe size, for a family whose
    normalisation statistics are calibrated (``PARITY_NORM_STATS = "calibrated"``) at that size."""
    torch.manual_seed(seed)
    model = cls(size=size, task=task, nc=80)
    if arch:
        set_arch = getattr(model, "set_arch", None)
        if set_arch is None:
            raise ValueError(f"{cls.FAMILY} has no architecture options (asked for {arch})")
        torch.manual_seed(seed)
        set_arch(**arch)
    calibrated = getattr(cls, "PARITY_NORM_STATS", "random") == "calibrated"
    if not calibrated:
        randomise_norm_stats(model.net, seed=seed)
    model.to(device)
    if calibrated:  # at the probe size: statistics of a small map do not hold for a larger one
        calibrate_norm_stats(model.net, seed=seed, imgsz=imgsz)
    if fuse:
        model.fuse()
    return model


def run_matrix(*, families: list[str] | None = None, sizes: list[str] | None = None, imgsz: int = 640,
               batch: int = 1, dtypes: tuple[str, ...] = ("float32", "float16"), device: str = "cuda",
               seed: int = 0, fuse: bool = True, arch: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per family x task x size x dtype. A model that fails to build or capture is recorded
    as an ``"error"`` row (with the message) so that one broken family does not hide the rest.
    ``arch``: run an architecture variant (``build_probe_model``); its rows carry ``"arch"``."""
    from ..registry import families as registered

    fams = registered()
    names = families or sorted(fams)
    rows: list[dict[str, Any]] = []
    for name in names:
        cls = fams[name]
        for task in cls.TASKS:
            for size in cls.SIZES:
                if sizes and size not in sizes:
                    continue
                base = {"family": name, "task": task, "size": size, "imgsz": imgsz, "batch": batch}
                if arch:
                    base["arch"] = dict(arch)
                try:
                    model = build_probe_model(cls, size=size, task=task, device=device, seed=seed, fuse=fuse,
                                              arch=arch, imgsz=imgsz)
                except Exception as e:  # noqa: BLE001 - recorded as an error row (documented above)
                    logger.warning("parity: cannot build %s-%s (%s): %s", name, size, task, e)
                    rows += [{**base, "dtype": d, "result": "error", "error": f"build: {type(e).__name__}: {e}"}
                             for d in dtypes]
                    continue
                for dname in dtypes:
                    shape = (batch, 3, imgsz, imgsz)
                    try:
                        row = check_prepared_parity(model, shape=shape, dtype=DTYPES[dname], seed=seed)
                    except Exception as e:  # noqa: BLE001 - recorded as an error row (documented above)
                        logger.warning("parity: %s-%s %s failed: %s", name, size, dname, e)
                        row = {"result": "error", "error": f"{type(e).__name__}: {str(e)[:500]}"}
                    rows.append({**base, "dtype": dname, **row})
                    logger.info("parity %s-%s %s %s: %s", name, size, task, dname, row["result"])
                del model
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
    return rows


def environment(*, commit: str | None = None) -> dict[str, Any]:
    """Torch/CUDA/GPU versions, date and commit for the matrix header. The commit: ``commit``, else
    ``$LIBREYOLO_COMMIT`` (benchmarks/run.py sets it: the GPU machine's copy of the tree can carry a
    stale ``.git`` whose HEAD is not the commit that was sent), else git's HEAD."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "gpu": gpu,
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit or _os.environ.get("LIBREYOLO_COMMIT") or git_commit(),
    }


def git_commit() -> str:
    """``git rev-parse HEAD`` of the source tree (with ``+dirty`` if it has changes), or ``"unknown"``."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        import os

        return os.environ.get("LIBREYOLO_COMMIT", "unknown")
    return sha + ("+dirty" if dirty else "")


def write_matrix(rows: list[dict[str, Any]], *, env: dict[str, Any], settings: dict[str, Any],
                 json_path: Path, md_path: Path) -> None:
    """Write the matrix as JSON (the contract the flags test reads) and as a markdown table."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": SCHEMA, "environment": env, "settings": settings, "rows": rows}
    json_path.write_text(json.dumps(_clean(doc), indent=1, allow_nan=False) + "\n")
    md_path.write_text(render_markdown(doc))


def _clean(v: Any) -> Any:
    """Strict JSON: non-finite floats become strings, unknown objects their ``str``."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def render_markdown(doc: dict[str, Any]) -> str:
    env, st = doc["environment"], doc["settings"]
    lines = [
        "# CUDA-graph parity matrix (prediction)",
        "",
        "Generated by `benchmarks/parity_predict.py` from a real GPU run; do not edit by hand.",
        "A row passes when graph replay equals eager with `torch.equal` on every output, on two probe",
        "inputs from different distributions, after the capture and after a later replay.",
        "",
        f"- GPU: {env['gpu']} · torch {env['torch']} (CUDA {env['cuda']}, cuDNN {env['cudnn']})",
        f"- latest run: {env['date']} · commit `{env['commit']}`; each row names the commit of its run",
        f"- input: batch x px per row (last run's default: batch {st.get('batch')}, {st.get('imgsz')} px); models "
        f"untrained (seed {st.get('seed')}), fused={st.get('fuse')}; probes: {', '.join(st.get('probes', []))}",
        "",
        "| family | task | size | input | dtype | result | probe 1 | probe 2 | capture ms | commit | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        probes = list((r.get("probes") or {}).values())

        def cell(i: int, probes: list[dict[str, Any]] = probes) -> str:
            if i >= len(probes):
                return "-"
            p = probes[i]
            return "equal" if p["equal"] else f"differs ({p['max_abs_diff']})"

        notes = r.get("error") or ", ".join(
            k for k in ("eager_deterministic", "copy_out_ok", "probes_differ") if r.get(k) is False
        )
        if r.get("stages") and len(r["stages"]) > 1:
            notes = (notes + "; " if notes else "") + "seam: " + " > ".join(
                s["name"] + ("" if s["captured"] else " (eager)") for s in r["stages"])
        inp = f"{r.get('batch', st.get('batch'))}x{r.get('imgsz', st.get('imgsz'))}"
        size = r["size"] + "".join(f" ({k}={v})" for k, v in sorted((r.get("arch") or {}).items()))
        lines.append(f"| {r['family']} | {r['task']} | {size} | {inp} | {r['dtype']} | **{r['result']}** | "
                     f"{cell(0)} | {cell(1)} | {r.get('capture_ms', '-')} | {r.get('commit', env['commit'])} | {notes} |")
    return "\n".join(lines) + "\n"


def row_key(r: dict[str, Any]) -> tuple:
    """What makes a prediction-matrix row unique: family, task, size, dtype and the architecture
    variant (``arch``; none for the default architecture)."""
    arch = tuple(sorted((r.get("arch") or {}).items()))
    return (r["family"], r["task"], r["size"], r["dtype"], arch)


def merge_rows(docs: list[dict[str, Any]], *, key: Callable[[dict[str, Any]], tuple]) -> list[dict[str, Any]]:
    """Rows of several matrix documents (oldest first) as one list: a later row replaces an
    earlier one with the same ``key``; every row keeps the ``commit`` and ``date`` of the run that
    produced it (filled from its document's ``environment`` where the row has none)."""
    merged: dict[tuple, dict[str, Any]] = {}
    for doc in docs:
        env = doc.get("environment", {})
        for r in doc["rows"]:
            r = dict(r)
            r.setdefault("commit", env.get("commit"))
            r.setdefault("date", env.get("date"))
            merged.pop(key(r), None)
            merged[key(r)] = r
    return list(merged.values())


def load_matrix(path: Path) -> dict[str, Any] | None:
    """The committed matrix, or ``None`` when it has not been generated yet."""
    path = Path(path)
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def expected_flag(cls: type[Family], rows: list[dict[str, Any]]) -> tuple[bool, str]:
    """What ``cls.SUPPORTS_CUDA_GRAPH`` must be given the matrix rows, and why.

    True iff the family has at least one row for every declared (task, size) and every row of the
    family's default architecture passes. Rows of an architecture variant (``"arch"``) are
    evidence for that variant: a failing one must be refused at run time by the family's
    ``cuda_graph_refusal`` (a CPU test checks that), it does not decide the flag.
    """
    mine = [r for r in rows if r.get("family") == cls.FAMILY and not r.get("arch")]
    if not mine:
        return False, "no rows in the parity matrix"
    bad = [r for r in mine if r.get("result") != "pass"]
    if bad:
        r = bad[0]
        return False, f"{len(bad)} row(s) not passing, e.g. {r['size']} {r['task']} {r.get('dtype')}: {r.get('result')}"
    missing = [(t, s) for t in cls.TASKS for s in cls.SIZES
               if not any(r.get("task") == t and r.get("size") == s for r in mine)]
    if missing:
        return False, f"no rows for {', '.join(f'{s} ({t})' for t, s in missing)}"
    return True, f"{len(mine)} passing rows"
