"""``shapes-seg``: the built-in instance-segmentation demo set, shapes scenes with polygon labels.

Each image is a scene of :func:`libreyolo.data.shapes.render_scene` (1-8 shapes of six classes on
a textured background). Each shape's polygon is the outer contour of the pixels it kept in the
image (a later shape covering part of an earlier one takes those pixels; a shape split in two
keeps its largest part), traced on the drawn pixels, vertices at pixel centres: filled back at
the image size it gives those pixels. Labels are Ultralytics polygon lines ``cls x1 y1 ...``
normalised by the image size. A pure function of ``(seed, split, index)``: byte-identical on
every run. Written once under ``$LIBREYOLO_DATASETS_DIR`` (default ``~/.cache/libreyolo/datasets``)
as ``shapes-seg-<hash>/{images,labels}/{train,val}`` plus ``data.yaml``, through a temporary
folder renamed when complete.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._cv import cv2
from .materialise import check_sizes, dataset_folder, materialise
from .shapes import GENERATOR_VERSION, NAMES, default_datasets_dir, render_scene


def render_instances(seed: int, split: int, index: int, *, imgsz: int) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """One scene and its instances: (ndarray[h, w, 3] uint8 BGR, [(class id, ndarray[k, 2]
    float64 pixel x, y of the polygon)]); the long side is ``imgsz``.

    Example:
        >>> img, inst = render_instances(0, 0, 0, imgsz=64)
        >>> img.shape[0] == 64 or img.shape[1] == 64, all(p.shape[1] == 2 and len(p) >= 3 for _, p in inst)
        (True, True)
    """
    rng = np.random.default_rng([seed, split, index, GENERATOR_VERSION, 31])
    short = int(round(imgsz * rng.uniform(0.6, 1.0)))
    h, w = (short, imgsz) if rng.random() < 0.5 else (imgsz, short)
    ids = np.zeros((h, w), np.uint8)
    img, labels = render_scene(rng, height=h, width=w, instance_out=ids)
    out = []
    for k, row in enumerate(labels):
        contours, _ = cv2.findContours((ids == k + 1).astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        if not contours:
            continue
        c = max(contours, key=lambda a: (cv2.contourArea(a), len(a)))[:, 0, :].astype(np.float64)
        if len(c) >= 3:
            out.append((int(row[0]), c))
    return img, out


def polygon_line(cls: int, poly: np.ndarray, hw: tuple[int, int]) -> str:
    """One label line ``cls x1 y1 ...`` (6 decimals) of a pixel polygon in an image of ``hw``.

    Example:
        >>> polygon_line(2, np.array([[0.0, 0.0], [9.0, 0.0], [9.0, 4.0]]), (5, 10))
        '2 0.000000 0.000000 0.900000 0.000000 0.900000 0.800000'
    """
    h, w = hw
    xy = np.asarray(poly, np.float64) / (w, h)
    return f"{cls} " + " ".join(f"{v:.6f}" for v in xy.reshape(-1))


def ensure_shapes_seg_dataset(root: Path | None = None, *, n_train: int = 500, n_val: int = 100,
                              imgsz: int = 256, seed: int = 0) -> Path:
    """Return the ``data.yaml`` of the dataset (``.../shapes-seg-<hash>/``), generating it first if needed.

    Example:
        >>> import tempfile; p = ensure_shapes_seg_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64)
        >>> p.name, sorted(f.name for f in (p.parent / "labels" / "train").iterdir())
        ('data.yaml', ['train_000000.txt', 'train_000001.txt'])
    """
    check_sizes("ensure_shapes_seg_dataset", n_train=n_train, n_val=n_val, imgsz=imgsz)
    root = Path(root) if root is not None else default_datasets_dir()
    final = dataset_folder(root, "shapes-seg", f"seg-v{GENERATOR_VERSION}-{n_train}-{n_val}-{imgsz}-{seed}")

    def write(tmp: Path) -> None:
        for split, (name, n) in enumerate((("train", n_train), ("val", n_val))):
            (tmp / "images" / name).mkdir(parents=True)
            (tmp / "labels" / name).mkdir(parents=True)
            for i in range(n):
                img, inst = render_instances(seed, split, i, imgsz=imgsz)
                stem = f"{name}_{i:06d}"
                if not cv2.imwrite(str(tmp / "images" / name / f"{stem}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 95]):
                    raise OSError(f"could not write {stem} under {tmp}")
                lines = [polygon_line(c, p, img.shape[:2]) for c, p in inst]
                (tmp / "labels" / name / f"{stem}.txt").write_text("".join(x + "\n" for x in lines))
        names = "\n".join(f"  {i}: {n}" for i, n in enumerate(NAMES))
        (tmp / "data.yaml").write_text(
            f"# libreyolo built-in 'shapes-seg' dataset (generator v{GENERATOR_VERSION}, seed {seed})\n"
            f"path: {final.resolve()}\ntrain: images/train\nval: images/val\nnames:\n{names}\n")

    return materialise(final, write, what="shapes-seg dataset",
                       detail=f"{n_train} train + {n_val} val images, {imgsz} px")
