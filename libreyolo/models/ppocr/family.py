"""PP-OCR (PaddleOCR's text detection + recognition system) as one family of the ``ocr`` task:
sizes ``tiny`` (test size) and ``v4`` (PP-OCRv4 mobile), ``LibrePPOCR<size>-ocr.pt``.

Seam (SPEC G-9): :meth:`forward_stages` = the detector (capturable: one graph per input shape,
bounded by the runner's cache cap) then the recogniser (eager: the number of text regions, and so
the recogniser's batch, changes per image). The detector stage passes the input batch on beside
the probability map; the eager stage finds the boxes on the host (contours), crops them from the
input with ``grid_sample`` and reads them. Without a capture scope (``cuda_graph=False``) both
stages run eagerly: the same result by construction.

Angle classification (``predict(angle_cls=...)``, :meth:`angle_classification`): before reading,
each region is cropped at 48 x 192 for the 0 / 180-degree classifier (:mod:`.cls`); a region it
calls ``180`` with probability over 0.9 (PaddleOCR's ``cls_thresh``) is read turned by 180 degrees
(its quad's corners taken from the opposite one). On by default only where the classifier's weights
were loaded (``net.cls_loaded``: :func:`.convert.load_angle_classifier`).

Raw output of the chain (what :meth:`postprocess` reads): ``(prob Tensor[B, 1, H, W], quads
Tensor[n, 4, 2] input pixels, index Tensor[n] image of each region, det scores Tensor[n],
char probs Tensor[n, T, nc + 1], angle probs Tensor[n, 2] (of 0 and 180 degrees; Tensor[n, 0]
where not classified))``; ``net(x)`` and an ONNX export return ``prob`` alone (the detector), whose
postprocess gives boxes with empty strings.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...graphs.seam import Stage
from .._base.family import Family
from .charset import default_names
from .cls import ANGLE_THRESH, ANGLES, CLS_HW
from .postprocess import crop_regions, ctc_decode, db_boxes
from .variants import VARIANTS

REC_EAGER_REASON = ("per-region: the number of detected text regions (the recogniser's batch) and their crops "
                    "depend on the probability map, so box extraction and recognition run eager")
DB_THRESH = 0.3  # binarisation threshold of the probability map (PaddleOCR DBPostProcess)
UNCLIP = 1.5
BOX_THRESH = 0.6  # PaddleOCR's det_db_box_thresh: the eager stage's box threshold outside a box_threshold scope


class PPOCR(Family):
    FAMILY: ClassVar[str] = "ppocr"
    NAME_TOKEN: ClassVar[str] = "PPOCR"
    TASKS: ClassVar[tuple[str, ...]] = ("ocr",)
    OUTPUT_KIND: ClassVar[str] = "ocr"
    SIZES: ClassVar[tuple[str, ...]] = tuple(VARIANTS)
    DEFAULT_IMGSZ: ClassVar[int] = 640
    STRIDE: ClassVar[int] = 32
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("shrink", "thresh", "binary", "ctc")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("prob",)  # the exported detector
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch", "height", "width")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = ("docs/cuda-graph-parity.json (e1c602a): the v4 size's float16 row differs "
                                        "from eager on the image probe (inf), tiny and v4 float32 pass")
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no training-capture parity run recorded; the CTC branch crops per box"
    # PaddleOCR: Adam 1e-3 (cosine), L2 5e-5; here AdamW (the trainer has no plain Adam); no mosaic
    # files saved before the angle classifier existed lack its weights and flag: they load with the
    # classifier as built (cls_loaded False: angle classification off by default)
    OPTIONAL_STATE_PREFIXES: ClassVar[tuple[str, ...]] = ("cls.", "cls_loaded")
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {"optimizer": "AdamW", "lr0": 1e-3, "weight_decay": 5e-5,
                                                   "mosaic": 0.0, "warmup_bias_lr": 0.0}

    def __init__(self, *, size: str, task: str | None = None, nc: int = 80,
                 names: dict[int, str] | list[str] | None = None, imgsz: int | None = None) -> None:
        """``names`` are the recogniser's characters (default: the bundled dictionary,
        :mod:`.charset`); ``nc`` is their count."""
        if names is not None:
            nc = len(names)
        else:
            names = default_names(nc)
            nc = len(names)
        super().__init__(size=size, task=task, nc=nc, names=names, imgsz=imgsz or (64 if size == "tiny" else 640))

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .heads import PPOCRNet

        ds, neck, rs, dims, hidden, depth, heads, rec_hw = VARIANTS[size]
        return PPOCRNet(det_scale=ds, neck=neck, rec_scale=rs, nc=nc, dims=dims, hidden=hidden, depth=depth,
                        heads=heads, rec_hw=rec_hw)

    @property
    def chars(self) -> list[str]:
        return [self.names[i] for i in range(self.nc)]

    # ------------------------------------------------------------------ the seam
    def _detect(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return x, self.net(x)

    def _recognise(self, val: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        x, prob = val
        quads, index, scores = self.find_boxes(prob, box_thresh=self._call_option("box_thresh", BOX_THRESH))
        quads = quads.to(x.device)
        read, angle = quads, x.new_zeros(len(quads), 0)
        if self.angle_cls_enabled and len(quads):
            angle = self.net.cls(crop_regions(x, index, quads, CLS_HW).to(x.dtype))  # (n, 2)
            read = torch.where(turned(angle)[:, None, None], quads.roll(2, 1), quads)  # corners from the opposite one
        crops = crop_regions(x, index, read, tuple(self.net.rec_hw))
        probs = self.net.rec(crops.to(x.dtype)) if len(crops) else x.new_zeros(0, self.net.rec_hw[1] // 8, self.nc + 1)
        return prob, quads.to(prob.device), index.to(prob.device), scores.to(prob.device), probs, angle

    def forward_stages(self) -> list[Stage]:
        return [Stage(name="detector", fn=self._detect, capturable=True),
                Stage(name="recogniser", fn=self._recognise, capturable=False, reason=REC_EAGER_REASON)]

    def find_boxes(self, prob: Tensor, *, box_thresh: float = 0.6) -> tuple[Tensor, Tensor, Tensor]:
        """prob Tensor[B, 1, H, W] -> (quads Tensor[n, 4, 2] float32, index Tensor[n] int64, scores
        Tensor[n] float32), on the CPU."""
        maps = prob.detach().float().cpu().numpy()[:, 0]
        quads, index, scores = [], [], []
        for b, m in enumerate(maps):
            q, s = db_boxes(m, thresh=DB_THRESH, box_thresh=box_thresh, unclip=UNCLIP)
            quads.append(q)
            scores.append(s)
            index.append(np.full(len(q), b, np.int64))
        return (torch.from_numpy(np.concatenate(quads)), torch.from_numpy(np.concatenate(index)),
                torch.from_numpy(np.concatenate(scores)))

    # ------------------------------------------------------------------ outputs
    def postprocess(self, raw: Any, *, conf: float = 0.6, iou: float = 0.0, classes: list[int] | None = None,
                    max_det: int = 1000, agnostic: bool = False) -> list[dict[str, Any]]:
        """Raw chain output (module docstring) -> per image ``{"polygons": Tensor[n, 4, 2] float32
        input pixels, "det_scores": Tensor[n], "texts": list[str], "scores": Tensor[n] recognition
        confidence, "angles": Tensor[n] int64 degrees each line was read turned by (0 or 180),
        "angle_scores": Tensor[n] the classifier's probability of that angle (0 where it did not
        run)}``. A detector-only output (``net(x)``, an ONNX export) gives the boxes over ``conf``
        with empty texts; ``iou`` / ``classes`` / ``agnostic`` do not apply."""
        if isinstance(raw, Tensor) or len(raw) == 1:
            prob = raw if isinstance(raw, Tensor) else raw[0]
            quads, index, dscore = self.find_boxes(prob, box_thresh=conf)
            texts, rscore = [""] * len(quads), [0.0] * len(quads)
            angle = torch.zeros(len(quads), 0)
        else:
            prob, quads, index, dscore, probs, angle = raw
            texts, rscore = ctc_decode(probs, self.chars)
            quads, index, dscore, angle = quads.float().cpu(), index.cpu(), dscore.float().cpu(), angle.float().cpu()
        if angle.shape[1]:
            flip = turned(angle)
            degrees = torch.where(flip, ANGLES[1], ANGLES[0]).long()
            ascore = torch.where(flip, angle[:, 1], angle[:, 0])
        else:
            degrees, ascore = torch.zeros(len(quads), dtype=torch.long), torch.zeros(len(quads))
        out = []
        rs = torch.tensor(rscore, dtype=torch.float32)
        for b in range(prob.shape[0]):
            sel = torch.nonzero((index == b) & (dscore >= conf)).flatten()[:max_det]
            out.append({"polygons": quads[sel], "det_scores": dscore[sel], "texts": [texts[i] for i in sel.tolist()],
                        "scores": rs[sel], "angles": degrees[sel], "angle_scores": ascore[sel]})
        return out

    def crop(self, images: Tensor, index: Tensor, quads: Tensor) -> Tensor:
        """Regions of ``images`` (Tensor[B, 3, H, W] in [0, 1]) at the recogniser's input size."""
        return crop_regions(images, index, quads, tuple(self.net.rec_hw))

    @property
    def angle_cls_enabled(self) -> bool:
        """Whether the eager stage classifies each line's angle: the :meth:`angle_classification`
        setting in force, else whether the classifier's weights were loaded."""
        on = self._call_option("angle_cls", None)
        return bool(self.net.cls_loaded) if on is None else bool(on)

    # ------------------------------------------------------------------ per-call options
    # The options of one prediction call (box threshold, angle classification) are scopes of the
    # calling thread: each thread keeps its own stack per option in a ``threading.local`` owned by
    # this instance, so two threads predicting with one model never see each other's settings, and
    # leaving a scope removes exactly the entry it pushed (overlapping, non-nested exits included).
    def _call_local(self) -> threading.local:
        local = self.__dict__.get("_call_scopes")
        if local is None:  # created on first use (setdefault: two racing threads get one object)
            local = self.__dict__.setdefault("_call_scopes", threading.local())
        return local

    def _call_option(self, key: str, default: Any) -> Any:
        """The value of the innermost open ``key`` scope of the calling thread, else ``default``."""
        stack = getattr(self._call_local(), "stacks", {}).get(key)
        return stack[-1][0] if stack else default

    @contextmanager
    def _option_scope(self, key: str, value: Any) -> Iterator[None]:
        stacks = self._call_local().__dict__.setdefault("stacks", {})
        stack = stacks.setdefault(key, [])
        entry = [value]  # a fresh list: its identity marks this scope's entry
        stack.append(entry)
        try:
            yield
        finally:
            for i in range(len(stack) - 1, -1, -1):
                if stack[i] is entry:
                    del stack[i]
                    break

    def __getstate__(self) -> dict[str, Any]:
        """Copies (the prepared twin is a shallow one) and pickles start with no open scope: the
        thread-local scope stacks stay with this instance."""
        state = self.__dict__.copy()
        state.pop("_call_scopes", None)
        return state

    @contextmanager
    def angle_classification(self, enabled: bool | None) -> Iterator[None]:
        """Within the block the eager stage turns lines the angle classifier calls upside down
        (``True``), never does (``False``), or does where its weights were loaded (``None``). The
        setting is the calling thread's alone (other threads predicting with this model keep
        theirs) and the block's exit restores what was in force before it.

        Raises:
            ConfigError: ``True`` on a model whose classifier has no weights loaded.

        Example:
            >>> fam = PPOCR(size="tiny")
            >>> with fam.angle_classification(False):
            ...     fam.angle_cls_enabled
            False
        """
        if enabled is not None and not isinstance(enabled, bool):
            raise ConfigError(f"angle_cls must be True, False or None, got {enabled!r}")
        if enabled and not bool(self.net.cls_loaded):
            raise ConfigError("angle_cls=True but this model's angle classifier has no weights; load PaddleOCR's "
                              "with libreyolo.models.ppocr.convert.load_angle_classifier(model, "
                              "'ch_ppocr_mobile_v2.0_cls_infer.onnx') (or from_paddle_onnx(..., cls=...))")
        with self._option_scope("angle_cls", enabled):
            yield

    def classify_angles(self, crops: Tensor) -> tuple[list[int], list[float]]:
        """Crops Tensor[n, 3, 48, w] in [0, 1] (w = 192 as PaddleOCR) -> (the angle each would be
        read turned by: 0 or 180, the classifier's probability of that angle).

        Raises:
            ConfigError: ``crops`` is not a float Tensor[n, 3, 48, w] with w >= 8.
        """
        if (not isinstance(crops, Tensor) or not crops.is_floating_point() or crops.ndim != 4
                or crops.shape[1] != 3 or crops.shape[2] != CLS_HW[0] or crops.shape[3] < 8):
            got = tuple(crops.shape) if isinstance(crops, Tensor) else type(crops).__name__
            raise ConfigError(f"classify_angles takes text-line crops as a float Tensor[n, 3, {CLS_HW[0]}, w] "
                              f"(RGB in [0, 1], w >= 8; PaddleOCR uses w = {CLS_HW[1]}), got {got}; crop them with "
                              f"libreyolo.models.ppocr.postprocess.crop_regions(images, index, quads, {CLS_HW})")
        was = self.net.cls.training
        self.net.cls.eval()
        try:
            with torch.inference_mode():
                p = self.net.cls(crops).float()
        finally:
            self.net.cls.train(was)
        flip = turned(p)
        return ([ANGLES[1] if f else ANGLES[0] for f in flip.tolist()],
                torch.where(flip, p[:, 1], p[:, 0]).tolist())

    @contextmanager
    def box_threshold(self, conf: float) -> Iterator[None]:
        """Within the block the eager stage keeps boxes whose mean probability is over ``conf``
        (outside any: ``BOX_THRESH``). Like :meth:`angle_classification`, the setting belongs to
        the calling thread only and the block's exit restores what was in force before it."""
        with self._option_scope("box_thresh", float(conf)):
            yield

    def recognise(self, crops: Tensor) -> tuple[list[str], list[float]]:
        """Crops Tensor[n, 3, h, w] in [0, 1] (the recogniser's input size) -> (strings, scores)."""
        was = self.net.rec.training
        self.net.rec.eval()
        try:
            with torch.inference_mode():
                return ctc_decode(self.net.rec(crops), self.chars)
        finally:
            self.net.rec.train(was)

    def build_criterion(self) -> Any:
        from .loss import OCRLoss

        return OCRLoss(self)


def turned(angle: Tensor) -> Tensor:
    """angle probabilities Tensor[n, 2] (0, 180 degrees) -> Tensor[n] bool: read turned by 180
    degrees (the 180 class wins with probability over ``ANGLE_THRESH``, PaddleOCR's rule)."""
    return (angle[:, 1] > angle[:, 0]) & (angle[:, 1] > ANGLE_THRESH)
