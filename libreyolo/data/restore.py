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
import torch
import yaml
from torch.utils.data import Dataset

from .._cv import cv2
from ..errors import ConfigError, DatasetError
from .config import IMG_SUFFIXES, resolve_image_files

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
    parts = list(lq.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "lq":
            parts[i] = "hq"
            same = Path(*parts)
            if not same.is_file():
                for suffix in IMG_SUFFIXES:
                    if same.with_suffix(suffix).is_file():
                        return same.with_suffix(suffix)
            return same
    raise DatasetError(f"image {lq} is not under an 'lq' folder, so its HQ image cannot be found; expected {LAYOUT}")


def load_restore_data(data: str | Path) -> RestoreDataConfig:
    """Read a restoration dataset yaml (or a folder holding ``data.yaml``, or a built-in name).

    Example:
        >>> import tempfile; from libreyolo.data.shapes_restore import ensure_shapes_restore_dataset
        >>> p = ensure_shapes_restore_dataset(Path(tempfile.mkdtemp()), kind="sr", n_train=2, n_val=1, imgsz=64)
        >>> cfg = load_restore_data(p)
        >>> cfg.scale, len(cfg.train), cfg.train[0][1].parent.name, cfg.nc
        (4, 2, 'train', 1)
    """
    if isinstance(data, str) and data in BUILTIN_RESTORE:
        from .shapes_restore import ensure_shapes_restore_dataset

        yaml_path = ensure_shapes_restore_dataset(kind=data.removeprefix("shapes-"))
    else:
        yaml_path = Path(data).expanduser()
        if yaml_path.is_dir() and (yaml_path / "data.yaml").is_file():
            yaml_path = yaml_path / "data.yaml"
        if not yaml_path.is_file():
            raise DatasetError(f"restoration dataset yaml {yaml_path} not found; pass a yaml ({LAYOUT}) or "
                               f"data='shapes-denoise' / 'shapes-sr' / 'shapes-sr2'")
    yaml_path = yaml_path.resolve()
    try:
        doc = yaml.safe_load(yaml_path.read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"dataset yaml {yaml_path} cannot be read: {e}") from e
    if not isinstance(doc, dict):
        raise DatasetError(f"dataset yaml {yaml_path} must be a mapping with keys path, train, val[, scale]")
    for key in ("train", "val"):
        if doc.get(key) is None:
            raise DatasetError(f"dataset yaml {yaml_path} is missing key '{key}' (required: train, val; "
                               "optional: path, scale, test)")
    raw_root = doc.get("path")
    root = yaml_path.parent if raw_root is None else Path(str(raw_root)).expanduser()
    root = root if root.is_absolute() else yaml_path.parent / root
    if not root.is_dir():
        raise DatasetError(f"{yaml_path}: dataset root 'path' {root} is not a folder")
    scale = doc.get("scale", 1)
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise DatasetError(f"{yaml_path}: 'scale' must be a positive int (1 for denoising, 4 for x4 "
                           f"super-resolution); got {scale!r}")
    splits: dict[str, list[tuple[Path, Path]]] = {}
    for key in ("train", "val", "test"):
        if doc.get(key) is not None:
            files = resolve_image_files(doc[key], root=root, key=key, yaml_path=yaml_path)
            splits[key] = [(f, hq_path(f)) for f in files]
    return RestoreDataConfig(root=root.resolve(), train=splits["train"], val=splits["val"],
                             test=splits.get("test", []), scale=int(scale), yaml_path=yaml_path)


def _image_hw(path: Path, what: str, prefix: str) -> tuple[int, int]:
    from PIL import Image

    if not path.is_file():
        raise DatasetError(f"{prefix}{what} image {path} is missing; every LQ image needs an HQ image of the same "
                           f"name ({LAYOUT})")
    try:
        with Image.open(path) as im:  # reads the header only
            return int(im.size[1]), int(im.size[0])
    except OSError as e:
        raise DatasetError(f"{prefix}{what} image {path} could not be read ({e})") from e


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


def _read_rgb(path: Path, prefix: str) -> np.ndarray:
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise DatasetError(f"{prefix}image {path} could not be read (missing or not an image)")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def _patch(img: np.ndarray, y: int, x: int, size: int) -> np.ndarray:
    """``img[y:y+size, x:x+size]``, edge-padded where the image is smaller than ``size``."""
    crop = img[y:y + size, x:x + size]
    ph, pw = size - crop.shape[0], size - crop.shape[1]
    if ph or pw:
        crop = np.pad(crop, ((0, ph), (0, pw), (0, 0)), mode="edge")
    return np.ascontiguousarray(crop)


class RestoreDataset(Dataset):
    """(LQ, HQ) pairs -> items (module docstring).

    Args:
        pairs: (LQ path, HQ path), e.g. ``RestoreDataConfig.train``.
        imgsz: side ``S`` of the LQ patches; the HQ patches are ``scale * S``.
        scale: HQ size / LQ size (1: denoising or deblurring; 4: x4 super-resolution).
        augment: random crop and flips (training) or the central crop (validation).
    """

    def __init__(self, pairs: list[tuple[Path, Path]], *, imgsz: int, scale: int = 1, augment: bool = False,
                 prefix: str = "", check: bool = True) -> None:
        if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < 8:
            raise ConfigError(f"imgsz must be an int >= 8, got {imgsz!r}")
        self.pairs = [(Path(a), Path(b)) for a, b in pairs]
        self.imgsz, self.scale, self.augment, self.prefix = imgsz, int(scale), augment, prefix
        if check:
            for lq, hq in self.pairs:
                check_pair(lq, hq, scale=self.scale, prefix=prefix)
        self._state = torch.zeros(2, dtype=torch.int64).share_memory_()  # epoch, seed (reach workers)

    # the trainer's dataset interface (shared with the other tasks' datasets)
    def set_epoch(self, epoch: int) -> None:
        self._state[0] = int(epoch)

    def set_seed(self, seed: int) -> None:
        self._state[1] = int(seed)

    @property
    def mosaic_enabled(self) -> bool:
        return False

    def close_mosaic(self) -> None:
        """No mosaic for restoration."""

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> dict[str, Any]:
        lq_path, hq_file = self.pairs[i]
        lq, hq = _read_rgb(lq_path, self.prefix), _read_rgb(hq_file, self.prefix)
        h, w = lq.shape[:2]
        if hq.shape[:2] != (h * self.scale, w * self.scale):
            check_pair(lq_path, hq_file, scale=self.scale, prefix=self.prefix)  # raises the one-line error
        s, k = self.imgsz, self.scale
        if self.augment:
            rng = np.random.default_rng([int(self._state[1]), int(self._state[0]), i])
            y, x = int(rng.integers(0, max(h - s, 0) + 1)), int(rng.integers(0, max(w - s, 0) + 1))
            flips = rng.random(2) < 0.5
        else:
            y, x, flips = max(h - s, 0) // 2, max(w - s, 0) // 2, np.zeros(2, bool)
        a, b = _patch(lq, y, x, s), _patch(hq, y * k, x * k, s * k)
        for axis, flip in enumerate(flips):
            if flip:
                a, b = np.flip(a, axis), np.flip(b, axis)
        return {"img": torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1).contiguous(),
                "target": torch.from_numpy(np.ascontiguousarray(b)).permute(2, 0, 1).contiguous(),
                "valid": (min(h, s), min(w, s)), "im_file": str(lq_path)}


def collate_restore(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items: ``img`` Tensor[B, 3, S, S] uint8, ``target`` Tensor[B, 3, sS, sS] uint8;
    ``valid`` and ``im_file`` as lists."""
    return {"img": torch.stack([it["img"] for it in items]), "target": torch.stack([it["target"] for it in items]),
            "valid": [it["valid"] for it in items], "im_file": [it["im_file"] for it in items]}
