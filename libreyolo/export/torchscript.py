"""TorchScript export (``format="torchscript"``) and its backend: ``LibreYOLO("x.torchscript")``.

The file is ``torch.jit.trace`` of :class:`~libreyolo.export.graph.ExportGraph` (the fused
network, with ``decode=True`` / ``nms=True`` the family's decode and a fixed-size NMS inside),
saved with ``torch.jit.save``; the export's metadata is the extra file ``libreyolo.json`` inside
the archive. Tracing runs under ``torch.jit.is_tracing()``, which every accelerated-kernel
predicate and the fused-attention policy decline under (SPEC K-6, K-9): the program holds the
portable math. Loading needs only PyTorch (and torchvision, whose ``nms`` an ``nms=True``
export calls); ``torch.jit.load`` interprets the saved TorchScript program, it runs no Python
code from the file.

A traced program is specialised to what the trace saw where the network reads shapes: with
``dynamic=True`` the export is re-run at another batch (and, for raw outputs, another size)
and compared with PyTorch before it is written, and refused when it does not follow.
"""

from __future__ import annotations

import io
import json
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..backends.exported import ExportedBackend
from ..errors import CheckpointError, ExportError
from .config import ExportConfig
from .graph import build_export_graph
from .staging import META_FILE

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)



def export_torchscript(model: Family, cfg: ExportConfig) -> Path:
    """Write ``model`` as a traced TorchScript archive; returns the path."""
    from ..io.checkpoint import atomic_write
    from .registry import get_format

    path = get_format("torchscript").output_path(cfg.file, f"Libre{model.NAME_TOKEN}{model.size}")
    path.parent.mkdir(parents=True, exist_ok=True)
    graph, x, meta = build_export_graph(model, cfg)
    traced = trace(graph, x, model=model)
    if cfg.dynamic:
        _check_dynamic(traced, graph, x, meta)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=FutureWarning)
        torch.jit.save(traced, buf, _extra_files={META_FILE: json.dumps(meta)})
    data = buf.getvalue()
    atomic_write(path, lambda f: f.write(data), what="the TorchScript file", error=ExportError)
    logger.info("exported %s-%s to %s", model.FAMILY, model.size, path)
    return path


def trace(graph: torch.nn.Module, x: Tensor, *, model: Family) -> Any:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        warnings.simplefilter("ignore", category=FutureWarning)  # torch deprecates torch.jit; see docs/export.md
        try:
            return torch.jit.trace(graph, (x,), check_trace=False, strict=False)
        except Exception as e:  # noqa: BLE001 - surface tracer failures as one typed error
            raise ExportError(f"TorchScript export of {model.FAMILY}-{model.size} failed: {e}") from e


def _check_dynamic(traced: Any, graph: torch.nn.Module, x: Tensor, meta: dict[str, Any]) -> None:
    """Run the traced program on a batch of another size (and another H, W when those axes are
    dynamic) and compare with the module it was traced from."""
    b, _, h, w = x.shape
    s = int(meta["stride"])
    probe_hw = (h + s, w) if "height" in meta["dynamic_axes"] else (h, w)
    probe = torch.rand(b + 1, 3, *probe_hw, dtype=x.dtype, device=x.device)
    with torch.no_grad():
        try:
            got, want = _flat(traced(probe)), _flat(graph(probe))
            ok = len(got) == len(want) and all(
                g.shape == r.shape and torch.allclose(g.float(), r.float(), rtol=1e-3, atol=1e-3)
                for g, r in zip(got, want, strict=True))
        except RuntimeError:
            ok = False
    if not ok:
        raise ExportError(f"the traced {meta['family']} program does not follow a change of batch or input size; "
                          "export TorchScript with dynamic=False (one fixed batch and imgsz)")


def _flat(out: Any) -> list[Tensor]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


class TorchScriptBackend(ExportedBackend):
    """A model whose network runs as a TorchScript program (on the CPU unless ``device`` says)."""

    FORMAT = "TorchScript"

    def __init__(self, path: str | Path, *, device: str | None = None) -> None:
        import torchvision  # noqa: F401 - registers torchvision::nms, which nms=True programs call

        from ..device import select_device

        p = Path(path)
        if not p.is_file():
            raise CheckpointError(f"TorchScript file {str(p)!r} does not exist")
        self._device = select_device(device) if device is not None else torch.device("cpu")
        extra = {META_FILE: ""}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", category=FutureWarning)
                self.module = torch.jit.load(str(p), map_location=self._device, _extra_files=extra)
        except Exception as e:  # noqa: BLE001 - any unreadable archive is one clear error
            raise CheckpointError(f"cannot read {str(p)!r} as TorchScript: {e}") from e
        if not extra[META_FILE]:
            raise CheckpointError(f"{str(p)!r} is not a libreyolo TorchScript export (no {META_FILE} inside); "
                                  "export one with model.export(format='torchscript')")
        super().__init__(p, json.loads(extra[META_FILE]))
        self.module.eval()

    def _run(self, x: Tensor) -> list[Tensor]:
        with torch.inference_mode():
            out = self.module(x.to(self._device))
        return [o.float().cpu() for o in _flat(out)]
