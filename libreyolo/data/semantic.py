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
import yaml
from torch.utils.data import Dataset

from .._cv import cv2
from ..errors import ConfigError, DatasetError
from .config import _parse_names, resolve_image_files

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
    parts = list(image.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "masks"
            return Path(*parts).with_suffix(".png")
    raise DatasetError(f"image {image} is not under an 'images' folder, so its mask cannot be found; "
                       f"expected {LAYOUT}")


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
    if isinstance(data, str) and data in BUILTIN_SEM:
        from .shapes_sem import ensure_shapes_sem_dataset

        yaml_path = ensure_shapes_sem_dataset()
    else:
        yaml_path = Path(data).expanduser()
        if yaml_path.is_dir() and (yaml_path / "data.yaml").is_file():
            yaml_path = yaml_path / "data.yaml"
        if not yaml_path.is_file():
            raise DatasetError(f"semantic dataset yaml {yaml_path} not found; pass a yaml ({LAYOUT}) or "
                               f"data='shapes-sem'")
    yaml_path = yaml_path.resolve()
    try:
        doc = yaml.safe_load(yaml_path.read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"dataset yaml {yaml_path} cannot be read: {e}") from e
    if not isinstance(doc, dict):
        raise DatasetError(f"dataset yaml {yaml_path} must be a mapping with keys path, train, val, names")
    for key in ("train", "val", "names"):
        if doc.get(key) is None:
            raise DatasetError(f"dataset yaml {yaml_path} is missing key '{key}' (required: train, val, names; "
                               "optional: path, ignore_index, test)")
    raw_root = doc.get("path")
    root = yaml_path.parent if raw_root is None else Path(str(raw_root)).expanduser()
    root = root if root.is_absolute() else yaml_path.parent / root
    if not root.is_dir():
        raise DatasetError(f"{yaml_path}: dataset root 'path' {root} is not a folder")
    names = _parse_names(doc["names"], yaml_path)
    ignore = doc.get("ignore_index", 255)
    if isinstance(ignore, bool) or not isinstance(ignore, int) or ignore < len(names):
        raise DatasetError(f"{yaml_path}: 'ignore_index' must be an int >= nc ({len(names)}), so that it is no "
                           f"class id; got {ignore!r}")
    splits: dict[str, list[tuple[Path, Path]]] = {}
    for key in ("train", "val", "test"):
        if doc.get(key) is not None:
            files = resolve_image_files(doc[key], root=root, key=key, yaml_path=yaml_path)
            splits[key] = [(f, mask_path(f)) for f in files]
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


def _image_hw(path: Path) -> tuple[int, int]:
    from PIL import Image

    try:
        with Image.open(path) as im:  # reads the header only
            return int(im.size[1]), int(im.size[0])
    except OSError as e:
        raise DatasetError(f"image {path} could not be read ({e})") from e


def check_masks(pairs: list[tuple[Path, Path]], *, nc: int, ignore_index: int, prefix: str = "") -> None:
    """:func:`read_mask` on every pair (the size compared with the image's header)."""
    for img, mask in pairs:
        read_mask(mask, nc=nc, ignore_index=ignore_index, hw=_image_hw(img), prefix=prefix)


def to_labels(m: np.ndarray, nc: int) -> torch.Tensor:
    """Stored mask values -> Tensor int64 of class ids, :data:`IGNORE` for every value >= nc."""
    t = torch.from_numpy(m.astype(np.int64))
    return t.masked_fill_(t >= nc, IGNORE)


class SemanticDataset(Dataset):
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
        if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < 8:
            raise ConfigError(f"imgsz must be an int >= 8, got {imgsz!r}")
        self.pairs = [(Path(a), Path(b)) for a, b in pairs]
        self.imgsz, self.nc, self.ignore_index, self.augment = imgsz, int(nc), int(ignore_index), augment
        self.scale, self.fliplr, self.hsv, self.prefix = scale, fliplr, (hsv_h, hsv_s, hsv_v), prefix
        if check:
            check_masks(self.pairs, nc=self.nc, ignore_index=self.ignore_index, prefix=prefix)
        self._state = torch.zeros(2, dtype=torch.int64).share_memory_()  # epoch, seed (reach workers)

    # the trainer's dataset interface (shared with the detection and classification datasets)
    def set_epoch(self, epoch: int) -> None:
        self._state[0] = int(epoch)

    def set_seed(self, seed: int) -> None:
        self._state[1] = int(seed)

    @property
    def mosaic_enabled(self) -> bool:
        return False

    def close_mosaic(self) -> None:
        """No mosaic for semantic segmentation."""

    def __len__(self) -> int:
        return len(self.pairs)

    def _read(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        img_path, mask_file = self.pairs[i]
        bgr = cv2.imread(str(img_path), cv2.IMREAD_COLOR)
        if bgr is None:
            raise DatasetError(f"{self.prefix}image {img_path} could not be read (missing or not an image)")
        m = read_mask(mask_file, nc=self.nc, ignore_index=self.ignore_index, hw=bgr.shape[:2], prefix=self.prefix)
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), m

    def __getitem__(self, i: int) -> dict[str, Any]:
        img, m = self._read(i)
        if self.augment:
            return self._train_item(i, img, m)
        from ..ops.letterbox import letterbox

        boxed, p = letterbox(torch.from_numpy(img).permute(2, 0, 1), (self.imgsz, self.imgsz))
        nh, nw = p.new_shape
        small = cv2.resize(m, (nw, nh), interpolation=cv2.INTER_NEAREST) if (nh, nw) != m.shape else m
        mask = torch.full((self.imgsz, self.imgsz), IGNORE, dtype=torch.int64)
        left, top = int(p.pad[0]), int(p.pad[1])
        mask[top:top + nh, left:left + nw] = to_labels(small, self.nc)
        return {"img": boxed, "mask": mask, "ori_mask": to_labels(m, self.nc), "ori_shape": tuple(m.shape),
                "ratio_pad": (p.ratio, p.pad), "im_file": str(self.pairs[i][0])}

    def _train_item(self, i: int, img: np.ndarray, m: np.ndarray) -> dict[str, Any]:
        from .augment import hsv_jitter

        s = self.imgsz
        rng = np.random.default_rng([int(self._state[1]), int(self._state[0]), i])
        h, w = m.shape
        r = s / max(h, w) * rng.uniform(*self.scale)
        nh, nw = max(1, round(h * r)), max(1, round(w * r))
        img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
        m = cv2.resize(m, (nw, nh), interpolation=cv2.INTER_NEAREST)
        canvas = np.full((max(s, nh), max(s, nw), 3), 114, np.uint8)
        labels = np.full(canvas.shape[:2], self.ignore_index, m.dtype)
        oy, ox = int(rng.integers(0, canvas.shape[0] - nh + 1)), int(rng.integers(0, canvas.shape[1] - nw + 1))
        canvas[oy:oy + nh, ox:ox + nw], labels[oy:oy + nh, ox:ox + nw] = img, m
        cy, cx = int(rng.integers(0, canvas.shape[0] - s + 1)), int(rng.integers(0, canvas.shape[1] - s + 1))
        img, m = canvas[cy:cy + s, cx:cx + s], labels[cy:cy + s, cx:cx + s]
        img = hsv_jitter(np.ascontiguousarray(img), rng, h=self.hsv[0], s=self.hsv[1], v=self.hsv[2])
        if rng.random() < self.fliplr:
            img, m = img[:, ::-1], m[:, ::-1]
        return {"img": torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous(),
                "mask": to_labels(np.ascontiguousarray(m), self.nc), "im_file": str(self.pairs[i][0])}


def collate_semantic(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items: ``img`` Tensor[B, 3, S, S] uint8, ``mask`` Tensor[B, S, S] int64; the per-image
    ``ori_mask`` / ``ori_shape`` / ``ratio_pad`` (validation) and ``im_file`` as lists."""
    out: dict[str, Any] = {"img": torch.stack([it["img"] for it in items]),
                           "mask": torch.stack([it["mask"] for it in items]),
                           "im_file": [it["im_file"] for it in items]}
    for key in ("ori_mask", "ori_shape", "ratio_pad"):
        if key in items[0]:
            out[key] = [it[key] for it in items]
    return out
