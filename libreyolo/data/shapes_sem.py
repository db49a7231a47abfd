"""``shapes-sem``: the built-in semantic-segmentation demo set, shapes scenes with index masks.

Each image is a scene of :func:`libreyolo.data.shapes.render_scene` (1-8 shapes on a textured
background); its mask holds, for every pixel, ``0`` (background) or ``1 + the shape class``
of the shape painted there (``circle`` = 1 ... ``cross`` = 6): the exact pixels drawn, so a
later shape covers an earlier one as in the image. Seven classes, a pure function of
``(seed, split, index)``: byte-identical on every run. Written once under
``$LIBREYOLO_DATASETS_DIR`` (default ``~/.cache/libreyolo/datasets``) as
``shapes-sem-<hash>/{images,masks}/{train,val}`` plus ``data.yaml`` (``ignore_index: 255``),
through a temporary folder renamed when complete.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._cv import cv2
from .materialise import check_sizes, dataset_folder, materialise
from .shapes import GENERATOR_VERSION, NAMES, default_datasets_dir, render_scene

SEM_NAMES: tuple[str, ...] = ("background", *NAMES)


def render_semantic(seed: int, split: int, index: int, *, imgsz: int) -> tuple[np.ndarray, np.ndarray]:
    """One scene and its mask: (ndarray[h, w, 3] uint8 BGR, ndarray[h, w] uint8 class ids); the
    long side is ``imgsz``, the short side 60-100 % of it.

    Example:
        >>> img, mask = render_semantic(0, 0, 0, imgsz=64)
        >>> img.shape[:2] == mask.shape, mask.dtype, int(mask.max()) <= 6
        (True, dtype('uint8'), True)
    """
    rng = np.random.default_rng([seed, split, index, GENERATOR_VERSION, 29])
    short = int(round(imgsz * rng.uniform(0.6, 1.0)))
    h, w = (short, imgsz) if rng.random() < 0.5 else (imgsz, short)
    mask = np.zeros((h, w), np.uint8)
    img, _ = render_scene(rng, height=h, width=w, semantic_out=mask)
    return img, mask


def ensure_shapes_sem_dataset(root: Path | None = None, *, n_train: int = 500, n_val: int = 100,
                              imgsz: int = 256, seed: int = 0) -> Path:
    """Return the ``data.yaml`` of the dataset (``.../shapes-sem-<hash>/``), generating it first if needed.

    Example:
        >>> import tempfile; p = ensure_shapes_sem_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64)
        >>> p.name, sorted(f.name for f in (p.parent / "masks" / "train").iterdir())
        ('data.yaml', ['train_000000.png', 'train_000001.png'])
    """
    check_sizes("ensure_shapes_sem_dataset", n_train=n_train, n_val=n_val, imgsz=imgsz)
    root = Path(root) if root is not None else default_datasets_dir()
    final = dataset_folder(root, "shapes-sem", f"sem-v{GENERATOR_VERSION}-{n_train}-{n_val}-{imgsz}-{seed}")

    def write(tmp: Path) -> None:
        for split, (name, n) in enumerate((("train", n_train), ("val", n_val))):
            (tmp / "images" / name).mkdir(parents=True)
            (tmp / "masks" / name).mkdir(parents=True)
            for i in range(n):
                img, mask = render_semantic(seed, split, i, imgsz=imgsz)
                stem = f"{name}_{i:06d}"
                ok = cv2.imwrite(str(tmp / "images" / name / f"{stem}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 95])
                ok = ok and cv2.imwrite(str(tmp / "masks" / name / f"{stem}.png"), mask)
                if not ok:
                    raise OSError(f"could not write {stem} under {tmp}")
        names = "\n".join(f"  {i}: {n}" for i, n in enumerate(SEM_NAMES))
        (tmp / "data.yaml").write_text(
            f"# libreyolo built-in 'shapes-sem' dataset (generator v{GENERATOR_VERSION}, seed {seed})\n"
            f"path: {final.resolve()}\ntrain: images/train\nval: images/val\nignore_index: 255\n"
            f"names:\n{names}\n")

    return materialise(final, write, what="shapes-sem dataset",
                       detail=f"{n_train} train + {n_val} val images, {imgsz} px")
