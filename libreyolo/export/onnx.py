"""ONNX export through the TorchScript-based exporter (``torch.onnx.export(dynamo=False)``).

The traced exporter is used because it is fast, works unchanged from torch 2.11 to 2.14, and
runs under ``torch.onnx.is_in_onnx_export()``, which every accelerated-kernel predicate and the
fused-attention policy decline under: the file holds portable math only. The exported network
is a fused copy; the caller's model is not modified.

Graph contract: input ``images`` Tensor[B, 3, H, W] float (RGB, [0, 1], letterboxed);
outputs named by the family's ``OUTPUT_NAMES`` (raw head outputs, decoded by the same eager
postprocess as PyTorch prediction). Metadata: the ``libreyolo`` metadata property holds JSON with
family, task, size, nc, names, imgsz, stride, output names and the libreyolo version.
"""

from __future__ import annotations

import copy
import json
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .._version import __version__
from ..errors import ExportError
from ..ops.letterbox import check_imgsz
from .config import ExportConfig

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

METADATA_KEY = "libreyolo"
# Ops that must never appear: fused attention (opset 23 "Attention") or anything outside the
# standard ONNX domain (custom kernels).
FORBIDDEN_OPS = frozenset({"Attention", "ScaledDotProductAttention", "MultiHeadAttention"})


def _require_onnx() -> Any:
    try:
        import onnx
    except ImportError as e:
        raise ExportError('ONNX export needs the onnx extra: pip install "libreyolo[onnx]"') from e
    return onnx


def output_names(model: Family) -> list[str]:
    names = list(getattr(model, "OUTPUT_NAMES", ()) or ())
    if not names:
        raise ExportError(f"{model.FAMILY} declares no OUTPUT_NAMES, so it cannot be exported yet")
    return names


def portable_op_violations(onnx_model: Any) -> list[str]:
    """Op types in the graph that are custom-domain or fused attention (should be empty)."""
    bad = []
    for node in onnx_model.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type in FORBIDDEN_OPS:
            bad.append(f"{node.domain or 'ai.onnx'}::{node.op_type}")
    return bad


def export_onnx(model: Family, cfg: ExportConfig) -> Path:
    """Write ``model`` as ONNX; returns the path."""
    onnx = _require_onnx()
    from ..models._base.family import select_device

    h, w = check_imgsz(cfg.imgsz, stride=model.stride)
    device = select_device(cfg.device) if cfg.device is not None else torch.device("cpu")
    if cfg.half and device.type != "cuda":
        raise ExportError("half=True exports float16 and needs a CUDA device (device=0)")
    dyn_axes = tuple(getattr(model, "EXPORT_DYNAMIC_AXES", ()))
    if cfg.dynamic and not dyn_axes:
        raise ExportError(f"{model.FAMILY} does not support dynamic axes; export with dynamic=False")
    out_names = output_names(model)
    path = Path(cfg.file) if cfg.file else Path(f"Libre{model.NAME_TOKEN}{model.size}.onnx")
    if path.suffix != ".onnx":
        path = path.with_suffix(".onnx")
    path.parent.mkdir(parents=True, exist_ok=True)

    net = copy.deepcopy(model.net).to(device).eval()
    fuse = getattr(net, "fuse", None)
    if fuse is not None and not model.fused:
        fuse()
    x = torch.rand(cfg.batch, 3, h, w, device=device)
    if cfg.half:
        net, x = net.half(), x.half()
    dynamic_axes = None
    if cfg.dynamic:
        axis_names = {0: "batch", 2: "height", 3: "width"}
        dynamic_axes = {"images": {i: n for i, n in axis_names.items() if n in dyn_axes}}
        for name in out_names:
            dynamic_axes[name] = {0: "batch"} if "batch" in dyn_axes else {}
    # Kill-safe: the exporter writes a partial file next to ``path``; ``path`` itself is only
    # replaced (atomically) by the finished, checked graph, so an interrupted or failed export
    # never leaves a broken .onnx or destroys the previous one.
    from ..io.checkpoint import atomic_write, partial_path, remove_stale_partials

    try:
        remove_stale_partials(path)
        raw = partial_path(path)
    except OSError as e:
        raise ExportError(f"cannot write into '{path.parent}' ({e.strerror or e}); choose another file=") from e
    try:
        proto = _trace(onnx, net, x, raw, cfg=cfg, out_names=out_names, dynamic_axes=dynamic_axes, model=model)
    finally:
        raw.unlink(missing_ok=True)
    meta = {
        "family": model.FAMILY, "task": model.task, "size": model.size, "nc": model.nc,
        "names": {str(k): v for k, v in model.names.items()}, "imgsz": [h, w], "stride": model.stride,
        "batch": cfg.batch, "dynamic": cfg.dynamic, "half": cfg.half, "outputs": out_names,
        "version": __version__,
    }
    del proto.metadata_props[:]
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps(meta)
    if cfg.simplify:
        proto = _simplify(proto)
    bad = portable_op_violations(proto)
    if bad:
        raise ExportError(f"exported graph contains non-portable ops {sorted(set(bad))}; this is a bug")
    onnx.checker.check_model(proto)
    data = proto.SerializeToString()
    atomic_write(path, lambda f: f.write(data), what="the ONNX file", error=ExportError)
    logger.info("exported %s-%s to %s (%d nodes)", model.FAMILY, model.size, path, len(proto.graph.node))
    return path


def _trace(onnx: Any, net: Any, x: Any, raw: Path, *, cfg: ExportConfig, out_names: list[str],
           dynamic_axes: Any, model: Family) -> Any:
    """Run the TorchScript-based exporter into ``raw`` and load the graph it wrote."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        try:
            torch.onnx.export(
                net, (x,), str(raw), dynamo=False, opset_version=cfg.opset,
                input_names=["images"], output_names=out_names, dynamic_axes=dynamic_axes,
                do_constant_folding=True,
            )
        except Exception as e:  # noqa: BLE001 - surface exporter failures as one typed error
            raise ExportError(f"ONNX export of {model.FAMILY}-{model.size} failed: {e}") from e
    return onnx.load(str(raw))


def _simplify(proto: Any) -> Any:
    try:
        import onnxslim
    except ImportError as e:
        raise ExportError("simplify=True needs onnxslim: pip install onnxslim") from e
    props = list(proto.metadata_props)
    out = onnxslim.slim(proto)
    del out.metadata_props[:]
    out.metadata_props.extend(props)
    return out
