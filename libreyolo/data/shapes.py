"""``shapes``: a built-in, seeded detection dataset of geometric shapes on textured backgrounds.

Six classes (``circle, square, triangle, star, hexagon, cross``) are drawn with OpenCV on one
of four backgrounds (gradient, smooth noise, stripes, checker), 1-8 objects per scene, random
colours, sizes and rotations, mild overlaps allowed. Every box is computed from the pixel mask
of the shape as drawn (no anti-aliasing), so labels are exact to the pixel.

Scenes are a pure function of ``(seed, split, index)``: the same arguments give byte-identical
images and labels on every run, whatever the number of threads used to write them.

On first use :func:`ensure_shapes_dataset` writes a YOLO-format dataset
(``images/{train,val}``, ``labels/{train,val}``, ``data.yaml``) under
``$LIBREYOLO_DATASETS_DIR`` (default ``~/.cache/libreyolo/datasets``) in
``shapes-<hash of the parameters>/``. It writes into a temporary folder and renames it when
complete, so an interrupted generation is never mistaken for a finished one.

Regenerate the bundled sample image with::

    python -m libreyolo.data.shapes --sample libreyolo/assets/sample.jpg
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .._cv import cv2

logger = logging.getLogger(__name__)

NAMES: tuple[str, ...] = ("circle", "square", "triangle", "star", "hexagon", "cross")
GENERATOR_VERSION = 1
SAMPLE_SEED = 7
SAMPLE_SIZE = (480, 640)  # (h, w)
_JPEG_QUALITY = 95
_MIN_REL_SIZE, _MAX_REL_SIZE = 0.07, 0.35  # object size relative to the short image side
_MAX_OVERLAP = 0.15  # largest intersection / smaller box area between two objects


# ---------------------------------------------------------------------------------------------
# backgrounds
# ---------------------------------------------------------------------------------------------
def _two_colours(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A base colour and a second one of moderate contrast (backgrounds stay calmer than objects)."""
    a = rng.uniform(30, 225, 3)
    b = np.clip(a + rng.uniform(-70, 70, 3), 0, 255)
    return a.astype(np.float32), b.astype(np.float32)


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """(h, w, 3) uint8 BGR texture: gradient, smooth noise, stripes or checker."""
    kind = int(rng.integers(4))
    a, b = _two_colours(rng)
    if kind == 0:  # linear gradient at a random angle
        t = rng.uniform(0, 2 * math.pi)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        p = xx * math.cos(t) + yy * math.sin(t)
        p = (p - p.min()) / np.float32(max(float(p.max() - p.min()), 1.0))
        img = a[None, None] * (1 - p[..., None]) + b[None, None] * p[..., None]
    elif kind == 1:  # low-frequency noise
        cells = int(rng.integers(3, 9))
        low = rng.uniform(0, 1, (cells, cells, 1)).astype(np.float32)
        p = cv2.resize(low, (w, h), interpolation=cv2.INTER_CUBIC)
        p = np.clip(p, 0, 1)[..., None] if p.ndim == 2 else np.clip(p, 0, 1)
        img = a[None, None] * (1 - p) + b[None, None] * p
    elif kind == 2:  # soft stripes
        t = rng.uniform(0, math.pi)
        period = float(rng.uniform(8, 48))
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        p = np.float32(0.5) + np.float32(0.5) * np.sin((xx * math.cos(t) + yy * math.sin(t)) * np.float32(2 * math.pi / period))
        img = a[None, None] * (1 - p[..., None]) + b[None, None] * p[..., None]
    else:  # checker
        cell = int(rng.integers(8, 40))
        yy, xx = np.mgrid[0:h, 0:w]
        p = (((yy // cell) + (xx // cell)) % 2).astype(np.float32)
        img = a[None, None] * (1 - p[..., None]) + b[None, None] * p[..., None]
    sigma = np.float32(rng.uniform(2, 8))
    img += rng.standard_normal((h, w, 1), dtype=np.float32) * sigma
    return np.clip(img, 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------------------------
def _regular(n: int, r: float, rot: float) -> np.ndarray:
    t = rot + np.arange(n) * (2 * math.pi / n)
    return np.stack([r * np.cos(t), r * np.sin(t)], 1)


def _outline(cls: int, r: float, rot: float) -> np.ndarray | None:
    """Polygon vertices (K, 2) centred on 0 for class ``cls`` of radius ``r``; None for a circle."""
    if cls == 0:
        return None
    if cls == 1:
        return _regular(4, r, rot + math.pi / 4)
    if cls == 2:
        return _regular(3, r, rot - math.pi / 2)
    if cls == 3:
        outer = _regular(5, r, rot - math.pi / 2)
        inner = _regular(5, r * 0.45, rot - math.pi / 2 + math.pi / 5)
        return np.stack([outer, inner], 1).reshape(10, 2)
    if cls == 4:
        return _regular(6, r, rot)
    if cls == 5:
        a, b = r, r * 0.34
        pts = np.array([[-b, -a], [b, -a], [b, -b], [a, -b], [a, b], [b, b],
                        [b, a], [-b, a], [-b, b], [-a, b], [-a, -b], [-b, -b]], np.float64)
        c, s = math.cos(rot), math.sin(rot)
        return pts @ np.array([[c, s], [-s, c]])
    raise ValueError(f"unknown shape class {cls}")


_SHIFT = 4  # sub-pixel bits for cv2 drawing


def _draw_mask(cls: int, r: float, rot: float, size: int, cx: float, cy: float) -> np.ndarray:
    """uint8 (size, size) mask of one shape centred at (cx, cy) in local coordinates."""
    mask = np.zeros((size, size), np.uint8)
    k = 1 << _SHIFT
    outline = _outline(cls, r, rot)
    if outline is None:
        cv2.circle(mask, (int(round(cx * k)), int(round(cy * k))), int(round(r * k)), 255, -1,
                   cv2.LINE_8, _SHIFT)
    else:
        pts = np.round((outline + [cx, cy]) * k).astype(np.int32)
        cv2.fillPoly(mask, [pts], 255, cv2.LINE_8, shift=_SHIFT)
    return mask


def _overlap(box: np.ndarray, boxes: list[np.ndarray]) -> float:
    """Largest intersection over the smaller box area between ``box`` and any of ``boxes``."""
    worst = 0.0
    for b in boxes:
        iw = min(box[2], b[2]) - max(box[0], b[0])
        ih = min(box[3], b[3]) - max(box[1], b[1])
        if iw > 0 and ih > 0:
            small = min((box[2] - box[0]) * (box[3] - box[1]), (b[2] - b[0]) * (b[3] - b[1]))
            worst = max(worst, iw * ih / max(small, 1.0))
    return worst


def render_scene(rng: np.random.Generator, *, height: int, width: int,
                 classes: list[int] | None = None,
                 semantic_out: np.ndarray | None = None,
                 instance_out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Draw one scene.

    Returns ``(image, labels)``: image (ndarray[h, w, 3], uint8, BGR); labels (ndarray[n, 5],
    float64) rows ``cls, x1, y1, x2, y2`` in pixel edges (x2/y2 exclusive), tight around each
    drawn mask. ``classes`` forces the classes to draw (else 1-8 random ones). ``semantic_out``
    (ndarray[h, w] uint8, optional) receives ``cls + 1`` on every pixel a shape is painted on
    (a later shape over an earlier one, as in the image); the random draws are the same with or
    without it. ``instance_out`` (ndarray[h, w] uint8, optional) likewise receives ``1 + the row of
    the shape in labels``.

    Example:
        >>> img, lab = render_scene(np.random.default_rng(0), height=64, width=96)
    """
    img = _background(rng, height, width)
    if classes is None:
        classes = [int(c) for c in rng.integers(0, len(NAMES), int(rng.integers(1, 9)))]
    short = min(height, width)
    labels: list[np.ndarray] = []
    for cls in classes:
        for _attempt in range(30):
            size = rng.uniform(_MIN_REL_SIZE, _MAX_REL_SIZE) * short
            r = size / 2
            cx = rng.uniform(r, width - r)
            cy = rng.uniform(r, height - r)
            rot = rng.uniform(0, 2 * math.pi)
            x0, y0 = int(math.floor(cx - r)) - 1, int(math.floor(cy - r)) - 1
            side = int(math.ceil(size)) + 3
            mask = _draw_mask(cls, r, rot, side, cx - x0, cy - y0)
            # clip the local patch to the image
            px0, py0 = max(x0, 0), max(y0, 0)
            px1, py1 = min(x0 + side, width), min(y0 + side, height)
            m = mask[py0 - y0 : py1 - y0, px0 - x0 : px1 - x0]
            ys, xs = np.nonzero(m)
            if len(xs) < 9:
                continue
            box = np.array([px0 + xs.min(), py0 + ys.min(), px0 + xs.max() + 1, py0 + ys.max() + 1], np.float64)
            if _overlap(box, [lab[1:] for lab in labels]) > _MAX_OVERLAP:
                continue
            patch = img[py0:py1, px0:px1]
            bg_mean = patch[m > 0].mean(0)
            for _c in range(20):  # a colour that stands out from what lies under the shape
                colour = rng.uniform(0, 255, 3)
                if np.abs(colour - bg_mean).sum() > 150:
                    break
            shade = colour[None, None] + rng.normal(0, 3, (1, 1, 3))
            patch[m > 0] = np.clip(shade, 0, 255).astype(np.uint8)[0, 0]
            if semantic_out is not None:
                semantic_out[py0:py1, px0:px1][m > 0] = cls + 1
            if instance_out is not None:
                instance_out[py0:py1, px0:px1][m > 0] = len(labels) + 1
            labels.append(np.concatenate([[cls], box]))
            break
    out = np.stack(labels) if labels else np.zeros((0, 5), np.float64)
    return img, out


def _scene_rng(seed: int, split: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, split, index, GENERATOR_VERSION])


def _scene_size(rng: np.random.Generator, imgsz: int) -> tuple[int, int]:
    """(h, w): long side ``imgsz``, short side 60-100 % of it, random orientation."""
    short = int(round(imgsz * rng.uniform(0.6, 1.0)))
    return (short, imgsz) if rng.random() < 0.5 else (imgsz, short)


def _yolo_lines(labels: np.ndarray, h: int, w: int) -> str:
    rows = []
    for cls, x1, y1, x2, y2 in labels:
        rows.append(f"{int(cls)} {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} "
                    f"{(x2 - x1) / w:.6f} {(y2 - y1) / h:.6f}")
    return "\n".join(rows) + ("\n" if rows else "")


def _write_one(out: Path, split_name: str, split: int, index: int, seed: int, imgsz: int) -> None:
    rng = _scene_rng(seed, split, index)
    h, w = _scene_size(rng, imgsz)
    img, labels = render_scene(rng, height=h, width=w)
    stem = f"{split_name}_{index:06d}"
    if not cv2.imwrite(str(out / "images" / split_name / f"{stem}.jpg"), img,
                       [cv2.IMWRITE_JPEG_QUALITY, _JPEG_QUALITY]):
        raise OSError(f"could not write {out / 'images' / split_name / stem}.jpg")
    (out / "labels" / split_name / f"{stem}.txt").write_text(_yolo_lines(labels, h, w))


def _params_hash(n_train: int, n_val: int, imgsz: int, seed: int) -> str:
    key = f"v{GENERATOR_VERSION}-{n_train}-{n_val}-{imgsz}-{seed}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def default_datasets_dir() -> Path:
    """``$LIBREYOLO_DATASETS_DIR`` or ``~/.cache/libreyolo/datasets``."""
    from .. import env

    value = env.get("LIBREYOLO_DATASETS_DIR")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "libreyolo" / "datasets"


def ensure_shapes_dataset(root: Path | None = None, *, n_train: int = 2000, n_val: int = 400,
                          imgsz: int = 320, seed: int = 0) -> Path:
    """Return the ``data.yaml`` of the shapes dataset, generating it first if needed.

    The dataset lives in ``<root>/shapes-<hash>/`` (root defaults to
    :func:`default_datasets_dir`); images have a long side of ``imgsz`` pixels.

    Example:
        >>> yaml_path = ensure_shapes_dataset(Path("/tmp/ds"), n_train=8, n_val=4, imgsz=64)
    """
    from ..errors import ConfigError

    for key, v, lo in (("n_train", n_train, 1), ("n_val", n_val, 1), ("imgsz", imgsz, 32)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ConfigError(f"ensure_shapes_dataset: {key} must be an int >= {lo}, got {v!r}")
    root = Path(root) if root is not None else default_datasets_dir()
    final = root / f"shapes-{_params_hash(n_train, n_val, imgsz, seed)}"
    yaml_path = final / "data.yaml"
    if yaml_path.is_file():
        return yaml_path
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale_tmp(root, final.name)
        _generate(root, final, n_train=n_train, n_val=n_val, imgsz=imgsz, seed=seed)
    except OSError as e:
        from ..errors import DatasetError

        raise DatasetError(f"cannot write the shapes dataset to {final} ({e}); set "
                           "LIBREYOLO_DATASETS_DIR or pass root= to a writable folder") from e
    return yaml_path


_STALE_S = 3600.0


def _remove_stale_tmp(root: Path, name: str) -> None:
    """Delete temporary folders of generations that were killed (SIGKILL skips clean-up).

    A folder is stale when the process named in it (``.<name>.tmp-<pid>-<id>``) is gone, or it
    was not touched for an hour; a recent generation of a live process is left alone.
    Each removal is logged as a WARNING, so the next run says what happened.
    """
    now = time.time()
    for p in root.glob(f".{name}.tmp-*"):
        try:
            pid_text = p.name.rsplit(".tmp-", 1)[1].split("-", 1)[0]
            pid = int(pid_text) if pid_text.isdigit() else None
            old = now - p.stat().st_mtime > _STALE_S
            alive = pid is not None and (pid == os.getpid() or _pid_alive(pid))
            if not old and (alive or pid is None):
                continue
            n = sum(1 for _ in p.glob("images/*/*"))
        except OSError:
            continue
        shutil.rmtree(p, ignore_errors=True)
        logger.warning("removed %s, an incomplete shapes dataset (%d images) left by an interrupted generation; "
                       "generating it again", p.name, n)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _generate(root: Path, final: Path, *, n_train: int, n_val: int, imgsz: int, seed: int) -> None:
    yaml_path = final / "data.yaml"
    tmp = root / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    logger.info("generating the shapes dataset (%d train + %d val images, %d px) in %s",
                n_train, n_val, imgsz, final)
    try:
        for split_name in ("train", "val"):
            (tmp / "images" / split_name).mkdir(parents=True)
            (tmp / "labels" / split_name).mkdir(parents=True)
        jobs = [("train", 0, i) for i in range(n_train)] + [("val", 1, i) for i in range(n_val)]
        threads = max(1, min(8, os.cpu_count() or 1))
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool, tqdm(total=len(jobs), desc="generating shapes",
                                                        unit="img", disable=None, leave=False) as bar:
            for _ in pool.map(lambda j: _write_one(tmp, j[0], j[1], j[2], seed, imgsz), jobs):
                bar.update(1)
        names = "\n".join(f"  {i}: {n}" for i, n in enumerate(NAMES))
        (tmp / "data.yaml").write_text(
            f"# libreyolo built-in 'shapes' dataset (generator v{GENERATOR_VERSION}, seed {seed})\n"
            f"path: {final.resolve()}\ntrain: images/train\nval: images/val\nnc: {len(NAMES)}\n"
            f"names:\n{names}\n")
        logger.info("generated %d shapes images in %.1f s", len(jobs), time.perf_counter() - t0)
        try:
            os.rename(tmp, final)
        except OSError:
            if not yaml_path.is_file():  # not a lost race with another process: a real failure
                raise
            logger.debug("shapes dataset was completed concurrently; using %s", final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_sample(path: Path, *, seed: int = SAMPLE_SEED, max_bytes: int = 150_000) -> np.ndarray:
    """Write the 640x480 sample scene (all six classes) as JPEG; returns its labels (cls x1 y1 x2 y2)."""
    rng = np.random.default_rng([seed, 99, GENERATOR_VERSION])
    classes = [int(c) for c in rng.permutation(len(NAMES))] + [int(c) for c in rng.integers(0, len(NAMES), 2)]
    img, labels = render_scene(rng, height=SAMPLE_SIZE[0], width=SAMPLE_SIZE[1], classes=classes)
    for quality in (92, 88, 84, 80, 75, 70):
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if ok and len(buf) <= max_bytes:
            break
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(buf.tobytes())
    return labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m libreyolo.data.shapes",
                                     description="Generate the shapes dataset or the sample image.")
    parser.add_argument("--sample", type=Path, help="write the 640x480 sample scene to this JPEG path")
    parser.add_argument("--root", type=Path, default=None, help="datasets folder")
    parser.add_argument("--n-train", type=int, default=2000)
    parser.add_argument("--n-val", type=int, default=400)
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.sample is not None:
        labels = write_sample(args.sample)
        print(f"wrote {args.sample} ({args.sample.stat().st_size} bytes, {len(labels)} objects)")
        return 0
    path = ensure_shapes_dataset(args.root, n_train=args.n_train, n_val=args.n_val,
                                 imgsz=args.imgsz, seed=args.seed)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
