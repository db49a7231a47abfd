"""What every exported-model backend shares: ``LibreYOLO("x.onnx" | "x.torchscript" | ...)``.

A backend subclass opens the file and runs it (:meth:`ExportedBackend._run`: float32 numpy or
torch batch -> output tensors). ``LibreYOLO`` wraps it in the same :class:`~libreyolo.model.Model`
as a PyTorch network, so ``predict`` / ``__call__`` / ``track`` / ``val`` take the same keywords
and give the same Results; the validator runs it through :attr:`ExportedBackend.net`, a module
that calls the runtime. The file's ``libreyolo`` metadata restores family, size, class names,
input size and what the graph returns (its ``head``):

- ``raw``: the family's own eager postprocess decodes the outputs, as in PyTorch prediction;
- ``decode``: the graph returns the family's fixed-size candidates; only thresholding, ``classes``,
  NMS (dense heads) and ``max_det`` run here (:func:`libreyolo.ops.candidates.select_detections`);
- ``nms``: the graph returns final detections (NMS at the exported ``iou``); ``conf``,
  ``classes`` and ``max_det`` still filter them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import ConfigError

logger = logging.getLogger(__name__)


class RuntimeNet(nn.Module):
    """``net(x)`` for code that runs a network (the validator): calls the backend's runtime.
    Holds one empty parameter so that ``next(net.parameters()).device`` answers the CPU."""

    def __init__(self, owner: ExportedBackend) -> None:
        super().__init__()
        self._owner = [owner]
        self.anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def forward(self, x: Tensor) -> Any:
        return self._owner[0].forward(x)


class ExportedBackend:
    """Base of the exported-model backends; ``meta`` is the export's metadata dict."""

    FORMAT = ""
    kind = "exported"
    exported = True
    DECODE_TOPK = 0  # a decode inside the export is its head ("decode"); the predictor never adds one

    def __init__(self, path: str | Path, meta: dict[str, Any]) -> None:
        from ..registry import get_family

        self.path = str(path)
        self.meta = meta
        cls = get_family(meta["family"])
        names = {int(k): v for k, v in meta["names"].items()}
        # The family object supplies names, stride and the eager postprocess; its torch network
        # is never run.
        self.family = cls(size=meta["size"], task=meta["task"], nc=int(meta["nc"]), names=names,
                          imgsz=int(meta["imgsz"][0]))
        if meta.get("arch") and hasattr(self.family, "set_arch"):  # e.g. the keypoint count of a pose head
            self.family.set_arch(**meta["arch"])
        self.head = str(meta.get("head", "raw"))
        self.half = bool(meta.get("half"))
        dyn = set(meta.get("dynamic_axes") or (("batch", "height", "width") if meta.get("dynamic") else ()))
        self.fixed_batch = None if "batch" in dyn else int(meta.get("batch", 1))
        self.fixed_hw = None if {"height", "width"} <= dyn else tuple(int(v) for v in meta["imgsz"])
        self.train_args: dict[str, Any] = {}
        self._net = RuntimeNet(self)
        self._warned: set[str] = set()

    # what the predictor and validator ask of a model ------------------------------------------
    FAMILY = property(lambda self: self.family.FAMILY)
    names = property(lambda self: self.family.names)
    nc = property(lambda self: self.family.nc)
    task = property(lambda self: self.family.task)
    size = property(lambda self: self.family.size)
    OUTPUT_KIND = property(lambda self: self.family.OUTPUT_KIND)  # boxes or probs: how predict fills Results
    imgsz = property(lambda self: self.family.imgsz)
    stride = property(lambda self: self.family.stride)
    net = property(lambda self: self._net)
    device = property(lambda self: torch.device("cpu"))

    def to(self, device: Any) -> ExportedBackend:
        return self  # the runtime's device was chosen at load time

    def train_stages(self) -> None:
        return None

    def forward(self, x: Tensor, *, cuda_graph: Any = False, amp_dtype: Any = None,
                decoded: bool = False) -> list[Tensor]:
        """Tensor[B, 3, H, W] float in [0, 1] -> the graph's outputs as float32 CPU tensors."""
        if cuda_graph is not False:
            raise ConfigError(f"cuda_graph applies to PyTorch models; {self.FORMAT} models run as exported")
        if decoded:
            raise ConfigError(f"a {self.FORMAT} export returns what its head was exported as ({self.head!r})")
        if self.fixed_hw is not None and tuple(x.shape[2:]) != self.fixed_hw:
            raise ConfigError(f"this {self.FORMAT} export was made for imgsz={list(self.fixed_hw)}; pass that "
                              "imgsz or export with dynamic=True")
        x = x.detach().to("cpu", torch.float16 if self.half else torch.float32)
        if self.fixed_batch is not None and x.shape[0] != self.fixed_batch:
            if self.fixed_batch != 1:
                raise ConfigError(f"this {self.FORMAT} export was made for batch={self.fixed_batch}")
            outs = [self._run(x[i : i + 1]) for i in range(x.shape[0])]
            return [torch.cat([o[k] for o in outs]) for k in range(len(outs[0]))]
        return self._run(x)

    def _run(self, x: Tensor) -> list[Tensor]:
        """One batch through the runtime (``x`` on the CPU, in the export's dtype)."""
        raise NotImplementedError

    @staticmethod
    def _as_tensors(outs: Any) -> list[Tensor]:
        return [torch.from_numpy(np.ascontiguousarray(o)).float() if isinstance(o, np.ndarray)
                else torch.as_tensor(o).float() for o in outs]

    def postprocess(self, raw: Any, *, conf: float, iou: float, classes: list[int] | None, max_det: int,
                    agnostic: bool) -> list[Tensor]:
        """The graph's outputs -> per image Tensor[n, 6] (or class probabilities), as
        :meth:`~libreyolo.models._base.family.Family.postprocess` returns them."""
        if self.head == "raw" or self.OUTPUT_KIND == "probs":
            return self.family.postprocess(raw, conf=conf, iou=iou, classes=classes, max_det=max_det,
                                           agnostic=agnostic)
        from ..ops.candidates import select_detections

        cands = raw[0] if isinstance(raw, (list, tuple)) else raw  # (B, k, 6)
        if classes is not None:
            wanted = torch.as_tensor(list(classes), dtype=cands.dtype)
            cands = cands.clone()
            cands[..., 4] = torch.where(torch.isin(cands[..., 5], wanted), cands[..., 4], -1.0)
        if self.head == "nms":
            self._check_baked(iou=iou, agnostic=agnostic, conf=conf)
            return select_detections(cands, conf=conf, iou=iou, max_det=max_det, agnostic=agnostic, nms=False)
        return select_detections(cands, conf=conf, iou=iou, max_det=max_det, agnostic=agnostic,
                                 nms=bool(self.meta.get("decode_nms", True)))

    def _check_baked(self, *, iou: float, agnostic: bool, conf: float) -> None:
        baked_conf = self.meta.get("conf")
        if baked_conf is not None and conf < baked_conf and "conf" not in self._warned:
            self._warned.add("conf")
            logger.warning("%s: this export keeps only scores above conf=%s; conf=%s finds nothing more",
                           Path(self.path).name, baked_conf, conf)
        for key, asked, baked in (("iou", iou, self.meta.get("iou")), ("agnostic_nms", agnostic,
                                                                       self.meta.get("agnostic_nms"))):
            if baked is not None and asked != baked and key not in self._warned and self.meta.get("decode_nms", True):
                self._warned.add(key)
                logger.warning("%s: NMS is inside this export with %s=%s; the %s=%s asked for has no effect",
                               Path(self.path).name, key, baked, key, asked)

    # what a model asks of its backend ---------------------------------------------------------
    def prepared(self, *, half: bool = False, fuse: bool = True) -> ExportedBackend:
        """An export is prepared as it was exported: itself."""
        return self

    def fuse(self) -> None:
        """An export was fused (or not) when it was written; nothing to do."""

    def invalidate(self, reason: str) -> None:
        """An export holds no CUDA graphs; nothing to drop."""

    drop_prepared = release = invalidate

    def predict_options(self, kw: dict[str, Any]) -> dict[str, Any]:
        """A fixed-shape export takes only its own (square) imgsz: no rectangular letterbox."""
        return {**kw, "rect": False} if self.fixed_hw is not None else kw

    def val_overrides(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """A fixed-shape export validates at its own ``imgsz`` (default) and batch 1 runs image by
        image; ``half`` is refused (the export runs in the precision it was exported in)."""
        if self.fixed_hw is not None:
            want = int(self.fixed_hw[0])
            if self.fixed_hw[0] != self.fixed_hw[1]:
                raise ConfigError(f"val letterboxes to a square; this export is {list(self.fixed_hw)}: "
                                  "export a square imgsz (or dynamic=True) to validate it")
            if overrides.get("imgsz") not in (None, want):
                raise ConfigError(f"this {self.FORMAT} export was made for imgsz={want}; validate with that imgsz")
            overrides = {**overrides, "imgsz": want}
        if overrides.get("half"):
            raise ConfigError(f"half applies to PyTorch models; a {self.FORMAT} export runs in the precision "
                              "it was exported in")
        return overrides

    def refuse(self, verb: str) -> None:
        """Raise for what an exported model cannot do (train, export, save, quantize, capture)."""
        name = Path(self.path).name
        if verb == "train":
            raise ConfigError(f"{name} is an exported {self.FORMAT} model and cannot train; train the "
                              "PyTorch weights (.pt) and export again")
        if verb == "export":
            from ..errors import ExportError

            raise ExportError(f"{name} is already an exported {self.FORMAT} model; export from the "
                              "PyTorch weights (.pt) instead")
        raise ConfigError(f"{verb} applies to PyTorch models; {name} is an exported {self.FORMAT} model")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, family={self.FAMILY!r}, head={self.head!r})"
