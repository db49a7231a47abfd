"""OpenVINO export (``format="openvino"``) and its backend: ``LibreYOLO("x_openvino_model/")``.

The model is the ONNX export (:func:`libreyolo.export.onnx.onnx_proto`: the same portable
graph, the decode and the ``NonMaxSuppression`` node inside when asked) read by
OpenVINO's ONNX frontend and written as OpenVINO IR: a folder ``<stem>_openvino_model/``
holding ``<stem>.xml`` (the graph), ``<stem>.bin`` (the weights, float32 unless ``half=True``)
and ``libreyolo.json`` (the export's metadata). ``LibreYOLO`` opens the folder or its ``.xml``.
Needs ``pip install "libreyolo[openvino]"``; runs on the CPU device of OpenVINO Runtime.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import Tensor

from ..backends.exported import ExportedBackend
from ..errors import CheckpointError, ExportError
from .config import ExportConfig
from .staging import locate_staged, staged_folder

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)



def _require_openvino(error: type[Exception]) -> Any:
    try:
        import openvino
    except ImportError as e:
        raise error('OpenVINO export and loading need the openvino extra: pip install "libreyolo[openvino]"') from e
    return openvino


def export_openvino(model: Family, cfg: ExportConfig) -> Path:
    """Write ``model`` as an OpenVINO IR folder; returns the folder."""
    import dataclasses

    from .onnx import onnx_proto
    from .registry import get_format

    ov = _require_openvino(ExportError)
    folder = get_format("openvino").output_path(cfg.file, f"Libre{model.NAME_TOKEN}{model.size}")
    stem = folder.name[: -len("_openvino_model")] or "model"
    folder.parent.mkdir(parents=True, exist_ok=True)
    # the ONNX graph carries the metadata; OpenVINO gets the same keys in libreyolo.json
    proto = onnx_proto(model, dataclasses.replace(cfg, format="onnx"), where=folder.parent / f".{stem}.onnx")
    meta = json.loads({p.key: p.value for p in proto.metadata_props}["libreyolo"])
    meta["format"] = "openvino"
    fit_gather_elements(proto)
    with staged_folder(folder, meta) as scratch:
        onnx_file = scratch / f"{stem}.onnx"
        onnx_file.write_bytes(proto.SerializeToString())
        try:
            # the runtime's ONNX frontend (Core.read_model), not openvino.convert_model: the
            # converter tool sends usage telemetry unless opted out, and an export must not
            # make network requests
            ov_model = ov.Core().read_model(str(onnx_file))
            ov.save_model(ov_model, str(scratch / f"{stem}.xml"), compress_to_fp16=bool(cfg.half))
        except Exception as e:  # noqa: BLE001 - converter failures become one typed error
            raise ExportError(f"OpenVINO conversion of {model.FAMILY}-{model.size} failed: {e}") from e
        onnx_file.unlink()
    logger.info("exported %s-%s to %s", model.FAMILY, model.size, folder)
    return folder


def fit_gather_elements(proto: Any) -> int:
    """Rewrite, in place, each ``Slice`` that feeds a ``GatherElements`` and keeps the leading
    ``e`` entries of one other axis (starts 0, step 1, a constant end not past the extent) as
    the equivalent ``Gather`` of indices ``0 .. e-1``; returns how many were rewritten.

    OpenVINO 2026.4 folds such a slice into the ``GatherElements`` and then rejects the node for
    data wider than its indices (YOLOX's decode); the ``Gather`` reads the same elements and is
    left alone.
    """
    import onnx
    from onnx import helper, numpy_helper

    g = onnx.shape_inference.infer_shapes(proto).graph
    shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
              for vi in (*g.value_info, *g.input, *g.output)}
    producer = {out: n for n in proto.graph.node for out in n.output}
    inits = {t.name: t for t in proto.graph.initializer}

    def const(name: str) -> np.ndarray | None:
        if name in inits:
            return numpy_helper.to_array(inits[name])
        node = producer.get(name)
        if node is not None and node.op_type == "Constant" and node.attribute:
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    changed = 0
    for node in proto.graph.node:
        if node.op_type != "GatherElements":
            continue
        sl = producer.get(node.input[0])
        if sl is None or sl.op_type != "Slice" or len(sl.input) < 4:
            continue
        starts, ends, axes = (const(n) for n in sl.input[1:4])
        steps = const(sl.input[4]) if len(sl.input) > 4 and sl.input[4] else np.ones(1, np.int64)
        src = shapes.get(sl.input[0]) or []  # the sliced tensor's shape, where inference knows it
        gather_axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if any(v is None or v.size != 1 for v in (starts, ends, axes, steps)):
            continue
        axis, end = int(axes[0]), int(ends[0])
        if axis < 0:
            if not src:
                continue
            axis %= len(src)
        known = src[axis] if axis < len(src) else None
        if int(starts[0]) != 0 or int(steps[0]) != 1 or axis == gather_axis or gather_axis < 0 or end <= 0 \
                or end >= 2**31 or (known is not None and end > known):
            continue  # (an unknown extent: the end is an explicit leading count, as x[..., :4] traces)
        name = f"{sl.name or sl.output[0]}_indices"
        proto.graph.initializer.append(numpy_helper.from_array(np.arange(end, dtype=np.int64), name))
        data = sl.input[0]
        sl.op_type = "Gather"
        del sl.input[:]
        sl.input.extend([data, name])
        del sl.attribute[:]
        sl.attribute.append(helper.make_attribute("axis", axis))
        changed += 1
    return changed


def _locate(path: Path) -> tuple[Path, Path]:
    """(the IR's .xml, its libreyolo.json) for an IR folder or its .xml."""
    return locate_staged(path, suffix=".xml", runtime="OpenVINO", fmt="openvino")


class OpenVINOBackend(ExportedBackend):
    """A model whose network runs in OpenVINO Runtime (its ``CPU`` device unless ``device`` names
    another OpenVINO device, e.g. ``"GPU"``)."""

    FORMAT = "OpenVINO"

    def __init__(self, path: str | Path, *, device: str | None = None) -> None:
        ov = _require_openvino(CheckpointError)
        xml, meta_file = _locate(Path(path))
        super().__init__(path, json.loads(meta_file.read_text()))
        ov_device = "CPU" if device in (None, "cpu") else str(device).upper()
        core = ov.Core()
        try:
            # f32 unless exported half: OpenVINO would otherwise pick bf16 on CPUs that have it
            hint = {"INFERENCE_PRECISION_HINT": "f16" if self.half else "f32"}
            self.compiled = core.compile_model(str(xml), ov_device, hint)
        except Exception as e:  # noqa: BLE001 - e.g. an unknown device name
            raise CheckpointError(f"OpenVINO cannot compile {xml.name} for device {ov_device!r}: {e}") from e
        self.request = self.compiled.create_infer_request()
        logger.info("OpenVINO model %s compiled for %s", xml.name, ov_device)

    def _run(self, x: Tensor) -> list[Tensor]:
        res = self.request.infer({0: x.numpy()})
        return self._as_tensors([res[out] for out in self.compiled.outputs])
