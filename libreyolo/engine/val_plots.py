"""Validation and training pictures (matplotlib ``Figure`` objects, rendered by Agg; no pyplot, no
global backend change, no font download: matplotlib's bundled DejaVu font).

Written by ``val(plots=True)`` (:func:`write_val_plots`) into the run folder:

- ``confusion_matrix.png`` / ``confusion_matrix_normalized.png``: ``[predicted, true]`` counts with
  a background row/column; the normalised one divides each true-class column by its sum.
- ``P_curve.png``, ``R_curve.png``, ``F1_curve.png``: precision / recall / F1 (IoU 0.5) against
  the confidence threshold, per class (thin) and their mean (thick).
- ``PR_curve.png``: per class the COCO IoU-0.5 precision envelope over recall; the legend's AP is
  the mean of the plotted curve, i.e. the class's ``ap50`` in :class:`DetMetrics`.
- ``val_labels.png``: instances per class, box centres and box sizes of the validated split.
- ``val_batch<i>.png``: the first batches as the network saw them, labels left, predictions
  (confidence >= 0.25) right; for pose also the keypoints (labelled ones, predicted ones with a
  visibility score >= 0.5) and the skeleton when the model has one.

The trainer calls :func:`plot_train_batch` for its first batches (``train_batch<i>.png``: the
augmented images, mosaics included, with their boxes) and :func:`plot_labels` for the training set
(``train_labels.png``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..tasks.detect.results import DetMetrics

logger = logging.getLogger(__name__)
PRED_CONF = 0.25  # predictions drawn in the val_batch pictures


def _figure(w: float, h: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), tight_layout=True)


def _save(fig: Figure, path: Path, dpi: int = 100) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


def _colour(c: int) -> tuple[float, ...]:
    from matplotlib import colormaps

    return tuple(colormaps["tab20"](int(c) % 20))


def _name(names: dict[int, str] | None, c: int) -> str:
    return (names or {}).get(int(c), str(int(c)))


def plot_confusion_matrix(matrix: np.ndarray, names: dict[int, str], path: Path, *, normalize: bool) -> Path:
    """matrix (ndarray[nc + 1, nc + 1]) ``[predicted, true]`` -> a heat map PNG at ``path``."""
    m = matrix.astype(np.float64)
    if normalize:
        m = m / np.maximum(m.sum(0, keepdims=True), 1e-12)
    n = m.shape[0]
    labels = [_name(names, c) for c in range(n - 1)] + ["background"]
    size = min(max(4.0, 0.45 * n + 2.5), 16.0)
    fig = _figure(size + 1.0, size)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(m, cmap="Blues", vmin=0.0, vmax=1.0 if normalize else max(float(m.max()), 1.0))
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if n <= 31:
        ax.set_xticks(range(n), labels, rotation=90, fontsize=8)
        ax.set_yticks(range(n), labels, fontsize=8)
        thresh = (1.0 if normalize else max(float(m.max()), 1.0)) / 2
        for i in range(n):
            for j in range(n):
                if m[i, j] > 0:
                    ax.text(j, i, f"{m[i, j]:.2f}" if normalize else f"{int(m[i, j])}", ha="center",
                            va="center", fontsize=7, color="white" if m[i, j] > thresh else "black")
    ax.set_xlabel("true")
    ax.set_ylabel("predicted")
    ax.set_title("confusion matrix" + (" (normalised by true class)" if normalize else ""))
    return _save(fig, path)


def _class_lines(ax: Axes, x: np.ndarray, ys: np.ndarray, classes: Sequence[int], names: dict[int, str],
                 labels: Sequence[str] | None = None) -> None:
    legend = len(classes) <= 12
    for k, c in enumerate(classes):
        ax.plot(x, ys[k], linewidth=1.0, color=_colour(c),
                label=(labels[k] if labels is not None else _name(names, c)) if legend else None)


def plot_conf_curve(conf: np.ndarray, values: np.ndarray, classes: Sequence[int], names: dict[int, str],
                    path: Path, *, ylabel: str) -> Path:
    """values (ndarray[C', len(conf)]) against the confidence grid; thick line: the class mean."""
    fig = _figure(6.0, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    _class_lines(ax, conf, values, classes, names)
    if len(values):
        mean = values.mean(0)
        best = int(mean.argmax())
        ax.plot(conf, mean, linewidth=3.0, color="royalblue",
                label=f"all classes {mean[best]:.3f} at {conf[best]:.3f}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("confidence")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel}-confidence curve")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left" if ylabel != "recall" else "upper right")
    return _save(fig, path)


def plot_pr_curve(recall: np.ndarray, precision: np.ndarray, classes: Sequence[int], names: dict[int, str],
                  path: Path) -> Path:
    """precision (ndarray[C', 101]) over recall (ndarray[101]); legend AP = each curve's mean."""
    fig = _figure(6.0, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    aps = precision.mean(1) if len(precision) else np.zeros(0)
    _class_lines(ax, recall, precision, classes, names,
                 labels=[f"{_name(names, c)} {ap:.3f}" for c, ap in zip(classes, aps, strict=True)])
    if len(precision):
        ax.plot(recall, precision.mean(0), linewidth=3.0, color="royalblue",
                label=f"all classes {float(aps.mean()):.3f} mAP@0.5")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_title("precision-recall curve (IoU 0.5)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    return _save(fig, path)


def plot_labels(labels: Sequence[np.ndarray], names: dict[int, str], path: Path) -> Path:
    """labels: per image ndarray[n, 5] (class, x, y, w, h normalised) -> class counts, centres, sizes."""
    arr = np.concatenate([np.asarray(x, dtype=np.float64).reshape(-1, 5) for x in labels]) if labels else \
        np.zeros((0, 5))
    nc = max(len(names), int(arr[:, 0].max()) + 1 if len(arr) else 0)
    fig = _figure(12.0, 4.0)
    ax = fig.add_subplot(1, 3, 1)
    counts = np.bincount(arr[:, 0].astype(int), minlength=nc) if len(arr) else np.zeros(nc, int)
    ax.bar(range(nc), counts, color=[_colour(c) for c in range(nc)])
    if nc <= 30:
        ax.set_xticks(range(nc), [_name(names, c) for c in range(nc)], rotation=90, fontsize=8)
    ax.set_ylabel("instances")
    ax.set_title(f"{len(arr)} instances")
    for k, (cols, title, lab) in enumerate((((1, 2), "box centres", ("x", "y")), ((3, 4), "box sizes",
                                                                                    ("width", "height")))):
        ax = fig.add_subplot(1, 3, 2 + k)
        if len(arr):
            ax.hist2d(arr[:, cols[0]], arr[:, cols[1]], bins=40, range=[[0, 1], [0, 1]], cmap="Blues", cmin=1,
                      vmin=0)  # a single box stays visible
        ax.set_xlim(0, 1)
        ax.set_ylim(1, 0) if k == 0 else ax.set_ylim(0, 1)
        ax.set_xlabel(lab[0])
        ax.set_ylabel(lab[1])
        ax.set_title(title)
    return _save(fig, path)


def _grid(n: int) -> tuple[int, int]:
    cols = math.ceil(math.sqrt(n))
    return math.ceil(n / cols), cols


def _draw_images(fig: Figure, imgs: np.ndarray, boxes: Sequence[np.ndarray], cls: Sequence[np.ndarray],
                 conf: Sequence[np.ndarray | None], names: dict[int, str] | None, *, where: tuple[int, int, int],
                 title: str, kpts: Sequence[np.ndarray] | None = None,
                 skeleton: Sequence[Sequence[int]] | None = None) -> None:
    """imgs (ndarray[B, 3, H, W] uint8 RGB) tiled into one axes of ``fig`` at subplot ``where``;
    boxes per image ndarray[n, 4] xyxy input pixels, cls ndarray[n], conf ndarray[n] or None;
    kpts per image ndarray[n, K, 3] (x, y input pixels, visibility: drawn where > 0.5), with the
    ``skeleton`` edges (pairs of keypoint indices) between drawn keypoints."""
    from matplotlib.patches import Rectangle

    b, _, h, w = imgs.shape
    rows, cols = _grid(b)
    canvas = np.full((rows * h, cols * w, 3), 114, dtype=np.uint8)
    ax = fig.add_subplot(*where)
    for i in range(b):
        r, c = divmod(i, cols)
        canvas[r * h:(r + 1) * h, c * w:(c + 1) * w] = imgs[i].transpose(1, 2, 0)
    ax.imshow(canvas)
    lw = 1.8 if b <= 4 else 1.0
    fs = 6 if b > 4 else 8
    for i in range(b):
        r, c = divmod(i, cols)
        ox, oy = c * w, r * h
        ax.add_patch(Rectangle((ox, oy), w, h, fill=False, edgecolor="white", linewidth=1.0))
        sc = conf[i]
        for k, (box, k_cls) in enumerate(zip(boxes[i], cls[i], strict=True)):
            x1, y1, x2, y2 = (float(v) for v in box)
            col = _colour(int(k_cls))
            ax.add_patch(Rectangle((ox + x1, oy + y1), x2 - x1, y2 - y1, fill=False, edgecolor=col, linewidth=lw))
            text = _name(names, int(k_cls)) + (f" {float(sc[k]):.2f}" if sc is not None else "")
            ax.text(ox + x1, oy + y1, text, fontsize=fs, color="white", va="bottom",
                    bbox={"facecolor": col, "edgecolor": "none", "pad": 0.5, "alpha": 0.8})
            if kpts is not None and k < len(kpts[i]):
                _draw_keypoints(ax, kpts[i][k], ox, oy, col, skeleton, size=14.0 if b <= 4 else 6.0)
    ax.set_xlim(0, canvas.shape[1])
    ax.set_ylim(canvas.shape[0], 0)
    ax.axis("off")
    ax.set_title(title, fontsize=10)


def _draw_keypoints(ax: Axes, kp: np.ndarray, ox: float, oy: float, col: tuple[float, ...],
                    skeleton: Sequence[Sequence[int]] | None, *, size: float) -> None:
    """One object's keypoints (ndarray[K, 3]: x, y, visibility) as dots, skeleton edges as lines."""
    shown = kp[:, 2] > 0.5
    for a, b in skeleton or ():
        if a < len(kp) and b < len(kp) and shown[a] and shown[b]:
            ax.plot([ox + kp[a, 0], ox + kp[b, 0]], [oy + kp[a, 1], oy + kp[b, 1]], color=col, linewidth=1.0)
    if shown.any():
        ax.scatter(ox + kp[shown, 0], oy + kp[shown, 1], s=size, c=[col], edgecolors="white", linewidths=0.5,
                   zorder=3)


def _batch_targets(batch: dict[str, Any], n: int, hw: tuple[int, int]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Ground truth of a collated detection batch -> per image (xyxy input pixels, classes)."""
    h, w = hw
    bidx = np.asarray(batch["batch_idx"]).reshape(-1).astype(int)
    cls = np.asarray(batch["cls"]).reshape(-1).astype(int)
    xywh = np.asarray(batch["bboxes"], dtype=np.float64).reshape(-1, 4) * np.array([w, h, w, h])
    xyxy = np.concatenate((xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2), 1)
    return [xyxy[bidx == i] for i in range(n)], [cls[bidx == i] for i in range(n)]


def _batch_keypoints(batch: dict[str, Any], n: int, hw: tuple[int, int]) -> list[np.ndarray] | None:
    """Labelled keypoints of a collated pose batch (``keypoints`` Tensor[N, K, 3], x y normalised)
    -> per image ndarray[n, K, 3] in input pixels; ``None`` for a batch without keypoints."""
    if batch.get("keypoints") is None:
        return None
    h, w = hw
    bidx = _np(batch["batch_idx"]).reshape(-1).astype(int)
    kp = _np(batch["keypoints"]).astype(np.float64)
    kp[..., 0] *= w
    kp[..., 1] *= h
    return [kp[bidx == i] for i in range(n)]


def plot_train_batch(batch: dict[str, Any], path: Path, *, names: dict[int, str] | None = None,
                     max_images: int = 16, skeleton: Sequence[Sequence[int]] | None = None) -> Path:
    """A collated training batch as augmented (mosaics included) with its boxes.

    batch: ``img`` (Tensor[B, 3, H, W] uint8 RGB), ``batch_idx`` (Tensor[N]), ``cls`` (Tensor[N] or
    [N, 1]), ``bboxes`` (Tensor[N, 4] xywh normalised to H, W); a pose batch's ``keypoints``
    (Tensor[N, K, 3]) are drawn too, with the ``skeleton``.

    Example:
        >>> plot_train_batch(next(iter(trainer.train_loader)), Path("train_batch0.png"))  # doctest: +SKIP
    """
    imgs = np.asarray(batch["img"][:max_images].cpu() if hasattr(batch["img"], "cpu") else batch["img"][:max_images])
    n = imgs.shape[0]
    boxes, cls = _batch_targets({k: _np(batch[k]) for k in ("batch_idx", "cls", "bboxes")}, n, imgs.shape[2:])
    kpts = _batch_keypoints(batch, n, imgs.shape[2:])
    size = min(3.0 * _grid(n)[1], 12.0)
    fig = _figure(size, size * _grid(n)[0] / _grid(n)[1])
    _draw_images(fig, imgs, boxes, cls, [None] * n, names, where=(1, 1, 1), title=Path(path).stem, kpts=kpts,
                 skeleton=skeleton)
    return _save(fig, path)


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def plot_val_batch(imgs: np.ndarray, batch: dict[str, Any], preds: Sequence[np.ndarray], names: dict[int, str],
                   path: Path, *, conf: float = PRED_CONF, max_images: int = 16,
                   skeleton: Sequence[Sequence[int]] | None = None) -> Path:
    """Labels (left) next to predictions (right) for one validation batch.

    imgs (ndarray[B, 3, H, W] uint8 RGB, the network input); batch: its ``batch_idx``, ``cls``,
    ``bboxes`` (xywh normalised), for pose its ``keypoints``; preds: per image ndarray[P, 6]
    (x1, y1, x2, y2 input pixels, score, class), for pose ndarray[P, 6 + 3K] (then the keypoints,
    x y input pixels and a visibility score each); only those scoring >= ``conf`` are drawn.
    """
    imgs = imgs[:max_images]
    n = imgs.shape[0]
    gt_boxes, gt_cls = _batch_targets({k: _np(batch[k]) for k in ("batch_idx", "cls", "bboxes")}, n,
                                      imgs.shape[2:])
    gt_kpts = _batch_keypoints(batch, n, imgs.shape[2:])
    keep = [p[p[:, 4] >= conf] for p in preds[:n]]
    k = int(gt_kpts[0].shape[1]) if gt_kpts is not None and len(gt_kpts) else 0
    pred_kpts = [p[:, 6:6 + 3 * k].reshape(len(p), k, 3) for p in keep] if gt_kpts is not None else None
    rows, cols = _grid(n)
    size = min(3.0 * cols, 9.0)
    fig = _figure(2 * size, size * rows / cols + 0.4)
    _draw_images(fig, imgs, gt_boxes, gt_cls, [None] * n, names, where=(1, 2, 1), title="labels", kpts=gt_kpts,
                 skeleton=skeleton)
    _draw_images(fig, imgs, [p[:, :4] for p in keep], [p[:, 5].astype(int) for p in keep],
                 [p[:, 4] for p in keep], names, where=(1, 2, 2), title=f"predictions (conf >= {conf:g})",
                 kpts=pred_kpts, skeleton=skeleton)
    return _save(fig, path)


def write_val_plots(m: DetMetrics, save_dir: Path, *, batches: Sequence[tuple[np.ndarray, dict[str, Any],
                    list[np.ndarray]]] = (), labels: Sequence[np.ndarray] | None = None,
                    skeleton: Sequence[Sequence[int]] | None = None) -> list[Path]:
    """Every validation picture for ``m`` into ``save_dir``; returns the paths written.

    batches: (imgs, batch, preds) of the first validation batches (see :func:`plot_val_batch`);
    labels: the split's labels (see :func:`plot_labels`); skeleton: a pose model's keypoint edges.
    """
    save_dir = Path(save_dir)
    names = m.names
    out = [plot_confusion_matrix(m.confusion_matrix, names, save_dir / "confusion_matrix.png", normalize=False),
           plot_confusion_matrix(m.confusion_matrix, names, save_dir / "confusion_matrix_normalized.png",
                                 normalize=True)]
    cv = m.curves
    if "conf" in cv:
        classes = [int(c) for c in cv["classes"]]
        for key, label, fname in (("precision", "precision", "P_curve.png"), ("recall", "recall", "R_curve.png"),
                                  ("f1", "F1", "F1_curve.png")):
            out.append(plot_conf_curve(cv["conf"], cv[key], classes, names, save_dir / fname, ylabel=label))
    if "pr_precision" in cv:
        out.append(plot_pr_curve(cv["pr_recall"], cv["pr_precision"], [int(c) for c in cv["pr_classes"]], names,
                                 save_dir / "PR_curve.png"))
    if labels is not None:
        out.append(plot_labels(labels, names, save_dir / "val_labels.png"))
    for i, (imgs, batch, preds) in enumerate(batches):
        out.append(plot_val_batch(imgs, batch, preds, names, save_dir / f"val_batch{i}.png", skeleton=skeleton))
    logger.info("val: %d plots written to %s", len(out), save_dir)
    return out
