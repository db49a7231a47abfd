"""Prediction backed by ONNX Runtime: ``LibreYOLO("model.onnx")``.

The returned object has the same ``predict``/``__call__`` API and Results as a PyTorch model.
The ONNX file's ``libreyolo`` metadata restores family, size, class names and input size; the
family's own eager postprocess decodes the raw outputs, so detections follow the same rules.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import CheckpointError, ConfigError

logger = logging.getLogger(__name__)


def read_metadata(path: str | Path) -> dict[str, Any]:
    try:
        import onnx
    except ImportError as e:
        raise CheckpointError('loading .onnx files needs the onnx extra: pip install "libreyolo[onnx]"') from e
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"ONNX file {str(p)!r} does not exist")
    try:
        proto = onnx.load(str(p), load_external_data=False)
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"cannot read {str(p)!r} as ONNX: {e}") from e
    props = {m.key: m.value for m in proto.metadata_props}
    if "libreyolo" not in props:
        raise CheckpointError(
            f"{str(p)!r} is not a libreyolo ONNX export (no 'libreyolo' metadata); export one with "
            "model.export(format='onnx')"
        )
    return json.loads(props["libreyolo"])


class OnnxModel:
    """A model whose network runs in ONNX Runtime (CUDA provider when present, else CPU)."""

    def __init__(self, path: str | Path, *, device: str | None = None) -> None:
        from ..registry import get_family

        self.meta = read_metadata(path)
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise CheckpointError('ONNX Runtime is not installed: pip install "libreyolo[onnx]"') from e
        cls = get_family(self.meta["family"])
        names = {int(k): v for k, v in self.meta["names"].items()}
        # The family object supplies names, stride and the eager postprocess; its torch network
        # is never run.
        self.family = cls(size=self.meta["size"], task=self.meta["task"], nc=int(self.meta["nc"]),
                          names=names, imgsz=int(self.meta["imgsz"][0]))
        available = ort.get_available_providers()
        want_cuda = device not in ("cpu",) and "CUDAExecutionProvider" in available
        providers = (["CUDAExecutionProvider"] if want_cuda else []) + ["CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(path), providers=providers)
        self.path = str(path)
        self.input_name = self.session.get_inputs()[0].name
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.half = bool(self.meta.get("half"))
        self.fixed_batch = None if self.meta.get("dynamic") else int(self.meta.get("batch", 1))
        self.fixed_hw = None if self.meta.get("dynamic") else tuple(self.meta["imgsz"])
        logger.info("ONNX Runtime session on %s", self.session.get_providers()[0])

    # what the predictor asks of a model -----------------------------------------------------
    FAMILY = property(lambda self: self.family.FAMILY)
    names = property(lambda self: self.family.names)
    nc = property(lambda self: self.family.nc)
    task = property(lambda self: self.family.task)
    OUTPUT_KIND = property(lambda self: self.family.OUTPUT_KIND)  # boxes or probs: how predict fills Results
    imgsz = property(lambda self: self.family.imgsz)
    stride = property(lambda self: self.family.stride)
    net = property(lambda self: self.family.net)
    device = property(lambda self: torch.device("cpu"))

    def to(self, device: Any) -> OnnxModel:
        return self  # the session's provider was chosen at load time

    def forward(self, x: torch.Tensor, *, cuda_graph: Any = False, amp_dtype: Any = None) -> list[torch.Tensor]:
        if cuda_graph is not False:
            raise ConfigError("cuda_graph applies to PyTorch models; ONNX Runtime models run as exported")
        if self.fixed_hw is not None and tuple(x.shape[2:]) != self.fixed_hw:
            raise ConfigError(f"this ONNX file was exported for imgsz={list(self.fixed_hw)}; pass that imgsz "
                              "or export with dynamic=True")
        arr = x.detach().cpu().numpy().astype(np.float16 if self.half else np.float32)
        if self.fixed_batch is not None and arr.shape[0] != self.fixed_batch:
            outs = [self._run(arr[i : i + 1]) for i in range(arr.shape[0])] if self.fixed_batch == 1 else None
            if outs is None:
                raise ConfigError(f"this ONNX file was exported for batch={self.fixed_batch}")
            return [torch.cat([o[k] for o in outs]) for k in range(len(self.output_names))]
        return self._run(arr)

    def _run(self, arr: np.ndarray) -> list[torch.Tensor]:
        outs = self.session.run(self.output_names, {self.input_name: arr})
        return [torch.from_numpy(np.asarray(o)).float() for o in outs]

    def postprocess(self, raw: Any, **kw: Any) -> list[torch.Tensor]:
        return self.family.postprocess(raw, **kw)

    def predict(self, source: Any = None, **kw: Any) -> Any:
        """Same arguments as :meth:`Family.predict` (cuda_graph must stay False)."""
        from ..engine.predictor import PredictOptions, predict

        stream = kw.pop("stream", False)
        from ..models._base.family import Family

        defaults = {k: v.default for k, v in __import__("inspect").signature(Family.predict).parameters.items()
                    if k not in ("self", "source", "stream")}
        unknown = [k for k in kw if k not in defaults]
        if unknown:
            from ..errors import check_keys

            check_keys(unknown, defaults, what="predict")
        if self.fixed_hw is not None and "rect" not in kw:
            kw["rect"] = False  # a fixed-shape export takes only its own (square) imgsz
        opts = PredictOptions.build(model=self, **{**defaults, **kw})
        gen = predict(self, source, opts)
        return gen if stream else list(gen)

    __call__ = predict

    def __repr__(self) -> str:
        return f"OnnxModel({self.path!r}, family={self.FAMILY!r}, providers={self.session.get_providers()})"
