"""YOLOv1 detection family: sizes ``tiny`` (``yolov1-tiny.cfg``), ``b`` (the paper's network) and
``darknet`` (the released ``yolov1.cfg``), weights ``LibreYOLO1tiny.pt``, ``LibreYOLO1b.pt``,
``LibreYOLO1darknet.pt``.

A fixed input size: the fully connected head reads the flattened 7 x 7 map of a 448 x 448 input,
so the family declares ``stride == imgsz == 448`` (every input-size check rounds to a multiple of
it) and pins the user path to it: ``predict`` and ``val`` letterbox to the square 448 (another
``imgsz`` is replaced, with a warning), ``train`` refuses another ``imgsz`` with a one-line
:class:`~libreyolo.errors.ConfigError`, an export is made at 448.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, ClassVar

from torch import Tensor, nn

from ...errors import ConfigError
from .._base.family import Family
from .nn import HIDDEN, IMGSZ, SIZES

logger = logging.getLogger(__name__)

_RECIPE: dict[str, object] = {"optimizer": "SGD", "lr0": 1e-4, "momentum": 0.9, "weight_decay": 5e-4,
                              "warmup_bias_lr": 0.0}


class _TrainDefaults:
    """``TRAIN_DEFAULTS``: on the class the recipe (Darknet's SGD, momentum 0.9, decay 5e-4, and
    an lr for a summed loss); on an instance the recipe plus ``imgsz`` = its fixed input size."""

    def __get__(self, obj: Any, cls: type | None = None) -> dict[str, object]:
        if obj is None or "net" not in getattr(obj, "__dict__", {}):
            return dict(_RECIPE)
        return {**_RECIPE, "imgsz": int(obj.net.input_size)}


class YOLO1(Family):
    """YOLOv1 (arXiv:1506.02640): S = 7 grid, B boxes per cell, fully connected head; the paper's
    sum-squared loss (:mod:`.loss`), class-specific confidences then NMS (:mod:`.postprocess`).

    Example:
        >>> m = YOLO1(size="tiny", nc=3, width=1 / 16, input_size=64)  # a test-only width
        >>> m.imgsz, m.stride, m.arch
        (64, 64, {'width': 0.0625, 'input_size': 64})
    """

    FAMILY: ClassVar[str] = "yolo1"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    NAME_TOKEN: ClassVar[str] = "YOLO1"
    TASKS: ClassVar[tuple[str, ...]] = ("detect",)
    SIZES: ClassVar[tuple[str, ...]] = SIZES
    DEFAULT_IMGSZ: ClassVar[int] = IMGSZ
    STRIDE: ClassVar[int] = IMGSZ  # the one input size (an instance's: its net's input_size)
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("raw",)
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch",)
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("coord", "obj", "noobj", "cls")
    TRAIN_DEFAULTS = _TrainDefaults()  # type: ignore[assignment]
    DECODE_TOPK: ClassVar[int] = 1000

    def __init__(self, *, size: str, task: str | None = None, nc: int = 80,
                 names: dict[int, str] | list[str] | None = None, imgsz: int | None = None,
                 width: float = 1.0, hidden: int = HIDDEN, input_size: int = IMGSZ) -> None:
        arch = _arch(width=width, hidden=hidden, input_size=input_size)
        if arch:  # the base class builds the net: give it the test-only options for this one call
            self.__dict__["build_net"] = partial(type(self).build_net, **arch)
        try:
            super().__init__(size=size, task=task, nc=nc, names=names, imgsz=imgsz)
        finally:
            self.__dict__.pop("build_net", None)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, width: float = 1.0, hidden: int = HIDDEN,
                  input_size: int = IMGSZ) -> nn.Module:
        from .nn import build_yolo1

        return build_yolo1(size=size, nc=nc, width=width, hidden=hidden, input_size=input_size)

    # ------------------------------------------------------------------ the fixed input size
    @property  # type: ignore[override]
    def imgsz(self) -> int:
        net = self.__dict__.get("net")
        return int(net.input_size) if net is not None else int(self.__dict__.get("_imgsz") or IMGSZ)

    @imgsz.setter
    def imgsz(self, value: int | None) -> None:
        net = self.__dict__.get("net")
        if net is not None and value is not None and int(value) != int(net.input_size):
            n = int(net.input_size)
            raise ConfigError(f"yolo1 takes a fixed {n} x {n} input (its fully connected head reads the 7 x 7 grid): "
                              f"use imgsz={n}, not {value}")
        self.__dict__["_imgsz"] = value

    @property
    def stride(self) -> int:
        return self.imgsz

    def predict_options(self, kw: dict[str, Any]) -> dict[str, Any]:
        """Predict letterboxes to the square fixed size; another ``imgsz`` is replaced (once said)."""
        asked = kw.get("imgsz")
        n = self.imgsz
        if asked is not None and ((asked, asked) if isinstance(asked, int) else tuple(asked)) != (n, n):
            self._say_fixed("predict", asked)
        return {**kw, "imgsz": n, "rect": False}

    def val_overrides(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """Validate at the fixed size; another ``imgsz`` is replaced (once said)."""
        asked = overrides.get("imgsz")
        if asked not in (None, self.imgsz):
            self._say_fixed("val", asked)
        return {**overrides, "imgsz": self.imgsz}

    def _say_fixed(self, verb: str, asked: Any) -> None:
        seen = self.__dict__.setdefault("_said", set())
        if verb not in seen:
            seen.add(verb)
            n = self.imgsz
            logger.warning("yolo1 takes a fixed %d x %d input: %s runs at imgsz=%d, not %s", n, n, verb, n, asked)

    # ------------------------------------------------------------------ architecture options
    @property
    def arch(self) -> dict[str, Any]:
        """The test-only options that differ from the published network (saved in checkpoints)."""
        net: Any = self.net
        return _arch(width=net.width, hidden=net.hidden, input_size=net.input_size)

    def set_arch(self, *, width: float = 1.0, hidden: int = HIDDEN, input_size: int = IMGSZ) -> None:
        """Rebuild the network with these options (untrained weights; load them afterwards)."""
        if _arch(width=width, hidden=hidden, input_size=input_size) == self.arch:
            return
        device = self.device
        self.net = self.build_net(size=self.size, nc=self.nc, task=self.task, width=width, hidden=hidden,
                                  input_size=input_size).to(device).eval()

    # ------------------------------------------------------------------ hooks
    def postprocess(self, raw: Any, *, conf: float, iou: float, classes: list[int] | None, max_det: int,
                    agnostic: bool) -> list[Tensor]:
        """raw (Tensor[B, S*S*(nc + 5B)]) -> per image Tensor[n, 6] (x1, y1, x2, y2 in input pixels,
        score, class id) float32, by decreasing score, ``n <= max_det``."""
        from .postprocess import postprocess

        return postprocess(raw, net=self.net, conf=conf, iou=iou, classes=classes, max_det=max_det, agnostic=agnostic)

    def decode(self, raw: Any) -> Tensor:
        from .postprocess import cell_grid, decode

        dev = (raw[0] if isinstance(raw, (list, tuple)) else raw).device
        S = int(self.net.S)  # type: ignore[attr-defined]
        grid = self._cached(("grid", S, str(dev)), lambda: cell_grid(S, device=dev))
        return decode(raw, net=self.net, k=self.DECODE_TOPK, grid=grid)

    def build_criterion(self) -> Any:
        from .loss import YOLO1Loss

        return YOLO1Loss(self.net)


def _arch(*, width: float, hidden: int, input_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if float(width) != 1.0:
        out["width"] = float(width)
    if int(hidden) != HIDDEN:
        out["hidden"] = int(hidden)
    if int(input_size) != IMGSZ:
        out["input_size"] = int(input_size)
    return out
