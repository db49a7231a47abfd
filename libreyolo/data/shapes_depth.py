"""``shapes-depth``: the built-in depth demo set, shapes scenes with a known depth per pixel.

Each image is a scene of :func:`libreyolo.data.shapes.render_scene` (1-8 shapes on a textured
background). The background is a far plane tilted like a floor seen from above its horizon: its
depth runs linearly from 12 m at the top row to 9 m at the bottom row. Every shape is a
fronto-parallel plane at one depth, drawn uniformly in 2-8 m, sorted so that a shape drawn later
(which covers earlier ones in the image) is nearer: the depth order agrees with the occlusions.
A pixel belongs to the last-drawn shape of its class whose box holds it (the shapes' masks come
from ``render_scene``'s class map; where two shapes of one class overlap, the later one wins).

Depth is stored as a 16-bit PNG in millimetres (``depth_scale: 1000``). A pure function of
``(seed, split, index)``: byte-identical on every run. Written once under
``$LIBREYOLO_DATASETS_DIR`` (default ``~/.cache/libreyolo/datasets``) as
``shapes-depth-<hash>/{images,depth}/{train,val}`` plus ``data.yaml``, through a temporary folder
renamed when complete.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._cv import cv2
from .materialise import check_sizes, dataset_folder, materialise
from .shapes import GENERATOR_VERSION, default_datasets_dir, render_scene

FAR_TOP, FAR_BOTTOM = 12.0, 9.0  # background depth at the top / bottom row, metres
NEAR = (2.0, 8.0)  # range of the shapes' depths, metres
DEPTH_SCALE = 1000  # stored value / DEPTH_SCALE = metres


def render_depth(seed: int, split: int, index: int, *, imgsz: int) -> tuple[np.ndarray, np.ndarray]:
    """One scene and its depth: (ndarray[h, w, 3] uint8 BGR, ndarray[h, w] float32 metres); the long
    side is ``imgsz``, the short side 60-100 % of it.

    Example:
        >>> img, depth = render_depth(0, 0, 0, imgsz=64)
        >>> img.shape[:2] == depth.shape, depth.dtype, 2.0 <= float(depth.min()) <= float(depth.max()) <= 12.0
        (True, dtype('float32'), True)
    """
    rng = np.random.default_rng([seed, split, index, GENERATOR_VERSION, 31])
    short = int(round(imgsz * rng.uniform(0.6, 1.0)))
    h, w = (short, imgsz) if rng.random() < 0.5 else (imgsz, short)
    cls_map = np.zeros((h, w), np.uint8)
    img, labels = render_scene(rng, height=h, width=w, semantic_out=cls_map)
    rows = np.linspace(FAR_TOP, FAR_BOTTOM, h, dtype=np.float64)
    depth = np.repeat(rows[:, None], w, axis=1)
    near = np.sort(rng.uniform(*NEAR, len(labels)))[::-1]  # later shapes nearer
    for (cls, x1, y1, x2, y2), z in zip(labels, near, strict=True):
        box = (slice(int(y1), int(y2)), slice(int(x1), int(x2)))
        depth[box][cls_map[box] == int(cls) + 1] = z
    return img, depth.astype(np.float32)


def ensure_shapes_depth_dataset(root: Path | None = None, *, n_train: int = 500, n_val: int = 100,
                                imgsz: int = 256, seed: int = 0) -> Path:
    """Return the ``data.yaml`` of the dataset (``.../shapes-depth-<hash>/``), generating it first if needed.

    Example:
        >>> import tempfile; p = ensure_shapes_depth_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64)
        >>> p.name, sorted(f.name for f in (p.parent / "depth" / "train").iterdir())
        ('data.yaml', ['train_000000.png', 'train_000001.png'])
    """
    check_sizes("ensure_shapes_depth_dataset", n_train=n_train, n_val=n_val, imgsz=imgsz)
    root = Path(root) if root is not None else default_datasets_dir()
    final = dataset_folder(root, "shapes-depth", f"depth-v{GENERATOR_VERSION}-{n_train}-{n_val}-{imgsz}-{seed}")

    def write(tmp: Path) -> None:
        for split, (name, n) in enumerate((("train", n_train), ("val", n_val))):
            (tmp / "images" / name).mkdir(parents=True)
            (tmp / "depth" / name).mkdir(parents=True)
            for i in range(n):
                img, depth = render_depth(seed, split, i, imgsz=imgsz)
                stem = f"{name}_{i:06d}"
                mm = np.round(depth * DEPTH_SCALE).astype(np.uint16)
                ok = cv2.imwrite(str(tmp / "images" / name / f"{stem}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 95])
                ok = ok and cv2.imwrite(str(tmp / "depth" / name / f"{stem}.png"), mm)
                if not ok:
                    raise OSError(f"could not write {stem} under {tmp}")
        (tmp / "data.yaml").write_text(
            f"# libreyolo built-in 'shapes-depth' dataset (generator v{GENERATOR_VERSION}, seed {seed})\n"
            f"path: {final.resolve()}\ntrain: images/train\nval: images/val\ndepth_scale: {DEPTH_SCALE}\n")

    return materialise(final, write, what="shapes-depth dataset",
                       detail=f"{n_train} train + {n_val} val images, {imgsz} px")
