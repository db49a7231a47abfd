"""Semantic-segmentation datasets: images with PNG index masks, and the built-in ``shapes-sem``.

Layout (a dataset yaml; relative paths resolve against ``path``, default the yaml's folder)::

    root/images/train/*.jpg     root/masks/train/*.png     (same stems)
    root/images/val/*.jpg       root/masks/val/*.png

    # data.yaml
    path: /data/my-set
    train: images/train
    val: images/val
    names: [background, road, car]
    ignore_index: 255            # optional, default 255; pixels with this value are not scored

A mask is a single-channel PNG (8 or 16 bit) of the image's size whose every pixel is a class
id ``0..nc-1`` or ``ignore_index`` (which must be >= nc). The mask of ``.../images/<x>/a.jpg``
is ``.../masks/<x>/a.png`` (the last ``images`` folder of the path becomes ``masks``). Every
mask of a split is checked when its dataset is built: a missing mask, a size mismatch or a
value that is neither a class nor ``ignore_index`` raises a one-line :class:`DatasetError`
naming the file.

An item is a dict: ``img`` Tensor[3, S, S] uint8 RGB, ``mask`` Tensor[S, S] int64 (class ids,
:data:`IGNORE` where not scored: ``ignore_index`` pixels and padding), and for validation
``ori_mask`` (Tensor[h, w] int64, the mask as stored), ``ori_shape`` (h, w) and ``ratio_pad``.
Validation letterboxes exactly as prediction does with ``rect=False`` (aspect kept, 114 grey
padding, :func:`libreyolo.ops.letterbox.letterbox`); training draws a random scale (0.5-2x the
fitting size), a random ``S x S`` crop or padding, a horizontal flip and HSV jitter, as a pure
function of ``(seed, epoch, index)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._cv import cv2
from ..errors import DatasetError
from .config import _parse_names
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

BUILTIN_SEM = ("shapes-sem",)
IGNORE = -1  # the label of a pixel that is not scored, inside the tensors the loss and scorer see
LAYOUT = "images/<split>/*.jpg with masks/<split>/*.png and a yaml with path/train/val/names[/ignore_index]"


@dataclass(frozen=True, kw_only=True)
class SemanticDataConfig:
    """A parsed semantic dataset: ``train`` / ``val`` / ``test`` are (image, mask) path pairs."""

    root: Path
    train: list[tuple[Path, Path]]
    val: list[tuple[Path, Path]]
    names: dict[int, str]
    nc: int
    ignore_index: int
    yaml_path: Path
    test: list[tuple[Path, Path]] = field(default_factory=list)


def mask_path(image: Path) -> Path:
    """The mask file of an image: the last ``images`` folder of its path becomes ``masks``, the
    suffix ``.png``.

    Example:
        >>> mask_path(Path("/d/images/train/a.jpg")).as_posix()
        '/d/masks/train/a.png'
    """
    swapped = swap_folder(image, "images", "masks")
    if swapped is None:
        raise DatasetError(f"image {image} is not under an 'images' folder, so its mask cannot be found; "
                           f"expected {LAYOUT}")
    return swapped.with_suffix(".png")


def load_semantic_data(data: str | Path) -> SemanticDataConfig:
    """Read a semantic dataset yaml (or a folder holding ``data.yaml``, or ``"shapes-sem"``).

    Raises :class:`DatasetError` for a missing or malformed yaml, a missing key, a bad
    ``ignore_index`` or a split without images.

    Example:
        >>> import tempfile; from libreyolo.data.shapes_sem import ensure_shapes_sem_dataset
        >>> cfg = load_semantic_data(ensure_shapes_sem_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64))
        >>> cfg.nc, cfg.names[0], cfg.ignore_index, len(cfg.train), cfg.train[0][1].suffix
        (7, 'background', 255, 2, '.png')
    """
    if isinstance(data, str) and data in ("shapes", "shapes-cls"):
        raise DatasetError(f"{data!r} is a {'detection' if data == 'shapes' else 'classification'} dataset; a "
                           f"semantic-segmentation model needs {LAYOUT}, or data='shapes-sem'")
    builtin = None
    if isinstance(data, str) and data in BUILTIN_SEM:
        def builtin() -> Path:
            from .shapes_sem import ensure_shapes_sem_dataset

            return ensure_shapes_sem_dataset()
    yaml_path, doc, root = open_dataset_yaml(
        data, builtin=builtin, noun="semantic", hint=f"pass a yaml ({LAYOUT}) or data='shapes-sem'",
        keys="path, train, val, names", required=("train", "val", "names"), optional="path, ignore_index, test")
    names = _parse_names(doc["names"], yaml_path)
    ignore = doc.get("ignore_index", 255)
    if isinstance(ignore, bool) or not isinstance(ignore, int) or ignore < len(names):
        raise DatasetError(f"{yaml_path}: 'ignore_index' must be an int >= nc ({len(names)}), so that it is no "
                           f"class id; got {ignore!r}")
    splits = pair_splits(doc, root=root, yaml_path=yaml_path, partner=mask_path)
    return SemanticDataConfig(root=root.resolve(), train=splits["train"], val=splits["val"],
                              test=splits.get("test", []), names=names, nc=len(names), ignore_index=int(ignore),
                              yaml_path=yaml_path)


def read_mask(path: Path, *, nc: int, ignore_index: int, hw: tuple[int, int] | None = None,
              prefix: str = "") -> np.ndarray:
    """A mask PNG -> ndarray[h, w] (uint8 or uint16), checked: single channel, of size ``hw`` when
    given, every value a class id or ``ignore_index``. Raises a one-line :class:`DatasetError`
    naming the file."""
    m = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if m is None:
        raise DatasetError(f"{prefix}mask {path} is missing or not an image; every image needs a PNG index mask "
                           f"({LAYOUT})")
    if m.ndim != 2 or m.dtype not in (np.uint8, np.uint16):
        raise DatasetError(f"{prefix}mask {path} has shape {m.shape} and dtype {m.dtype}; a mask is a single-channel "
                           "8- or 16-bit PNG of class ids (not a colour picture)")
    if hw is not None and tuple(m.shape) != tuple(hw):
        raise DatasetError(f"{prefix}mask {path} is {m.shape[1]}x{m.shape[0]} but its image is {hw[1]}x{hw[0]}; "
                           "a mask must have the size of its image")
    bad = (m >= nc) & (m != ignore_index)
    if bad.any():
        v = int(m[bad][0])
        raise DatasetError(f"{prefix}mask {path} holds value {v} on {int(bad.sum())} pixels: values must be class "
                           f"ids 0..{nc - 1} or ignore_index {ignore_index}")
    return m


_image_hw = image_hw  # the old private name


def check_masks(pairs: list[tuple[Path, Path]], *, nc: int, ignore_index: int, prefix: str = "") -> None:
    """:func:`read_mask` on every pair (the size compared with the image's header)."""
    for img, mask in pairs:
        read_mask(mask, nc=nc, ignore_index=ignore_index, hw=image_hw(img), prefix=prefix)


def to_labels(m: np.ndarray, nc: int) -> torch.Tensor:
    """Stored mask values -> Tensor int64 of class ids, :data:`IGNORE` for every value >= nc."""
    t = torch.from_numpy(m.astype(np.int64))
    return t.masked_fill_(t >= nc, IGNORE)


class SemanticDataset(MapDataset):
    """(image, mask) pairs -> items (module docstring).

    Args:
        pairs: (image path, mask path), e.g. ``SemanticDataConfig.train``.
        imgsz: side ``S`` of the square items.
        nc, ignore_index: the dataset's classes and its not-scored value (masks are checked).
        augment: training transform (True) or the prediction letterbox (False).
        scale: range of the random scale (training); fliplr, hsv_h, hsv_s, hsv_v: flip and colour.
    """

    def __init__(self, pairs: list[tuple[Path, Path]], *, imgsz: int, nc: int, ignore_index: int = 255,
                 augment: bool = False, scale: tuple[float, float] = (0.5, 2.0), fliplr: float = 0.5,
                 hsv_h: float = 0.015, hsv_s: float = 0.7, hsv_v: float = 0.4, prefix: str = "",
                 check: bool = True) -> None:
        super().__init__(pairs, imgsz=imgsz, prefix=prefix)
        self.nc, self.ignore_index, self.augment = int(nc), int(ignore_index), augment
        self.scale, self.fliplr, self.hsv = scale, fliplr, (hsv_h, hsv_s, hsv_v)
        if check:
            check_masks(self.pairs, nc=self.nc, ignore_index=self.ignore_index, prefix=prefix)

    def _read(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        img_path, mask_file = self.pairs[i]
        img = read_rgb(img_path, self.prefix)
        m = read_mask(mask_file, nc=self.nc, ignore_index=self.ignore_index, hw=img.shape[:2], prefix=self.prefix)
        return img, m

    def __getitem__(self, i: int) -> dict[str, Any]:
        img, m = self._read(i)
        if self.augment:
            img, m = scale_crop_pair(img, m, self._rng(i), size=self.imgsz, scale=self.scale, fill=self.ignore_index,
                                     hsv=self.hsv, fliplr=self.fliplr)
            return {"img": hwc_to_tensor(img), "mask": to_labels(np.ascontiguousarray(m), self.nc),
                    "im_file": str(self.pairs[i][0])}
        boxed, mask, p = letterbox_pair(img, m, self.imgsz, fill=IGNORE, dtype=torch.int64,
                                        convert=lambda small: to_labels(small, self.nc))
        return {"img": boxed, "mask": mask, "ori_mask": to_labels(m, self.nc), "ori_shape": tuple(m.shape),
                "ratio_pad": (p.ratio, p.pad), "im_file": str(self.pairs[i][0])}


def collate_semantic(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items: ``img`` Tensor[B, 3, S, S] uint8, ``mask`` Tensor[B, S, S] int64; the per-image
    ``ori_mask`` / ``ori_shape`` / ``ratio_pad`` (validation) and ``im_file`` as lists."""
    return collate_maps(items, stack=("img", "mask"), optional=("ori_mask", "ori_shape", "ratio_pad"))
