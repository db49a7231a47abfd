"""``shapes-matte``: the built-in matte demo set, shapes scenes whose foreground is every drawn shape.

Each image is a scene of :func:`libreyolo.data.shapes.render_scene` (1-8 shapes on a textured
background); its mask is exact, from the same drawing: 255 on every pixel a shape is painted on,
0 on the background (the shapes have hard edges, so there is no fractional alpha). Stored as an
8-bit single-channel PNG beside each JPEG, ``masks/<split>/<stem>.png``. A pure function of
``(seed, split, index)``: byte-identical on every run. Written once under
``$LIBREYOLO_DATASETS_DIR`` (default ``~/.cache/libreyolo/datasets``) as
``shapes-matte-<hash>/{images,masks}/{train,val}`` plus ``data.yaml``, through a temporary folder
renamed when complete.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._cv import cv2
from .materialise import check_sizes, dataset_folder, materialise
from .shapes import GENERATOR_VERSION, default_datasets_dir, render_scene


def render_matte(seed: int, split: int, index: int, *, imgsz: int) -> tuple[np.ndarray, np.ndarray]:
    """One scene and its foreground mask: (ndarray[h, w, 3] uint8 BGR, ndarray[h, w] uint8 0 / 255);
    the long side is ``imgsz``, the short side 60-100 % of it.

    Example:
        >>> img, mask = render_matte(0, 0, 0, imgsz=64)
        >>> img.shape[:2] == mask.shape, sorted(np.unique(mask).tolist())
        (True, [0, 255])
    """
    rng = np.random.default_rng([seed, split, index, GENERATOR_VERSION, 37])
    short = int(round(imgsz * rng.uniform(0.6, 1.0)))
    h, w = (short, imgsz) if rng.random() < 0.5 else (imgsz, short)
    cls_map = np.zeros((h, w), np.uint8)
    img, _ = render_scene(rng, height=h, width=w, semantic_out=cls_map)
    return img, np.where(cls_map > 0, 255, 0).astype(np.uint8)


def ensure_shapes_matte_dataset(root: Path | None = None, *, n_train: int = 500, n_val: int = 100,
                                imgsz: int = 256, seed: int = 0) -> Path:
    """Return the ``data.yaml`` of the dataset (``.../shapes-matte-<hash>/``), generating it first if needed.

    Example:
        >>> import tempfile; p = ensure_shapes_matte_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64)
        >>> p.name, sorted(f.name for f in (p.parent / "masks" / "train").iterdir())
        ('data.yaml', ['train_000000.png', 'train_000001.png'])
    """
    check_sizes("ensure_shapes_matte_dataset", n_train=n_train, n_val=n_val, imgsz=imgsz)
    root = Path(root) if root is not None else default_datasets_dir()
    final = dataset_folder(root, "shapes-matte", f"matte-v{GENERATOR_VERSION}-{n_train}-{n_val}-{imgsz}-{seed}")

    def write(tmp: Path) -> None:
        for split, (name, n) in enumerate((("train", n_train), ("val", n_val))):
            (tmp / "images" / name).mkdir(parents=True)
            (tmp / "masks" / name).mkdir(parents=True)
            for i in range(n):
                img, mask = render_matte(seed, split, i, imgsz=imgsz)
                stem = f"{name}_{i:06d}"
                ok = cv2.imwrite(str(tmp / "images" / name / f"{stem}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 95])
                ok = ok and cv2.imwrite(str(tmp / "masks" / name / f"{stem}.png"), mask)
                if not ok:
                    raise OSError(f"could not write {stem} under {tmp}")
        (tmp / "data.yaml").write_text(
            f"# libreyolo built-in 'shapes-matte' dataset (generator v{GENERATOR_VERSION}, seed {seed})\n"
            f"path: {final.resolve()}\ntrain: images/train\nval: images/val\n")

    return materialise(final, write, what="shapes-matte dataset",
                       detail=f"{n_train} train + {n_val} val images, {imgsz} px")
