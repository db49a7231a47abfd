"""Foreground-matte datasets: images with an alpha mask each, and the built-in ``shapes-matte``.

Layout (a dataset yaml; relative paths resolve against ``path``, default the yaml's folder)::

    root/images/train/*.jpg     root/masks/train/*.png     (same stems)
    root/images/val/*.jpg       root/masks/val/*.png

    # data.yaml
    path: /data/my-set
    train: images/train
    val: images/val

The mask of ``.../images/<x>/a.jpg`` is ``.../masks/<x>/a.png``: alpha = value / 255 of an 8-bit
PNG (value / 65535 of a 16-bit one). A grey PNG is read as it is, a 3-channel one by its first
channel (binary masks saved as RGB), a 4-channel one by its alpha channel (a cut-out). A binary
mask (DIS, salient objects) is the special case of 0 and 255. Every mask of a split is checked
when its dataset is built: a missing file or a size mismatch raises a one-line
:class:`DatasetError` naming the file.

An item is a dict: ``img`` Tensor[3, S, S] uint8 RGB, ``alpha`` Tensor[S, S] float32 in [0, 1]
(0 on padding), and for validation ``ori_alpha`` (Tensor[h, w] float32, as stored), ``ori_shape``
and ``ratio_pad``. Validation letterboxes as prediction does with ``rect=False``; training draws
a random scale (0.5-2x the fitting size), a random crop or padding, a horizontal flip and HSV
jitter, a pure function of ``(seed, epoch, index)``; masks are resized bilinearly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from .._cv import cv2
from ..errors import ConfigError, DatasetError
from .config import resolve_image_files

BUILTIN_MATTE = ("shapes-matte",)
LAYOUT = "images/<split>/*.jpg with masks/<split>/*.png (8-bit alpha) and a yaml with path/train/val"


@dataclass(frozen=True, kw_only=True)
class MatteDataConfig:
    """A parsed matte dataset: ``train`` / ``val`` / ``test`` are (image, mask file) pairs."""

    root: Path
    train: list[tuple[Path, Path]]
    val: list[tuple[Path, Path]]
    yaml_path: Path
    names: dict[int, str] = field(default_factory=lambda: {0: "foreground"})
    nc: int = 1
    test: list[tuple[Path, Path]] = field(default_factory=list)


def mask_path(image: Path) -> Path:
    """The mask of an image: the last ``images`` folder becomes ``masks``, the suffix ``.png``.

    Example:
        >>> mask_path(Path("/d/images/train/a.jpg")).as_posix()
        '/d/masks/train/a.png'
    """
    parts = list(image.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "masks"
            return Path(*parts).with_suffix(".png")
    raise DatasetError(f"image {image} is not under an 'images' folder, so its mask cannot be found; expected {LAYOUT}")


def load_matte_data(data: str | Path) -> MatteDataConfig:
    """Read a matte dataset yaml (or a folder holding ``data.yaml``, or ``"shapes-matte"``).

    Example:
        >>> import tempfile; from libreyolo.data.shapes_matte import ensure_shapes_matte_dataset
        >>> cfg = load_matte_data(ensure_shapes_matte_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64))
        >>> cfg.nc, len(cfg.train), cfg.train[0][1].parent.parent.name
        (1, 2, 'masks')
    """
    from .maps import open_dataset_yaml

    builtin = None
    if isinstance(data, str) and data in BUILTIN_MATTE:
        from .shapes_matte import ensure_shapes_matte_dataset as builtin
    yaml_path, doc, root = open_dataset_yaml(
        data, builtin=builtin, noun="matte", hint=f"pass a yaml ({LAYOUT}) or data='shapes-matte'",
        keys="train and val (optional: path, test)", required=("train", "val"), optional="path, test")
    splits: dict[str, list[tuple[Path, Path]]] = {}
    for key in ("train", "val", "test"):
        if doc.get(key) is not None:
            files = resolve_image_files(doc[key], root=root, key=key, yaml_path=yaml_path)
            splits[key] = [(f, mask_path(f)) for f in files]
    return MatteDataConfig(root=root.resolve(), train=splits["train"], val=splits["val"],
                           test=splits.get("test", []), yaml_path=yaml_path)


def read_alpha(path: Path, *, hw: tuple[int, int] | None = None, prefix: str = "") -> np.ndarray:
    """A mask PNG -> ndarray[h, w] float32 alpha in [0, 1] (module docstring), of size ``hw`` when given."""
    m = cv2.imread(str(path), cv2.IMREAD_UNCHANGED) if path.is_file() else None
    if m is None:
        raise DatasetError(f"{prefix}mask {path} is missing or not a readable image; every image needs one ({LAYOUT})")
    if m.ndim == 3:
        m = m[..., 3] if m.shape[2] == 4 else m[..., 0]
    if hw is not None and tuple(m.shape) != tuple(hw):
        raise DatasetError(f"{prefix}mask {path} is {m.shape[1]}x{m.shape[0]} but its image is {hw[1]}x{hw[0]}; "
                           "a mask must have the size of its image")
    scale = 65535.0 if m.dtype == np.uint16 else 255.0
    return np.clip(m.astype(np.float32) / np.float32(scale), 0.0, 1.0)


def _image_hw(path: Path) -> tuple[int, int]:
    from PIL import Image

    try:
        with Image.open(path) as im:  # reads the header only
            return int(im.size[1]), int(im.size[0])
    except OSError as e:
        raise DatasetError(f"image {path} could not be read ({e})") from e


class MatteDataset(Dataset):
    """(image, mask file) pairs -> items (module docstring)."""

    def __init__(self, pairs: list[tuple[Path, Path]], *, imgsz: int, augment: bool = False,
                 scale: tuple[float, float] = (0.5, 2.0), fliplr: float = 0.5, hsv_h: float = 0.015,
                 hsv_s: float = 0.7, hsv_v: float = 0.4, prefix: str = "", check: bool = True) -> None:
        if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < 8:
            raise ConfigError(f"imgsz must be an int >= 8, got {imgsz!r}")
        self.pairs = [(Path(a), Path(b)) for a, b in pairs]
        self.imgsz, self.augment, self.scale, self.fliplr = imgsz, augment, scale, fliplr
        self.hsv, self.prefix = (hsv_h, hsv_s, hsv_v), prefix
        if check:
            for img, mask in self.pairs:
                read_alpha(mask, hw=_image_hw(img), prefix=prefix)
        self._state = torch.zeros(2, dtype=torch.int64).share_memory_()  # epoch, seed (reach workers)

    # the trainer's dataset interface (shared with the other datasets)
    def set_epoch(self, epoch: int) -> None:
        self._state[0] = int(epoch)

    def set_seed(self, seed: int) -> None:
        self._state[1] = int(seed)

    @property
    def mosaic_enabled(self) -> bool:
        return False

    def close_mosaic(self) -> None:
        """No mosaic for mattes."""

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> dict[str, Any]:
        img_path, mask_file = self.pairs[i]
        bgr = cv2.imread(str(img_path), cv2.IMREAD_COLOR)
        if bgr is None:
            raise DatasetError(f"{self.prefix}image {img_path} could not be read (missing or not an image)")
        img, a = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), read_alpha(mask_file, hw=bgr.shape[:2], prefix=self.prefix)
        if self.augment:
            return self._train_item(i, img, a)
        from ..ops.letterbox import letterbox

        boxed, p = letterbox(torch.from_numpy(img).permute(2, 0, 1), (self.imgsz, self.imgsz))
        nh, nw = p.new_shape
        small = cv2.resize(a, (nw, nh), interpolation=cv2.INTER_LINEAR) if (nh, nw) != a.shape else a
        alpha = torch.zeros((self.imgsz, self.imgsz), dtype=torch.float32)
        left, top = int(p.pad[0]), int(p.pad[1])
        alpha[top:top + nh, left:left + nw] = torch.from_numpy(np.clip(small, 0.0, 1.0))
        return {"img": boxed, "alpha": alpha, "ori_alpha": torch.from_numpy(a), "ori_shape": tuple(a.shape),
                "ratio_pad": (p.ratio, p.pad), "im_file": str(img_path)}

    def _train_item(self, i: int, img: np.ndarray, a: np.ndarray) -> dict[str, Any]:
        from .augment import hsv_jitter

        s = self.imgsz
        rng = np.random.default_rng([int(self._state[1]), int(self._state[0]), i])
        h, w = a.shape
        r = s / max(h, w) * rng.uniform(*self.scale)
        nh, nw = max(1, round(h * r)), max(1, round(w * r))
        img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
        a = np.clip(cv2.resize(a, (nw, nh), interpolation=cv2.INTER_LINEAR), 0.0, 1.0)
        canvas = np.full((max(s, nh), max(s, nw), 3), 114, np.uint8)
        acanvas = np.zeros(canvas.shape[:2], np.float32)
        oy, ox = int(rng.integers(0, canvas.shape[0] - nh + 1)), int(rng.integers(0, canvas.shape[1] - nw + 1))
        canvas[oy:oy + nh, ox:ox + nw], acanvas[oy:oy + nh, ox:ox + nw] = img, a
        cy, cx = int(rng.integers(0, canvas.shape[0] - s + 1)), int(rng.integers(0, canvas.shape[1] - s + 1))
        img, a = canvas[cy:cy + s, cx:cx + s], acanvas[cy:cy + s, cx:cx + s]
        img = hsv_jitter(np.ascontiguousarray(img), rng, h=self.hsv[0], s=self.hsv[1], v=self.hsv[2])
        if rng.random() < self.fliplr:
            img, a = img[:, ::-1], a[:, ::-1]
        return {"img": torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous(),
                "alpha": torch.from_numpy(np.ascontiguousarray(a)), "im_file": str(self.pairs[i][0])}


def collate_matte(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items: ``img`` Tensor[B, 3, S, S] uint8, ``alpha`` Tensor[B, S, S] float32; the per-image
    ``ori_alpha`` / ``ori_shape`` / ``ratio_pad`` (validation) and ``im_file`` as lists."""
    out: dict[str, Any] = {"img": torch.stack([it["img"] for it in items]),
                           "alpha": torch.stack([it["alpha"] for it in items]),
                           "im_file": [it["im_file"] for it in items]}
    for key in ("ori_alpha", "ori_shape", "ratio_pad"):
        if key in items[0]:
            out[key] = [it[key] for it in items]
    return out
