"""NCNN export (``format="ncnn"``) and its backend: ``LibreYOLO("x_ncnn_model/")``.

The model is the TorchScript trace of :class:`~libreyolo.export.graph.ExportGraph` (the same
program as ``format="torchscript"``), converted by Tencent's ``pnnx`` tool (run as a separate
process) into an NCNN graph: a folder ``<stem>_ncnn_model/`` holding ``model.ncnn.param``
(the graph), ``model.ncnn.bin`` (the weights, float32: pnnx is run with ``fp16=0``) and
``libreyolo.json`` (the export's metadata). ``LibreYOLO`` opens the folder or its ``.param``.
Needs ``pip install "libreyolo[ncnn]"`` (``pnnx`` to export, ``ncnn`` to run); runs on the CPU.

Limits, checked at export: one fixed input shape and batch 1 (NCNN runs one image at a time;
the backend runs a larger batch image by image), float32 only, and the raw head only in
practice: pnnx leaves ``torch.topk``, ``torch.gather`` and the indexing of the decode
unconverted, and an export whose graph holds an operator NCNN lacks is refused naming it (so
are, whatever the head, the families whose network itself holds one: the DETRs' query
selection, YOLOX's strided-slice stem; see docs/export.md).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ..backends.exported import ExportedBackend
from ..errors import CheckpointError, ConfigError, ExportError
from .config import ExportConfig
from .staging import META_FILE, staged_folder

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

PARAM_FILE = "model.ncnn.param"
BIN_FILE = "model.ncnn.bin"
INSTALL = 'pip install "libreyolo[ncnn]"'


def _require(module: str, error: type[Exception]) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise error(f"NCNN export and loading need {module} (the ncnn extra): {INSTALL}") from e


def pnnx_executable() -> Path:
    """The ``pnnx`` converter binary shipped inside the ``pnnx`` wheel."""
    pnnx = _require("pnnx", ExportError)
    exe = Path(pnnx.__file__).resolve().parent / "pnnx"
    if not exe.is_file():
        raise ExportError(f"the pnnx package at {exe.parent} holds no pnnx executable; reinstall it: {INSTALL}")
    return exe


def unconverted_layers(param_text: str) -> list[str]:
    """Layer types of an NCNN ``.param`` that are no NCNN layer: what pnnx left as a PyTorch
    operator (``torch.topk``, ``Tensor.index``, ``pnnx.Expression``, ``aten::nonzero``)."""
    types = [line.split()[0] for line in param_text.splitlines()[2:] if line.strip()]
    return sorted({t for t in types if "." in t or "::" in t})


def export_ncnn(model: Family, cfg: ExportConfig) -> Path:
    """Write ``model`` as an NCNN folder (via TorchScript and pnnx); returns the folder."""
    from .graph import build_export_graph
    from .registry import get_format
    from .torchscript import trace

    if cfg.dynamic:
        raise ExportError("NCNN exports have one fixed input shape; export with dynamic=False")
    if cfg.batch != 1:
        raise ExportError("NCNN runs one image at a time; export with batch=1 (a larger batch runs image by image)")
    if cfg.half:
        raise ExportError("NCNN exports are float32 (NCNN picks its own fp16 storage at run time); "
                          "export with half=False")
    exe = pnnx_executable()
    folder = get_format("ncnn").output_path(cfg.file, f"Libre{model.NAME_TOKEN}{model.size}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    graph, x, meta = build_export_graph(model, cfg)
    traced = trace(graph, x, model=model)
    with torch.no_grad():
        ref = graph(x)
    ref = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    meta.update(format="ncnn", output_shapes=[list(r.shape) for r in ref])
    # the scratch folder is absolute: pnnx runs in a folder of its own and reads every path from there
    with staged_folder(folder, meta) as scratch:
        work = scratch / "pnnx"
        work.mkdir()
        ts = work / "model.pt"
        traced.save(str(ts))
        shape = ",".join(str(int(d)) for d in x.shape)
        outs = {"ncnnparam": scratch / PARAM_FILE, "ncnnbin": scratch / BIN_FILE, "pnnxparam": work / "m.pnnx.param",
                "pnnxbin": work / "m.pnnx.bin", "pnnxpy": work / "m_pnnx.py", "pnnxonnx": work / "m.pnnx.onnx",
                "ncnnpy": work / "m_ncnn.py"}
        cmd = [str(exe), str(ts), f"inputshape=[{shape}]f32", "device=cpu", "fp16=0",
               *(f"{k}={v}" for k, v in outs.items())]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=1800)
        param = scratch / PARAM_FILE
        if proc.returncode != 0 or not param.is_file() or not (scratch / BIN_FILE).is_file():
            tail = (proc.stdout + proc.stderr)[-1500:]
            raise ExportError(f"pnnx could not convert {model.FAMILY}-{model.size} (exit {proc.returncode}): {tail}")
        bad = unconverted_layers(param.read_text())
        if bad and meta["head"] != "raw":
            raise ExportError(f"NCNN has no layer for {', '.join(bad)} in the {meta['head']!r} head of "
                              f"{model.FAMILY}-{model.size} (pnnx left them as PyTorch operators); export "
                              "NCNN with decode=False and nms=False (the raw outputs)")
        if bad:
            raise ExportError(f"NCNN has no layer for {', '.join(bad)} in the network of {model.FAMILY}-"
                              f"{model.size} (pnnx left them as PyTorch operators), so NCNN cannot run this "
                              "family; export it as onnx, openvino or torchscript")
        shutil.rmtree(work)
    logger.info("exported %s-%s to %s", model.FAMILY, model.size, folder)
    return folder


def _locate(path: Path) -> tuple[Path, Path, Path]:
    """(the .param, the .bin, libreyolo.json) for an NCNN folder or its .param."""
    if path.is_dir():
        param = path / PARAM_FILE
    elif path.suffix == ".param" and path.is_file():
        param = path
    else:
        raise CheckpointError(f"NCNN model {str(path)!r} does not exist (pass the *_ncnn_model folder or its "
                              ".param)")
    weights, meta = param.with_name(param.name[: -len(".param")] + ".bin"), param.parent / META_FILE
    if not param.is_file() or not weights.is_file():
        raise CheckpointError(f"{str(path)!r} should hold {PARAM_FILE} and {BIN_FILE}")
    if not meta.is_file():
        raise CheckpointError(f"{str(path)!r} is not a libreyolo NCNN export (no {META_FILE} beside the .param); "
                              "export one with model.export(format='ncnn')")
    return param, weights, meta


class NCNNBackend(ExportedBackend):
    """A model whose network runs in NCNN on the CPU, in float32: the ``use_fp16_*`` and
    ``use_bf16_storage`` options NCNN turns on by default on CPUs that have them are off, so the
    outputs follow PyTorch's float32 (see docs/export.md for the measured gap)."""

    FORMAT = "NCNN"

    def __init__(self, path: str | Path, *, device: str | None = None) -> None:
        ncnn = _require("ncnn", CheckpointError)
        if device not in (None, "cpu"):
            raise ConfigError(f"NCNN models run on the CPU here; got device={device!r} (pass device='cpu')")
        param, weights, meta_file = _locate(Path(path))
        super().__init__(path, json.loads(meta_file.read_text()))
        self._ncnn = ncnn
        net = ncnn.Net()
        opt = net.opt
        opt.use_vulkan_compute = False
        opt.use_fp16_packed = opt.use_fp16_storage = opt.use_fp16_arithmetic = False
        opt.use_bf16_storage = False
        opt.num_threads = max(1, torch.get_num_threads())
        if net.load_param(str(param)) != 0 or net.load_model(str(weights)) != 0:
            raise CheckpointError(f"NCNN cannot load {param.name} / {weights.name} in {str(param.parent)!r}")
        self.ncnn_net = net
        self._inputs, self._outputs = list(net.input_names()), list(net.output_names())
        want = len(self.meta.get("outputs") or ())
        if len(self._inputs) != 1 or len(self._outputs) != want:
            raise CheckpointError(f"{param.name} has inputs {self._inputs} and outputs {self._outputs}; the "
                                  f"export's metadata names {want} output(s)")
        self._shapes = [tuple(s[1:]) for s in self.meta.get("output_shapes") or [[1, -1]] * want]

    def _run(self, x: Tensor) -> list[Tensor]:
        per_image = []
        for img in x:
            arr = np.ascontiguousarray(img.numpy(), dtype=np.float32)  # (3, H, W); kept alive while it runs
            ex = self.ncnn_net.create_extractor()
            ex.input(self._inputs[0], self._ncnn.Mat(arr))
            outs = []
            for name, shape in zip(self._outputs, self._shapes, strict=True):
                ret, mat = ex.extract(name)
                if ret != 0:
                    raise RuntimeError(f"NCNN failed to compute output {name} (code {ret})")
                outs.append(torch.from_numpy(np.array(mat, dtype=np.float32)).reshape(1, *shape))
            per_image.append(outs)
        return [torch.cat([o[k] for o in per_image]) for k in range(len(self._outputs))]
