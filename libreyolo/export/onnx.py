"""ONNX export through the TorchScript-based exporter (``torch.onnx.export(dynamo=False)``).

The traced exporter is used because it is fast, works unchanged from torch 2.11 to 2.14, and
runs under ``torch.onnx.is_in_onnx_export()``, which every accelerated-kernel predicate and the
fused-attention policy decline under: the file holds portable math only. The exported network
is a fused copy; the caller's model is not modified.

Graph contract: input ``images`` Tensor[B, 3, H, W] float (RGB, [0, 1], letterboxed);
outputs as :mod:`libreyolo.export.graph` says: the family's ``OUTPUT_NAMES`` (raw head outputs,
decoded by the same eager postprocess as PyTorch prediction), or with ``decode=True`` one
``candidates`` Tensor[B, k, 6], or with ``nms=True`` one ``detections`` Tensor[B, max_det, 6]
(NMS as the standard ``NonMaxSuppression`` operator). Metadata: the ``libreyolo`` metadata property holds JSON with
family, task, size, nc, names, imgsz, stride, output names, head (raw / decode / nms and its
thresholds) and the libreyolo version.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..errors import ExportError
from .config import ExportConfig
from .graph import METADATA_KEY, build_export_graph
from .graph import output_names as _output_names

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

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
    """The raw outputs' names in an export without the decode inside."""
    return _output_names(model, "raw")


def portable_op_violations(onnx_model: Any) -> list[str]:
    """Op types in the graph that are custom-domain or fused attention (should be empty)."""
    bad = []
    for node in onnx_model.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type in FORBIDDEN_OPS:
            bad.append(f"{node.domain or 'ai.onnx'}::{node.op_type}")
    return bad


def export_opset(model: Family, opset: int) -> int:
    """The opset an export runs at: ``opset``, raised to the family's ``ONNX_MIN_OPSET`` (the first
    opset that has an operator its network needs, e.g. DeformConv: 19) with one warning."""
    need = int(getattr(model, "ONNX_MIN_OPSET", 0) or 0)
    if opset >= need:
        return int(opset)
    logger.warning("%s needs ONNX opset >= %d (an operator of its network first exists there): exporting at "
                   "opset %d instead of %d", model.FAMILY, need, need, opset)
    return need


def export_onnx(model: Family, cfg: ExportConfig) -> Path:
    """Write ``model`` as ONNX; returns the path."""
    from .registry import get_format

    path = get_format("onnx").output_path(cfg.file, f"Libre{model.NAME_TOKEN}{model.size}")
    from ..io.checkpoint import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    proto = onnx_proto(model, cfg, where=path)
    data = proto.SerializeToString()
    atomic_write(path, lambda f: f.write(data), what="the ONNX file", error=ExportError)
    logger.info("exported %s-%s to %s (%d nodes)", model.FAMILY, model.size, path, len(proto.graph.node))
    return path


def onnx_proto(model: Family, cfg: ExportConfig, *, where: Path) -> Any:
    """The checked ONNX graph of ``model`` as ``cfg`` says, with its ``libreyolo`` metadata; the
    exporter's scratch file lives next to ``where`` and is always removed."""
    from ..io.checkpoint import partial_path, remove_stale_partials

    onnx = _require_onnx()
    graph, x, meta = build_export_graph(model, cfg)
    out_names = meta["outputs"]
    dynamic_axes = None
    if cfg.dynamic:
        axis_names = {0: "batch", 2: "height", 3: "width"}
        dyn = meta["dynamic_axes"]
        dynamic_axes = {"images": {i: n for i, n in axis_names.items() if n in dyn}}
        for name in out_names:
            dynamic_axes[name] = {0: "batch"} if "batch" in dyn else {}
    # Kill-safe: the exporter writes a partial file next to ``where``; ``where`` itself is only
    # replaced (atomically) by the finished, checked graph, so an interrupted or failed export
    # never leaves a broken file or destroys the previous one.
    try:
        remove_stale_partials(where)
        raw = partial_path(where)
    except OSError as e:
        raise ExportError(f"cannot write into '{where.parent}' ({e.strerror or e}); choose another file=") from e
    try:
        proto = _trace(onnx, graph, x, raw, cfg=cfg, out_names=out_names, dynamic_axes=dynamic_axes, model=model)
    finally:
        raw.unlink(missing_ok=True)
    del proto.metadata_props[:]
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps(meta)
    if cfg.simplify:
        proto = _simplify(proto)
    bad = portable_op_violations(proto)
    if bad:
        raise ExportError(f"exported graph contains non-portable ops {sorted(set(bad))}; this is a bug")
    onnx.checker.check_model(proto)
    return proto


def _trace(onnx: Any, net: Any, x: Any, raw: Path, *, cfg: ExportConfig, out_names: list[str],
           dynamic_axes: Any, model: Family) -> Any:
    """Run the TorchScript-based exporter into ``raw`` and load the graph it wrote."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        try:
            torch.onnx.export(
                net, (x,), str(raw), dynamo=False, opset_version=export_opset(model, cfg.opset),
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
