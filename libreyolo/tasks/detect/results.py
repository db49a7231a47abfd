"""What detection ``val()`` returns: a dict of the headline numbers with the details attached.

:class:`DetMetrics` IS a ``dict`` (``m["mAP50-95"]``, ``dict(m)``, ``json.dumps(m)``, ``"fitness" in
m`` work as before) whose keys are ``mAP50-95``, ``mAP50``, ``precision``, ``recall``, ``images``,
``instances``, ``fitness`` and ``ms_per_image`` (inference + postprocess per image). The details are
attributes: per-class numbers, ``maps``, the confusion matrix, the curves the plots draw, ``speed``,
``save_dir`` and the validation ``losses`` (when the caller passed a criterion, e.g. the trainer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


class DetMetrics(dict):  # type: ignore[type-arg]  # dict[str, float]; plain dict() copies drop the details
    """Validation metrics of a detector.

    Attributes:
        names (dict[int, str]): class names.
        per_class (dict[int, dict[str, float]]): for each class with ground truth: ``images``,
            ``instances``, ``precision``, ``recall`` (at the best class-mean F1 confidence, IoU 0.5),
            ``ap50`` and ``ap50-95`` (COCO, faster-coco-eval).
        confusion_matrix (ndarray[nc + 1, nc + 1], int64): ``[predicted, true]``, index nc the
            background (see :func:`libreyolo.tasks.detect.metrics.confusion_matrix`).
        curves (dict[str, ndarray]): ``classes`` (ndarray[C']), ``conf`` (ndarray[1000]),
            ``precision`` / ``recall`` / ``f1`` (ndarray[C', 1000]) against confidence, and
            ``pr_recall`` (ndarray[101]) / ``pr_precision`` (ndarray[C', 101]): the COCO IoU-0.5
            precision envelope whose mean is each class's ``ap50``.
        speed (dict[str, float]): ms per image for ``preprocess``, ``inference``, ``postprocess``.
        save_dir (Path | None): where the plots were written (None without ``plots=True``).
        losses (dict[str, float]): mean validation loss items by name (empty when not computed).

    Example:
        >>> import tempfile
        >>> from libreyolo import LibreYOLO
        >>> from libreyolo.data.shapes import ensure_shapes_dataset
        >>> data = ensure_shapes_dataset(Path(tempfile.mkdtemp()), n_train=4, n_val=2, imgsz=64)
        >>> m = LibreYOLO("LibreYOLO9t.pt").val(data=str(data), imgsz=64, batch=2)
        >>> m["images"], 0.0 <= m["mAP50-95"] <= m["mAP50"] <= 1.0, m.names[0], m.maps.shape
        (2.0, True, 'circle', (6,))
        >>> m.ap_class_index == sorted(m.per_class), sorted(m.per_class[m.ap_class_index[0]])
        (True, ['ap50', 'ap50-95', 'images', 'instances', 'precision', 'recall'])
        >>> m.confusion_matrix.shape, round(float(m.confusion_matrix_normalized.sum(0).max()), 6), sorted(m.speed)
        ((7, 7), 1.0, ['inference', 'postprocess', 'preprocess'])
    """

    def __init__(self, values: dict[str, float], *, names: dict[int, str],
                 per_class: dict[int, dict[str, float]] | None = None, confusion_matrix: np.ndarray | None = None,
                 curves: dict[str, np.ndarray] | None = None, speed: dict[str, float] | None = None,
                 save_dir: Path | None = None, losses: dict[str, float] | None = None) -> None:
        super().__init__(values)
        self.names = dict(names)
        self.per_class = {int(c): dict(v) for c, v in (per_class or {}).items()}
        nc = len(self.names)
        self.confusion_matrix = (confusion_matrix if confusion_matrix is not None
                                 else np.zeros((nc + 1, nc + 1), dtype=np.int64))
        self.curves = dict(curves or {})
        self.speed = dict(speed or {"preprocess": 0.0, "inference": 0.0, "postprocess": 0.0})
        self.save_dir = save_dir
        self.losses = dict(losses or {})

    @property
    def ap_class_index(self) -> list[int]:
        """Ids of the classes that have ground truth (the ones the means cover), ascending."""
        return sorted(self.per_class)

    @property
    def maps(self) -> np.ndarray:
        """mAP50-95 per class id (ndarray[nc]); a class without ground truth gets the overall mAP50-95."""
        out = np.full(len(self.names), float(self.get("mAP50-95", 0.0)))
        for c, row in self.per_class.items():
            if 0 <= c < len(out) and "ap50-95" in row:
                out[c] = row["ap50-95"]
        return out

    @property
    def confusion_matrix_normalized(self) -> np.ndarray:
        """The confusion matrix with each true-class column divided by its sum (float64; 0 where empty)."""
        m = self.confusion_matrix.astype(np.float64)
        return m / np.maximum(m.sum(0, keepdims=True), 1e-12)

    def summary(self) -> str:
        """The per-class table: an ``all`` row, then one row per class with ground truth.

        Example:
            >>> m = DetMetrics({"mAP50-95": 0.5, "mAP50": 0.75, "images": 1, "instances": 2}, names={0: "circle"},
            ...                per_class={0: {"images": 1, "instances": 2, "ap50": 0.75, "ap50-95": 0.5}})
            >>> print(m.summary())
                       class  images  instances       P       R   mAP50  mAP50-95
                         all       1          2   0.000   0.000   0.750     0.500
                      circle       1          2   0.000   0.000   0.750     0.500
            speed: 0.0 ms preprocess, 0.0 ms inference, 0.0 ms postprocess per image
        """
        head = f"{'class':>16} {'images':>7} {'instances':>10} {'P':>7} {'R':>7} {'mAP50':>7} {'mAP50-95':>9}"
        lines = [head, f"{'all':>16} {int(self.get('images', 0)):>7} {int(self.get('instances', 0)):>10} "
                       f"{self.get('precision', 0.0):>7.3f} {self.get('recall', 0.0):>7.3f} "
                       f"{self.get('mAP50', 0.0):>7.3f} {self.get('mAP50-95', 0.0):>9.3f}"]
        for c in self.ap_class_index:
            r = self.per_class[c]
            lines.append(f"{self.names.get(c, str(c))[:16]:>16} {int(r.get('images', 0)):>7} "
                         f"{int(r.get('instances', 0)):>10} {r.get('precision', 0.0):>7.3f} "
                         f"{r.get('recall', 0.0):>7.3f} {r.get('ap50', 0.0):>7.3f} {r.get('ap50-95', 0.0):>9.3f}")
        sp = self.speed
        lines.append(f"speed: {sp.get('preprocess', 0.0):.1f} ms preprocess, {sp.get('inference', 0.0):.1f} ms "
                     f"inference, {sp.get('postprocess', 0.0):.1f} ms postprocess per image")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready Python types (the curves left out: see ``curves``).

        Example:
            >>> m = DetMetrics({"mAP50-95": 0.5, "mAP50": 0.75, "images": 1, "instances": 2}, names={0: "circle"},
            ...                per_class={0: {"images": 1, "instances": 2, "ap50": 0.75, "ap50-95": 0.5}})
            >>> d = m.to_dict()
            >>> d["metrics"]["mAP50"], d["per_class"]["circle"]["ap50-95"], d["maps"], d["confusion_matrix"]
            (0.75, 0.5, [0.5], [[0, 0], [0, 0]])
        """
        return {"metrics": {k: float(v) for k, v in self.items()},
                "per_class": {self.names.get(c, str(c)): {k: float(v) for k, v in self.per_class[c].items()}
                              for c in self.ap_class_index},
                "maps": [float(v) for v in self.maps], "names": {str(k): v for k, v in self.names.items()},
                "confusion_matrix": self.confusion_matrix.astype(int).tolist(),
                "speed": {k: float(v) for k, v in self.speed.items()},
                "losses": {k: float(v) for k, v in self.losses.items()},
                "save_dir": str(self.save_dir) if self.save_dir is not None else None}

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as a JSON string.

        Example:
            >>> m = DetMetrics({"mAP50-95": 0.5, "mAP50": 0.75, "images": 1, "instances": 2}, names={0: "circle"},
            ...                per_class={0: {"images": 1, "instances": 2, "ap50": 0.75, "ap50-95": 0.5}})
            >>> json.loads(m.to_json(indent=None))["per_class"]
            {'circle': {'images': 1.0, 'instances': 2.0, 'ap50': 0.75, 'ap50-95': 0.5}}
        """
        return json.dumps(self.to_dict(), indent=indent)
