"""``shapes-cls``: the built-in classification demo set, crops of single-shape scenes.

Each image is a scene of :func:`libreyolo.data.shapes.render_scene` with exactly one shape of
the image's class, cropped around the shape's box with a random margin (10-60 % of the box side)
so that the shape fills a varying part of the crop. Six classes (``circle ... cross``), a pure
function of ``(seed, split, index)``. Written once under ``$LIBREYOLO_DATASETS_DIR`` (default
``~/.cache/libreyolo/datasets``) as ``shapes-cls-<hash>/{train,val}/<class>/*.jpg`` through a
temporary folder renamed when complete.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from .._cv import cv2
from .shapes import GENERATOR_VERSION, NAMES, default_datasets_dir, render_scene

logger = logging.getLogger(__name__)


def render_crop(seed: int, split: int, index: int, *, cls: int, scene: int = 96) -> np.ndarray:
    """One crop (ndarray[h, w, 3] uint8 BGR) holding one shape of class ``cls``."""
    rng = np.random.default_rng([seed, split, index, cls, GENERATOR_VERSION, 17])
    for _ in range(5):
        img, lab = render_scene(rng, height=scene, width=scene, classes=[cls])
        if len(lab):
            break
    else:  # pragma: no cover - render_scene places one shape in practically every attempt
        return img
    _, x1, y1, x2, y2 = lab[0]
    side = max(x2 - x1, y2 - y1) * (1 + rng.uniform(0.2, 1.2))
    cx, cy = (x1 + x2) / 2 + rng.uniform(-0.1, 0.1) * side, (y1 + y2) / 2 + rng.uniform(-0.1, 0.1) * side
    a, b = int(max(0, cx - side / 2)), int(max(0, cy - side / 2))
    c, d = int(min(scene, cx + side / 2)), int(min(scene, cy + side / 2))
    return np.ascontiguousarray(img[b:d, a:c])


def ensure_shapes_cls_dataset(root: Path | None = None, *, n_train: int = 200, n_val: int = 50,
                              seed: int = 0) -> Path:
    """Return the dataset root (``.../shapes-cls-<hash>``), generating it first if needed.

    ``n_train`` / ``n_val`` are images per class.
    """
    from ..errors import ConfigError, DatasetError

    for key, v in (("n_train", n_train), ("n_val", n_val)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"ensure_shapes_cls_dataset: {key} must be an int >= 1, got {v!r}")
    root = Path(root) if root is not None else default_datasets_dir()
    key = hashlib.sha256(f"cls-v{GENERATOR_VERSION}-{n_train}-{n_val}-{seed}".encode()).hexdigest()[:12]
    final = root / f"shapes-cls-{key}"
    if (final / "val").is_dir():
        return final
    tmp = root / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    logger.info("generating the shapes-cls dataset (%d + %d images per class) in %s", n_train, n_val, final)
    try:
        for split, (name, n) in enumerate((("train", n_train), ("val", n_val))):
            for c, cname in enumerate(NAMES):
                d = tmp / name / cname
                d.mkdir(parents=True)
                for i in range(n):
                    if not cv2.imwrite(str(d / f"{i:05d}.jpg"), render_crop(seed, split, i, cls=c),
                                       [cv2.IMWRITE_JPEG_QUALITY, 95]):
                        raise OSError(f"could not write {d / f'{i:05d}.jpg'}")
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "val").is_dir():
                raise
    except OSError as e:
        raise DatasetError(f"cannot write the shapes-cls dataset to {final} ({e}); set LIBREYOLO_DATASETS_DIR "
                           "to a writable folder") from e
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
