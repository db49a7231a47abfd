"""ExecuTorch export (``format="executorch"``) and its backend: ``LibreYOLO("x_executorch_model/")``.

The program is ``torch.export.export`` (non-strict) of :class:`~libreyolo.export.graph.ExportGraph`,
lowered by ExecuTorch's ``to_edge_transform_and_lower`` with the XNNPACK partitioner (float32:
convolutions, activations, pooling and matrix products run in XNNPACK; what XNNPACK does not
take, such as the upsampling or the decode's ``topk`` / ``gather``, runs in ExecuTorch's portable
kernels) and serialised by ``to_executorch()``: a folder ``<stem>_executorch_model/`` holding
``model.pte`` (the program, weights inside) and ``libreyolo.json`` (the export's metadata).
``LibreYOLO`` opens the folder or its ``.pte``. Needs ``pip install "libreyolo[executorch]"``.

``torch.export`` runs under ``torch.compiler.is_exporting()``, which every accelerated-kernel
predicate and the fused-attention policy decline under (SPEC K-6, K-9): the program holds the
portable math. Before the folder is written the program is loaded into the ExecuTorch runtime
and run on the example input; an operator the runtime lacks or a result that differs from
PyTorch is an :class:`~libreyolo.errors.ExportError` that names it.

Limits, checked at export: one fixed input shape (any fixed batch), float32, and the raw
outputs or ``decode=True``; ``nms=True`` is refused (torchvision's ``nms`` has a data-dependent
output size that ``torch.export`` cannot trace, and ExecuTorch has no kernel for it).
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..backends.exported import ExportedBackend
from ..errors import CheckpointError, ConfigError, ExportError
from .config import ExportConfig
from .staging import locate_staged, staged_folder

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

PTE_FILE = "model.pte"
INSTALL = 'pip install "libreyolo[executorch]"'
VERIFY_TOL = 1e-3  # absolute plus relative, on the example input, before the folder is written


def _require(module: str, error: type[Exception]) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise error(f"ExecuTorch export and loading need {module} (the executorch extra): {INSTALL}") from e


def _runtime(error: type[Exception]) -> Any:
    """ExecuTorch's process-wide runtime (its operator and backend registries)."""
    return _require("executorch.runtime", error).Runtime.get()


def _reason(e: BaseException, limit: int = 400) -> str:
    """The message line of an exporter's error (``torch.export`` puts a dump of the graph
    first) and where it arose: the user frame it names (``The following call raised this
    error: File ...``), else its ``Caused by: (file:line in fn)``."""
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    first = next((ln for ln in lines if not ln.startswith((" ", "\t", "def ", "class "))), lines[0] if lines else "")
    out = first.strip()[:limit] or type(e).__name__
    frame = re.search(r'The following call raised this error:\s*File "([^"]+)", line (\d+), in (\S+)', str(e))
    cause = re.search(r"Caused by: \(([^)]*)\)", str(e))
    if frame:
        where = "/".join(Path(frame.group(1)).parts[-2:])
        out += f" (at {where}:{frame.group(2)} in {frame.group(3)})"
    elif cause:
        out += f" (caused by {cause.group(1)})"
    return f"{type(e).__name__}: {out}"


def program_operators(program: Any) -> list[str]:
    """``namespace::name.overload`` of every operator an ExecuTorch program calls outside its
    delegates (``ExecutorchProgramManager.executorch_program``)."""
    ops = set()
    for plan in program.execution_plan:
        for op in plan.operators:
            ops.add(f"{op.name}.{op.overload}" if op.overload else op.name)
    return sorted(ops)


def export_executorch(model: Family, cfg: ExportConfig) -> Path:
    """Write ``model`` as an ExecuTorch folder (``model.pte``, XNNPACK delegate, float32) and
    ``libreyolo.json``; returns the folder."""
    from .graph import build_export_graph
    from .registry import get_format

    if cfg.dynamic:
        raise ExportError("ExecuTorch exports have one fixed input shape here; export with dynamic=False")
    if cfg.half:
        raise ExportError("ExecuTorch exports are float32 (the XNNPACK delegate); export with half=False")
    if cfg.nms:
        raise ExportError("ExecuTorch exports cannot hold NMS (torchvision's nms has a data-dependent output "
                          "size, which torch.export cannot trace and ExecuTorch has no kernel for); export with "
                          "decode=True (candidates; NMS then runs in Python) or the raw outputs")
    _require("executorch.exir", ExportError)
    folder = get_format("executorch").output_path(cfg.file, f"Libre{model.NAME_TOKEN}{model.size}")
    graph, x, meta = build_export_graph(model, cfg)
    if x.device.type != "cpu":
        raise ExportError(f"ExecuTorch exports are made on the CPU; got device={cfg.device!r} (leave device unset)")
    data, ref = lower(graph, x, model=model)
    meta.update(format="executorch", output_shapes=[list(r.shape) for r in ref])
    verify(data, x, ref, model=model, head=meta["head"])
    folder.parent.mkdir(parents=True, exist_ok=True)
    with staged_folder(folder, meta) as scratch:
        (scratch / PTE_FILE).write_bytes(data)
    logger.info("exported %s-%s to %s (%.1f MB)", model.FAMILY, model.size, folder, len(data) / 1e6)
    return folder


def export_program(graph: torch.nn.Module, x: Tensor, *, model: Family) -> tuple[Any, list[Tensor]]:
    """(``torch.export.export(graph, (x,), strict=False)``, PyTorch's outputs at ``x``). Needs
    only PyTorch.

    The graph runs once eagerly first: that fills the family's decode constants (anchor grids)
    with real tensors, which ``torch.export`` then stores as constants; the cache is restored
    afterwards, so nothing built during export stays behind in the caller's model.

    Example:
        >>> import dataclasses
        >>> from libreyolo import LibreYOLO
        >>> from libreyolo.export.config import ExportConfig
        >>> from libreyolo.export.graph import build_export_graph
        >>> model = LibreYOLO("LibreYOLO9t.pt")
        >>> cfg = ExportConfig.from_overrides({"format": "executorch", "imgsz": 64}, default_imgsz=64)
        >>> graph, x, meta = build_export_graph(model.family, cfg)
        >>> ep, ref = export_program(graph, x, model=model.family)
        >>> [tuple(r.shape) for r in ref]
        [(1, 70, 8, 8), (1, 70, 4, 4), (1, 70, 2, 2)]
    """
    name = f"{model.FAMILY}-{model.size}"
    with torch.no_grad():
        ref = graph(x)
    ref = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    cache = model.__dict__.get("_decode_cache")
    saved = dict(cache) if cache is not None else None
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(graph, (x,), strict=False)
    except Exception as e:  # noqa: BLE001 - every tracer failure becomes one typed error
        raise ExportError(f"torch.export cannot export {name}, so it has no ExecuTorch program: "
                          f"{_reason(e)}; export it as onnx, openvino or torchscript") from e
    finally:
        if saved is not None:
            model.__dict__["_decode_cache"] = saved
        elif "_decode_cache" in model.__dict__:
            del model.__dict__["_decode_cache"]
    return ep, ref


def lower(graph: torch.nn.Module, x: Tensor, *, model: Family) -> tuple[bytes, list[Tensor]]:
    """(the serialised ``.pte`` program of ``graph`` at ``x``'s shape, PyTorch's outputs at ``x``):
    :func:`export_program`, then the XNNPACK partitioner and ``to_executorch()``; an operator
    left outside the delegate that the ExecuTorch runtime has no kernel for is refused by name."""
    exir = _require("executorch.exir", ExportError)
    xnnpack = _require("executorch.backends.xnnpack.partition.xnnpack_partitioner", ExportError)
    name = f"{model.FAMILY}-{model.size}"
    ep, ref = export_program(graph, x, model=model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            edge = exir.to_edge_transform_and_lower(ep, partitioner=[xnnpack.XnnpackPartitioner()])
            program = edge.to_executorch()
        except Exception as e:  # noqa: BLE001 - e.g. an operator with no ExecuTorch out-variant
            raise ExportError(f"ExecuTorch cannot lower {name}: {_reason(e)}; export it as onnx, "
                              "openvino or torchscript") from e
    runtime = _runtime(ExportError)
    known = set(runtime.operator_registry.operator_names)
    missing = [op for op in program_operators(program.executorch_program) if op not in known]
    if missing:
        raise ExportError(f"the ExecuTorch runtime has no kernel for {', '.join(missing)} in {name}; export it "
                          "as onnx, openvino or torchscript")
    return bytes(program.buffer), ref


def verify(data: bytes, x: Tensor, ref: list[Tensor], *, model: Family, head: str = "raw") -> None:
    """Run ``data`` in the ExecuTorch runtime on ``x`` and compare with PyTorch's ``ref``: within
    :data:`VERIFY_TOL` element by element, or for a ``decode`` head as candidate sets
    (:func:`same_candidates`: near-tied scores may come out in another order)."""
    name = f"{model.FAMILY}-{model.size}"
    try:
        method = _runtime(ExportError).load_program(data).load_method("forward")
        got = [g.float() for g in method.execute((x.contiguous(),))]
    except Exception as e:  # noqa: BLE001 - a program the runtime refuses is one clear error
        raise ExportError(f"the ExecuTorch runtime cannot run the program of {name}: {_reason(e)}") from e
    ref = [r.float() for r in ref]
    shapes_ok = len(got) == len(ref) and all(g.shape == r.shape for g, r in zip(got, ref, strict=True))
    if shapes_ok and head == "decode":
        ok = all(same_candidates(g, r, tol=VERIFY_TOL) for g, r in zip(got[0], ref[0], strict=True))
    else:
        ok = shapes_ok and all(torch.allclose(g, r, rtol=VERIFY_TOL, atol=VERIFY_TOL)
                               for g, r in zip(got, ref, strict=True))
    if not ok:
        diffs = [float((g - r).abs().max()) if g.shape == r.shape else float("nan")
                 for g, r in zip(got, ref, strict=False)]
        raise ExportError(f"the ExecuTorch program of {name} does not reproduce PyTorch on the example input "
                          f"(largest differences {diffs}); export it as onnx, openvino or torchscript")


def same_candidates(got: Tensor, ref: Tensor, *, tol: float) -> bool:
    """got, ref (Tensor[k, 6], x1, y1, x2, y2, score, class by decreasing score) hold the same
    candidates: scores equal position by position within ``tol``, and every row of each has a row
    of the other with the same class, score within ``tol`` and box within ``tol`` relative to the
    largest coordinate; rows scoring within ``tol`` of the last kept score are exempt (a top-k
    may cut a tie either way).

    Example:
        >>> import torch
        >>> a = torch.tensor([[0., 0., 10., 10., .9, 1.], [5., 5., 9., 9., .5, 0.], [1., 1., 2., 2., .5, 0.]])
        >>> same_candidates(a[[0, 2, 1]], a, tol=1e-3), same_candidates(a[[1, 0, 2]], a, tol=1e-3)
        (True, False)
    """
    if not torch.allclose(got[:, 4], ref[:, 4], atol=tol, rtol=0):
        return False
    if not len(ref):
        return True
    box_tol = tol * (1.0 + float(ref[:, :4].abs().max()))
    floor = float(ref[-1, 4]) + tol
    for a, b in ((got, ref), (ref, got)):
        rows = a[a[:, 4] > floor]
        match = ((rows[:, None, :4] - b[None, :, :4]).abs().amax(-1) <= box_tol) \
            & ((rows[:, None, 4] - b[None, :, 4]).abs() <= tol) & (rows[:, None, 5] == b[None, :, 5])
        if not bool(match.any(1).all()):
            return False
    return True


def _locate(path: Path) -> tuple[Path, Path]:
    """(the .pte, libreyolo.json) for an ExecuTorch folder or its .pte."""
    return locate_staged(path, suffix=".pte", runtime="ExecuTorch", fmt="executorch")


class ExecuTorchBackend(ExportedBackend):
    """A model whose network runs as an ExecuTorch program (XNNPACK delegate and portable
    kernels) on the CPU of the machine running Python."""

    FORMAT = "ExecuTorch"

    def __init__(self, path: str | Path, *, device: str | None = None) -> None:
        if device not in (None, "cpu"):
            raise ConfigError(f"ExecuTorch models run on the CPU here; got device={device!r} (pass device='cpu')")
        pte, meta_file = _locate(Path(path))
        runtime = _runtime(CheckpointError)
        super().__init__(path, json.loads(meta_file.read_text()))
        try:
            self.program = runtime.load_program(pte)
            self.method = self.program.load_method("forward")
        except Exception as e:  # noqa: BLE001 - an unreadable or foreign program is one clear error
            raise CheckpointError(f"the ExecuTorch runtime cannot load {str(pte)!r}: {_reason(e)}") from e
        want = len(self.meta.get("outputs") or ())
        n_out = self.method.metadata.num_outputs()
        if n_out != want:
            raise CheckpointError(f"{pte.name} returns {n_out} output(s); the export's metadata names {want}")

    def _run(self, x: Tensor) -> list[Tensor]:
        outs = self.method.execute((x.contiguous(),))
        return [o.float().clone() for o in outs]
