"""Monocular depth datasets: images with a depth map each, and the built-in ``shapes-depth``.

Layout (a dataset yaml; relative paths resolve against ``path``, default the yaml's folder)::

    root/images/train/*.jpg     root/depth/train/*.png | *.npy     (same stems)
    root/images/val/*.jpg       root/depth/val/*.png | *.npy

    # data.yaml
    path: /data/my-set
    train: images/train
    val: images/val
    depth_scale: 1000      # optional, default 1: stored PNG value / depth_scale = depth (1000: mm -> m)
    max_depth: 10.0        # optional: depths above it count as missing

The depth of ``.../images/<x>/a.jpg`` is ``.../depth/<x>/a.png`` (a single-channel **16-bit** PNG;
its value divided by ``depth_scale``) or, when there is no PNG, ``.../depth/<x>/a.npy`` (a 2-D
float32/float64 or uint16 array of depths, ``depth_scale`` applies to uint16 only). A value ``<= 0``
or not finite means "no depth here" (not scored, not trained on). Every map of a split is checked
when its dataset is built: a missing file, a size mismatch or a wrong dtype raises a one-line
:class:`DatasetError` naming the file.

An item is a dict: ``img`` Tensor[3, S, S] uint8 RGB, ``depth`` Tensor[S, S] float32 (0 where
there is none, padding included), and for validation ``ori_depth`` (Tensor[h, w] float32, the
map as stored, missing = 0), ``ori_shape`` and ``ratio_pad``. Validation letterboxes as prediction
does with ``rect=False``; training draws a random scale (0.5-2x the fitting size), a random crop
or padding, a horizontal flip and HSV jitter, a pure function of ``(seed, epoch, index)``. Depth
maps are resized with nearest-neighbour sampling (no blending across a depth edge).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._cv import cv2
from ..errors import DatasetError
from .maps import (
    MapDataset,
    collate_maps,
    hwc_to_tensor,
    image_hw,
    letterbox_pair,
    open_dataset_yaml,
    pair_splits,
    read_rgb,
    scale_crop_pair,
    swap_folder,
)

BUILTIN_DEPTH = ("shapes-depth",)
LAYOUT = ("images/<split>/*.jpg with depth/<split>/*.png (16-bit) or *.npy and a yaml with "
          "path/train/val[/depth_scale/max_depth]")


@dataclass(frozen=True, kw_only=True)
class DepthDataConfig:
    """A parsed depth dataset: ``train`` / ``val`` / ``test`` are (image, depth file) pairs."""

    root: Path
    train: list[tuple[Path, Path]]
    val: list[tuple[Path, Path]]
    yaml_path: Path
    depth_scale: float = 1.0
    max_depth: float | None = None
    names: dict[int, str] = field(default_factory=lambda: {0: "depth"})
    nc: int = 1
    test: list[tuple[Path, Path]] = field(default_factory=list)


def depth_path(image: Path) -> Path:
    """The depth file of an image: the last ``images`` folder becomes ``depth``; ``.png`` when that
    file exists, else ``.npy``.

    Example:
        >>> depth_path(Path("/nowhere/images/train/a.jpg")).as_posix()
        '/nowhere/depth/train/a.npy'
    """
    swapped = swap_folder(image, "images", "depth")
    if swapped is None:
        raise DatasetError(f"image {image} is not under an 'images' folder, so its depth map cannot be found; "
                           f"expected {LAYOUT}")
    png = swapped.with_suffix(".png")
    return png if png.is_file() else png.with_suffix(".npy")


def _positive(doc: dict, key: str, default: float | None, yaml_path: Path) -> float | None:
    v = doc.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise DatasetError(f"{yaml_path}: '{key}' must be a positive number, got {v!r}")
    return float(v)


def load_depth_data(data: str | Path) -> DepthDataConfig:
    """Read a depth dataset yaml (or a folder holding ``data.yaml``, or ``"shapes-depth"``).

    Example:
        >>> import tempfile; from libreyolo.data.shapes_depth import ensure_shapes_depth_dataset
        >>> cfg = load_depth_data(ensure_shapes_depth_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64))
        >>> cfg.nc, cfg.depth_scale, len(cfg.train), cfg.train[0][1].suffix
        (1, 1000.0, 2, '.png')
    """
    if isinstance(data, str) and data in ("shapes", "shapes-cls", "shapes-sem"):
        raise DatasetError(f"{data!r} is no depth dataset; a depth model needs {LAYOUT}, or data='shapes-depth'")
    builtin = None
    if isinstance(data, str) and data in BUILTIN_DEPTH:
        def builtin() -> Path:
            from .shapes_depth import ensure_shapes_depth_dataset

            return ensure_shapes_depth_dataset()
    yaml_path, doc, root = open_dataset_yaml(
        data, builtin=builtin, noun="depth", hint=f"pass a yaml ({LAYOUT}) or data='shapes-depth'",
        keys="path, train, val", required=("train", "val"), optional="path, depth_scale, max_depth, test")
    splits = pair_splits(doc, root=root, yaml_path=yaml_path, partner=depth_path)
    return DepthDataConfig(root=root.resolve(), train=splits["train"], val=splits["val"], test=splits.get("test", []),
                           yaml_path=yaml_path, depth_scale=_positive(doc, "depth_scale", 1.0, yaml_path) or 1.0,
                           max_depth=_positive(doc, "max_depth", None, yaml_path))


def read_depth(path: Path, *, depth_scale: float = 1.0, max_depth: float | None = None,
               hw: tuple[int, int] | None = None, prefix: str = "") -> np.ndarray:
    """A depth file -> ndarray[h, w] float32 depths, 0 where there is none; checked: 16-bit PNG
    or 2-D float / uint16 ``.npy``, of size ``hw`` when given. Raises a one-line
    :class:`DatasetError` naming the file."""
    if not path.is_file():
        raise DatasetError(f"{prefix}depth map {path.with_suffix('.png')} (or .npy) is missing; every image needs "
                           f"one ({LAYOUT})")
    if path.suffix == ".npy":
        try:
            d = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DatasetError(f"{prefix}depth map {path} cannot be read as a .npy array ({e})") from e
        ok = d.ndim == 2 and (d.dtype in (np.float32, np.float64, np.float16) or d.dtype == np.uint16)
        what = "a 2-D float32/float64 or uint16 array of depths"
    else:
        d = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
        if d is None:
            raise DatasetError(f"{prefix}depth map {path} is not a readable image")
        ok, what = d.ndim == 2 and d.dtype == np.uint16, "a single-channel 16-bit PNG (value / depth_scale = depth)"
    if not ok:
        raise DatasetError(f"{prefix}depth map {path} has shape {d.shape} and dtype {d.dtype}; a depth map is {what}")
    if hw is not None and tuple(d.shape) != tuple(hw):
        raise DatasetError(f"{prefix}depth map {path} is {d.shape[1]}x{d.shape[0]} but its image is {hw[1]}x{hw[0]}; "
                           "a depth map must have the size of its image")
    out = d.astype(np.float32) / np.float32(depth_scale) if d.dtype == np.uint16 else d.astype(np.float32)
    bad = ~np.isfinite(out) | (out < 0)
    if max_depth is not None:
        bad |= out > max_depth
    out[bad] = 0.0
    return out


_image_hw = image_hw  # the old private name


class DepthDataset(MapDataset):
    """(image, depth file) pairs -> items (module docstring).

    Args:
        pairs: (image path, depth path), e.g. ``DepthDataConfig.train``.
        imgsz: side ``S`` of the square items.
        depth_scale, max_depth: as in the dataset yaml.
        augment: training transform (True) or the prediction letterbox (False).
        scale, fliplr, hsv_h, hsv_s, hsv_v: the training transform's ranges.
    """

    def __init__(self, pairs: list[tuple[Path, Path]], *, imgsz: int, depth_scale: float = 1.0,
                 max_depth: float | None = None, augment: bool = False, scale: tuple[float, float] = (0.5, 2.0),
                 fliplr: float = 0.5, hsv_h: float = 0.015, hsv_s: float = 0.7, hsv_v: float = 0.4,
                 prefix: str = "", check: bool = True) -> None:
        super().__init__(pairs, imgsz=imgsz, prefix=prefix)
        self.depth_scale, self.max_depth, self.augment = float(depth_scale), max_depth, augment
        self.scale, self.fliplr, self.hsv = scale, fliplr, (hsv_h, hsv_s, hsv_v)
        if check:
            for img, dep in self.pairs:
                self._depth(dep, image_hw(img))

    def _depth(self, path: Path, hw: tuple[int, int]) -> np.ndarray:
        return read_depth(path, depth_scale=self.depth_scale, max_depth=self.max_depth, hw=hw, prefix=self.prefix)

    def __getitem__(self, i: int) -> dict[str, Any]:
        img_path, dep_path = self.pairs[i]
        img = read_rgb(img_path, self.prefix)
        d = self._depth(dep_path, img.shape[:2])
        if self.augment:
            img, d = scale_crop_pair(img, d, self._rng(i), size=self.imgsz, scale=self.scale, fill=0.0, hsv=self.hsv,
                                     fliplr=self.fliplr)
            return {"img": hwc_to_tensor(img), "depth": torch.from_numpy(np.ascontiguousarray(d)),
                    "im_file": str(img_path)}
        boxed, depth, p = letterbox_pair(img, d, self.imgsz, fill=0.0, dtype=torch.float32)
        return {"img": boxed, "depth": depth, "ori_depth": torch.from_numpy(d), "ori_shape": tuple(d.shape),
                "ratio_pad": (p.ratio, p.pad), "im_file": str(img_path)}


def collate_depth(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items: ``img`` Tensor[B, 3, S, S] uint8, ``depth`` Tensor[B, S, S] float32; the per-image
    ``ori_depth`` / ``ori_shape`` / ``ratio_pad`` (validation) and ``im_file`` as lists."""
    return collate_maps(items, stack=("img", "depth"), optional=("ori_depth", "ori_shape", "ratio_pad"))
