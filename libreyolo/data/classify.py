"""ImageFolder classification datasets, their transforms, and the built-in ``shapes-cls`` set.

Layout (one folder per class; the sorted class-folder names give the class ids)::

    root/train/<class>/*.jpg
    root/val/<class>/*.jpg          (``test/`` is accepted when there is no ``val/``)

An item is a dict: ``img`` Tensor[3, S, S] uint8 RGB, ``cls`` int (class id), ``im_file`` str;
:func:`collate_classify` stacks a batch to ``img`` Tensor[B, 3, S, S] uint8 and ``cls``
Tensor[B] int64, the dict the trainer expects.

Training transform: random resized crop (area 35-100 %, aspect 3/4-4/3) to ``S x S``, HSV jitter,
horizontal flip; a pure function of ``(seed, epoch, index)``. Validation / prediction transform
(:func:`center_crop`): resize the short side to ``S``, then take the central ``S x S``.
``load_classify_data("shapes-cls")`` generates (once) crops of single shapes scenes
(:mod:`libreyolo.data.shapes_cls`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._cv import cv2
from ..errors import ConfigError, DatasetError
from .constants import BUILTIN, IMG_SUFFIXES
from .seeded import SeededDataset

logger = logging.getLogger(__name__)

BUILTIN_CLS = ("shapes-cls",)
LAYOUT = "root/train/<class>/*.jpg and root/val/<class>/*.jpg (one folder per class)"


@dataclass(frozen=True, kw_only=True)
class ClassifyDataConfig:
    """A parsed ImageFolder dataset: ``train`` / ``val`` are (image path, class id) pairs."""

    root: Path
    train: list[tuple[Path, int]]
    val: list[tuple[Path, int]]
    names: dict[int, str]
    nc: int


def looks_like_classify_root(path: Path) -> bool:
    """True for a folder with ``train/`` whose sub-folders hold images (the ImageFolder layout)."""
    train = path / "train"
    if not train.is_dir():
        return False
    return any(d.is_dir() and any(f.suffix.lower() in IMG_SUFFIXES for f in d.iterdir()) for d in train.iterdir())


def _split(root: Path, split: str, names: list[str]) -> list[tuple[Path, int]]:
    out = []
    for i, n in enumerate(names):
        d = root / split / n
        if d.is_dir():
            out.extend((f, i) for f in sorted(d.rglob("*")) if f.suffix.lower() in IMG_SUFFIXES and f.is_file())
    return out


def load_classify_data(data: str | Path) -> ClassifyDataConfig:
    """Read an ImageFolder dataset root (or the built-in ``"shapes-cls"``).

    Raises :class:`DatasetError` naming the expected layout for a detection dataset (a yaml, or a
    folder with ``images/`` + ``labels/``), a missing folder, or a split without images.
    """
    if isinstance(data, str) and data in BUILTIN_CLS:
        from .shapes_cls import ensure_shapes_cls_dataset

        root = ensure_shapes_cls_dataset()
    else:
        root = Path(data).expanduser()
        is_det = (str(data) in BUILTIN or root.suffix.lower() in (".yaml", ".yml")
                  or (root.is_dir() and ((root / "data.yaml").is_file() or (root / "labels").is_dir())))
        if is_det:
            raise DatasetError(f"{str(data)!r} is a detection dataset (yaml / images + labels); a classification "
                               f"model needs an ImageFolder dataset: {LAYOUT}, or data='shapes-cls'")
        if not root.is_dir():
            raise DatasetError(f"classification dataset folder {root} not found; expected {LAYOUT}")
    if not looks_like_classify_root(root):
        raise DatasetError(f"{root} is not a classification dataset: expected {LAYOUT}")
    names = sorted(d.name for d in (root / "train").iterdir() if d.is_dir())
    val_split = "val" if (root / "val").is_dir() else "test"
    train, val = _split(root, "train", names), _split(root, val_split, names)
    for split, items in (("train", train), (val_split, val)):
        if not items:
            raise DatasetError(f"{root}/{split} has no images in class folders; expected {LAYOUT}")
    return ClassifyDataConfig(root=root.resolve(), train=train, val=val, names=dict(enumerate(names)), nc=len(names))


# ------------------------------------------------------------------------------------ transforms
def center_crop(img: np.ndarray, size: int) -> np.ndarray:
    """Resize the short side of an (H, W, 3) uint8 image to ``size``, then crop the central square."""
    h, w = img.shape[:2]
    r = size / min(h, w)
    nh, nw = max(size, round(h * r)), max(size, round(w * r))
    if (nh, nw) != (h, w):
        from .._cv import have_cv2

        if have_cv2():
            img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_AREA if r < 1 else cv2.INTER_LINEAR)
        else:  # prediction without OpenCV: Pillow's resize (box filter when shrinking, as INTER_AREA)
            from PIL import Image

            img = np.asarray(Image.fromarray(img).resize((nw, nh), Image.BOX if r < 1 else Image.BILINEAR))
    y0, x0 = (nh - size) // 2, (nw - size) // 2
    return np.ascontiguousarray(img[y0:y0 + size, x0:x0 + size])


def random_resized_crop(img: np.ndarray, size: int, rng: np.random.Generator, *,
                        scale: tuple[float, float] = (0.35, 1.0),
                        ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> np.ndarray:
    """A random crop of ``scale`` of the area and aspect ``ratio`` (log-uniform), resized to ``size``."""
    h, w = img.shape[:2]
    area = h * w
    for _ in range(10):
        a = area * rng.uniform(*scale)
        ar = float(np.exp(rng.uniform(np.log(ratio[0]), np.log(ratio[1]))))
        cw, ch = round((a * ar) ** 0.5), round((a / ar) ** 0.5)
        if 0 < cw <= w and 0 < ch <= h:
            y0, x0 = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            crop = img[y0:y0 + ch, x0:x0 + cw]
            return cv2.resize(crop, (size, size), interpolation=cv2.INTER_LINEAR)
    return center_crop(img, size)


# ------------------------------------------------------------------------------------ dataset
class ClassifyDataset(SeededDataset):
    """(image, class id) pairs -> items (see the module docstring).

    Args:
        samples: (path, class id) pairs, e.g. ``ClassifyDataConfig.train``.
        imgsz: output side ``S``.
        augment: training transform (True) or center crop (False).
        fliplr, hsv_h, hsv_s, hsv_v: augmentation strengths (training only).
    """

    def __init__(self, samples: list[tuple[Path, int]], *, imgsz: int, augment: bool, fliplr: float = 0.5,
                 hsv_h: float = 0.015, hsv_s: float = 0.7, hsv_v: float = 0.4, prefix: str = "") -> None:
        if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < 8:
            raise ConfigError(f"imgsz must be an int >= 8, got {imgsz!r}")
        self.samples = [(str(p), int(c)) for p, c in samples]
        self.imgsz, self.augment, self.prefix = imgsz, augment, prefix
        self.fliplr, self.hsv = fliplr, (hsv_h, hsv_s, hsv_v)
        self._init_state()  # the trainer's dataset interface (SeededDataset): epoch, seed; no mosaic

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        from .augment import hsv_jitter

        path, cls = self.samples[i]
        bgr = cv2.imread(path, cv2.IMREAD_COLOR)
        if bgr is None:
            raise DatasetError(f"{self.prefix}image {path} could not be read (missing or not an image)")
        img = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        if self.augment:
            rng = self._rng(i)
            img = random_resized_crop(img, self.imgsz, rng)
            img = hsv_jitter(img, rng, h=self.hsv[0], s=self.hsv[1], v=self.hsv[2])
            if rng.random() < self.fliplr:
                img = np.ascontiguousarray(img[:, ::-1])
        else:
            img = center_crop(img, self.imgsz)
        return {"img": torch.from_numpy(img).permute(2, 0, 1).contiguous(), "cls": cls, "im_file": path}


def collate_classify(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items: ``img`` Tensor[B, 3, S, S] uint8, ``cls`` Tensor[B] int64, ``im_file`` list[str]."""
    return {"img": torch.stack([it["img"] for it in items]),
            "cls": torch.tensor([it["cls"] for it in items], dtype=torch.int64),
            "im_file": [it["im_file"] for it in items]}
