"""Image-restoration datasets: paired low-quality / high-quality folders, and the built-in demos.

Layout (a dataset yaml; relative paths resolve against ``path``, default the yaml's folder)::

    root/lq/train/*.png     root/hq/train/*.png     (same file names)
    root/lq/val/*.png       root/hq/val/*.png

    # data.yaml
    path: /data/my-set
    train: lq/train
    val: lq/val
    scale: 4            # optional, default 1: an HQ image is scale x its LQ image (4 for x4 SR)

The HQ image of ``.../lq/<x>/a.png`` is ``.../hq/<x>/a.png`` (the last ``lq`` folder of the path
becomes ``hq``; the same file name, any image suffix). Every pair of a split is checked when its
dataset is built: a missing HQ image or an HQ size that is not ``scale`` x the LQ size raises a
one-line :class:`DatasetError` naming the files. The built-in demos are ``"shapes-denoise"``,
``"shapes-sr"`` (x4) and ``"shapes-sr2"`` (x2) (:mod:`libreyolo.data.shapes_restore`).

An item is a dict: ``img`` Tensor[3, S, S] uint8 RGB (the LQ patch, the network input),
``target`` Tensor[3, s*S, s*S] uint8 RGB (the HQ patch), ``valid`` (h, w): the part of the LQ
patch that is image (the rest is edge padding of an image smaller than ``S``), ``im_file``.
Training takes a random ``S x S`` LQ crop with the aligned HQ crop, a horizontal and a vertical
flip, as a pure function of ``(seed, epoch, index)``; validation takes the central crop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError
from .config import IMG_SUFFIXES
from .maps import (
    MapDataset,
    collate_maps,
    hwc_to_tensor,
    image_hw,
    open_dataset_yaml,
    pair_splits,
    read_rgb,
    swap_folder,
)

BUILTIN_RESTORE = ("shapes-denoise", "shapes-sr", "shapes-sr2")
LAYOUT = "lq/<split>/*.png with hq/<split>/*.png of the same names and a yaml with path/train/val[/scale]"
NAMES = {0: "image"}  # a restoration model has no classes: nc is 1


@dataclass(frozen=True, kw_only=True)
class RestoreDataConfig:
    """A parsed restoration dataset: ``train`` / ``val`` / ``test`` are (LQ, HQ) path pairs."""

    root: Path
    train: list[tuple[Path, Path]]
    val: list[tuple[Path, Path]]
    scale: int
    yaml_path: Path
    test: list[tuple[Path, Path]] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=lambda: dict(NAMES))
    nc: int = 1


def hq_path(lq: Path) -> Path:
    """The HQ file of an LQ image: the last ``lq`` folder of its path becomes ``hq``; the first
    existing file with the same stem and an image suffix (the same name when none exists).

    Example:
        >>> hq_path(Path("/d/lq/train/a.png")).as_posix()
        '/d/hq/train/a.png'
    """
    same = swap_folder(lq, "lq", "hq")
    if same is None:
        raise DatasetError(f"image {lq} is not under an 'lq' folder, so its HQ image cannot be found; expected {LAYOUT}")
    if not same.is_file():
        for suffix in IMG_SUFFIXES:
            if same.with_suffix(suffix).is_file():
                return same.with_suffix(suffix)
    return same


def load_restore_data(data: str | Path) -> RestoreDataConfig:
    """Read a restoration dataset yaml (or a folder holding ``data.yaml``, or a built-in name).

    Example:
        >>> import tempfile; from libreyolo.data.shapes_restore import ensure_shapes_restore_dataset
        >>> p = ensure_shapes_restore_dataset(Path(tempfile.mkdtemp()), kind="sr", n_train=2, n_val=1, imgsz=64)
        >>> cfg = load_restore_data(p)
        >>> cfg.scale, len(cfg.train), cfg.train[0][1].parent.name, cfg.nc
        (4, 2, 'train', 1)
    """
    builtin = None
    if isinstance(data, str) and data in BUILTIN_RESTORE:
        def builtin() -> Path:
            from .shapes_restore import ensure_shapes_restore_dataset

            return ensure_shapes_restore_dataset(kind=data.removeprefix("shapes-"))
    yaml_path, doc, root = open_dataset_yaml(
        data, builtin=builtin, noun="restoration",
        hint=f"pass a yaml ({LAYOUT}) or data='shapes-denoise' / 'shapes-sr' / 'shapes-sr2'",
        keys="path, train, val[, scale]", required=("train", "val"), optional="path, scale, test")
    scale = doc.get("scale", 1)
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise DatasetError(f"{yaml_path}: 'scale' must be a positive int (1 for denoising, 4 for x4 "
                           f"super-resolution); got {scale!r}")
    splits = pair_splits(doc, root=root, yaml_path=yaml_path, partner=hq_path)
    return RestoreDataConfig(root=root.resolve(), train=splits["train"], val=splits["val"],
                             test=splits.get("test", []), scale=int(scale), yaml_path=yaml_path)


def _image_hw(path: Path, what: str, prefix: str) -> tuple[int, int]:
    if not path.is_file():
        raise DatasetError(f"{prefix}{what} image {path} is missing; every LQ image needs an HQ image of the same "
                           f"name ({LAYOUT})")
    return image_hw(path, label=f"{prefix}{what} image")


def check_pair(lq: Path, hq: Path, *, scale: int, prefix: str = "") -> tuple[int, int]:
    """The LQ (h, w) of a pair, after checking that the HQ image exists and is ``scale`` x its size.

    Example:
        >>> import tempfile; from libreyolo.data.shapes_restore import ensure_shapes_restore_dataset
        >>> cfg = load_restore_data(ensure_shapes_restore_dataset(Path(tempfile.mkdtemp()), kind="sr", n_train=1, n_val=1, imgsz=64))
        >>> check_pair(*cfg.train[0], scale=4)
        (16, 16)
    """
    h, w = _image_hw(lq, "LQ", prefix)
    hh, hw = _image_hw(hq, "HQ", prefix)
    if (hh, hw) != (h * scale, w * scale):
        raise DatasetError(f"{prefix}HQ image {hq} is {hw}x{hh} but its LQ image {lq} is {w}x{h}; with scale={scale} "
                           f"the HQ image must be {w * scale}x{h * scale}")
    return h, w


_read_rgb = read_rgb  # the old private name


def _patch(img: np.ndarray, y: int, x: int, size: int) -> np.ndarray:
    """``img[y:y+size, x:x+size]``, edge-padded where the image is smaller than ``size``."""
    crop = img[y:y + size, x:x + size]
    ph, pw = size - crop.shape[0], size - crop.shape[1]
    if ph or pw:
        crop = np.pad(crop, ((0, ph), (0, pw), (0, 0)), mode="edge")
    return np.ascontiguousarray(crop)


class RestoreDataset(MapDataset):
    """(LQ, HQ) pairs -> items (module docstring).

    Args:
        pairs: (LQ path, HQ path), e.g. ``RestoreDataConfig.train``.
        imgsz: side ``S`` of the LQ patches; the HQ patches are ``scale * S``.
        scale: HQ size / LQ size (1: denoising or deblurring; 4: x4 super-resolution).
        augment: random crop and flips (training) or the central crop (validation).
    """

    def __init__(self, pairs: list[tuple[Path, Path]], *, imgsz: int, scale: int = 1, augment: bool = False,
                 prefix: str = "", check: bool = True) -> None:
        super().__init__(pairs, imgsz=imgsz, prefix=prefix)
        self.scale, self.augment = int(scale), augment
        if check:
            for lq, hq in self.pairs:
                check_pair(lq, hq, scale=self.scale, prefix=prefix)

    def __getitem__(self, i: int) -> dict[str, Any]:
        lq_path, hq_file = self.pairs[i]
        lq, hq = read_rgb(lq_path, self.prefix), read_rgb(hq_file, self.prefix)
        h, w = lq.shape[:2]
        if hq.shape[:2] != (h * self.scale, w * self.scale):
            check_pair(lq_path, hq_file, scale=self.scale, prefix=self.prefix)  # raises the one-line error
        s, k = self.imgsz, self.scale
        if self.augment:
            rng = self._rng(i)
            y, x = int(rng.integers(0, max(h - s, 0) + 1)), int(rng.integers(0, max(w - s, 0) + 1))
            flips = rng.random(2) < 0.5
        else:
            y, x, flips = max(h - s, 0) // 2, max(w - s, 0) // 2, np.zeros(2, bool)
        a, b = _patch(lq, y, x, s), _patch(hq, y * k, x * k, s * k)
        for axis, flip in enumerate(flips):
            if flip:
                a, b = np.flip(a, axis), np.flip(b, axis)
        return {"img": hwc_to_tensor(a), "target": hwc_to_tensor(b),
                "valid": (min(h, s), min(w, s)), "im_file": str(lq_path)}


def collate_restore(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items: ``img`` Tensor[B, 3, S, S] uint8, ``target`` Tensor[B, 3, sS, sS] uint8;
    ``valid`` and ``im_file`` as lists."""
    return collate_maps(items, stack=("img", "target"), lists=("valid", "im_file"))
