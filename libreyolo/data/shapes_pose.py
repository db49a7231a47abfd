"""``shapes-pose``: the built-in pose demo set, squares and triangles whose corners are keypoints.

Two classes (``square``, ``triangle``) and five keypoints per object (``kpt_shape: [5, 3]``), in
this order: 0 top-left, 1 top-right, 2 bottom-right, 3 bottom-left (the corners of a square, or
the base corners 3 and 2 of a triangle) and 4 apex (a triangle's tip). Keypoints a shape does not
have are written ``0 0 0`` (v = 0, not labelled). Shapes turn by at most 25 degrees, so "left"
and "right" stay well defined and a horizontal flip swaps them: ``flip_idx: [1, 0, 3, 2, 4]``.
The skeleton joins the outline of either shape.

Each image (long side ``imgsz``, the other 60-100 % of it) holds 1-4 filled shapes of random
colour and size that do not overlap, on a smooth random background; every keypoint is labelled
visible (v = 2). A pure function of ``(seed, split, index)``: byte-identical on every run.
Written once under ``$LIBREYOLO_DATASETS_DIR`` (default ``~/.cache/libreyolo/datasets``) as
``shapes-pose-<hash>/{images,labels}/{train,val}`` plus ``data.yaml``, through the shared
scaffold of :mod:`libreyolo.data.materialise`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .._cv import cv2
from .materialise import check_sizes, dataset_folder, materialise
from .shapes import default_datasets_dir

POSE_VERSION = 1
POSE_NAMES = ("square", "triangle")
NKPT = 5
FLIP_IDX = (1, 0, 3, 2, 4)
SKELETON = ((0, 1), (1, 2), (2, 3), (3, 0), (2, 4), (3, 4))
_SHIFT = 4


def _shape_points(cls: int, cx: float, cy: float, size: float, angle: float) -> np.ndarray:
    """ndarray[5, 3] keypoints (pixel x, y, v) of one shape (module docstring order)."""
    if cls == 0:  # square of side ``size``: TL, TR, BR, BL
        local = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], np.float64) * size / 2
        rows = [0, 1, 2, 3]
    else:  # isosceles triangle of height ``size``: base-right, base-left, apex
        local = np.array([[0.45, 1 / 3], [-0.45, 1 / 3], [0.0, -2 / 3]], np.float64) * size
        rows = [2, 3, 4]
    c, s = math.cos(angle), math.sin(angle)
    pts = local @ np.array([[c, s], [-s, c]]) + (cx, cy)
    out = np.zeros((NKPT, 3), np.float64)
    out[rows, :2], out[rows, 2] = pts, 2.0
    return out


def render_pose_scene(seed: int, split: int, index: int, *, imgsz: int) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """One scene: (ndarray[h, w, 3] uint8 BGR, [(class id, ndarray[5, 3] pixel x, y, v)]); the long side is ``imgsz``.

    Example:
        >>> img, objs = render_pose_scene(0, 0, 0, imgsz=64)
        >>> max(img.shape[:2]), all(k.shape == (5, 3) for _, k in objs), len(objs) >= 1
        (64, True, True)
    """
    rng = np.random.default_rng([seed, split, index, POSE_VERSION, 47])
    short = int(round(imgsz * rng.uniform(0.6, 1.0)))
    h, w = (short, imgsz) if rng.random() < 0.5 else (imgsz, short)
    low = rng.integers(40, 200, size=(4, 4, 3)).astype(np.uint8)
    img = cv2.resize(low, (w, h), interpolation=cv2.INTER_CUBIC)
    img = np.clip(img.astype(np.int16) + rng.integers(-12, 13, size=img.shape), 0, 255).astype(np.uint8)
    objs: list[tuple[int, np.ndarray]] = []
    boxes: list[np.ndarray] = []
    for _ in range(int(rng.integers(1, 5))):
        for _attempt in range(20):
            cls = int(rng.integers(0, 2))
            size = float(rng.uniform(0.18, 0.42)) * min(h, w)
            kp = _shape_points(cls, float(rng.uniform(0, w)), float(rng.uniform(0, h)), size,
                               math.radians(float(rng.uniform(-25, 25))))
            pts = kp[kp[:, 2] > 0, :2]
            box = np.concatenate([pts.min(0), pts.max(0)])
            if box[0] < 1 or box[1] < 1 or box[2] > w - 1 or box[3] > h - 1:
                continue
            if any(not (box[2] < b[0] or b[2] < box[0] or box[3] < b[1] or b[3] < box[1]) for b in boxes):
                continue
            colour = tuple(int(v) for v in rng.integers(0, 256, 3))
            poly = np.round((pts - 0.5) * (1 << _SHIFT)).astype(np.int32)
            cv2.fillPoly(img, [poly], colour, cv2.LINE_AA, shift=_SHIFT)
            boxes.append(box)
            objs.append((cls, kp))
            break
    return img, objs


def pose_line(cls: int, kpts: np.ndarray, hw: tuple[int, int]) -> str:
    """One label line ``cls cx cy w h x1 y1 v1 ...`` (6 decimals) of keypoints (ndarray[K, 3] pixel
    x, y, v) in an image of ``hw``; the box is the tight box of the labelled keypoints.

    Example:
        >>> pose_line(1, np.array([[2.0, 1.0, 2.0], [6.0, 3.0, 2.0], [0.0, 0.0, 0.0]]), (4, 8))
        '1 0.500000 0.500000 0.500000 0.500000 0.250000 0.250000 2 0.750000 0.750000 2 0.000000 0.000000 0'
    """
    h, w = hw
    pts = kpts[kpts[:, 2] > 0, :2]
    x1, y1 = pts.min(0)
    x2, y2 = pts.max(0)
    head = [(x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h]
    parts = [str(int(cls))] + [f"{v:.6f}" for v in head]
    for x, y, v in kpts:
        parts += [f"{x / w:.6f}", f"{y / h:.6f}", str(int(v))] if v > 0 else ["0.000000", "0.000000", "0"]
    return " ".join(parts)


def ensure_shapes_pose_dataset(root: Path | None = None, *, n_train: int = 500, n_val: int = 100,
                               imgsz: int = 256, seed: int = 0) -> Path:
    """Return the ``data.yaml`` of the dataset (``.../shapes-pose-<hash>/``), generating it first if needed.

    Example:
        >>> import tempfile; p = ensure_shapes_pose_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64)
        >>> p.name, sorted(f.name for f in (p.parent / "labels" / "train").iterdir())
        ('data.yaml', ['train_000000.txt', 'train_000001.txt'])
    """
    check_sizes("ensure_shapes_pose_dataset", n_train=n_train, n_val=n_val, imgsz=imgsz)
    root = Path(root) if root is not None else default_datasets_dir()
    final = dataset_folder(root, "shapes-pose", f"pose-v{POSE_VERSION}-{n_train}-{n_val}-{imgsz}-{seed}")

    def write(tmp: Path) -> None:
        for split, (name, n) in enumerate((("train", n_train), ("val", n_val))):
            (tmp / "images" / name).mkdir(parents=True)
            (tmp / "labels" / name).mkdir(parents=True)
            for i in range(n):
                img, objs = render_pose_scene(seed, split, i, imgsz=imgsz)
                stem = f"{name}_{i:06d}"
                if not cv2.imwrite(str(tmp / "images" / name / f"{stem}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 95]):
                    raise OSError(f"could not write {stem} under {tmp}")
                lines = [pose_line(c, k, img.shape[:2]) for c, k in objs]
                (tmp / "labels" / name / f"{stem}.txt").write_text("".join(x + "\n" for x in lines))
        names = "\n".join(f"  {i}: {n}" for i, n in enumerate(POSE_NAMES))
        skeleton = ", ".join(f"[{a}, {b}]" for a, b in SKELETON)
        (tmp / "data.yaml").write_text(
            f"# libreyolo built-in 'shapes-pose' dataset (generator v{POSE_VERSION}, seed {seed})\n"
            f"path: {final.resolve()}\ntrain: images/train\nval: images/val\nnames:\n{names}\n"
            f"kpt_shape: [{NKPT}, 3]\nflip_idx: {list(FLIP_IDX)}\nskeleton: [{skeleton}]\n")

    return materialise(final, write, what="shapes-pose dataset",
                       detail=f"{n_train} train + {n_val} val images, {imgsz} px")
