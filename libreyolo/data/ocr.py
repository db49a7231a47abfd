"""OCR datasets: images with text polygons and their strings.

Layout (ICDAR 2015 style)::

    path: /data/my-text        # optional; default: the yaml's folder
    train: images/train        # images; labels/<split>/<stem>.txt beside (the last 'images' -> 'labels')
    val: images/val
    dict: keys.txt             # optional: the character dictionary (one per line); default: bundled ASCII

Each label line is ``x1,y1,x2,y2,x3,y3,x4,y4,text`` (pixels, clockwise from the top-left; the text is
everything after the eighth comma; ``###`` marks an illegible region: kept for detection, skipped by
recognition). The built-in demo is ``data="text-demo"`` (:mod:`libreyolo.data.shapes_ocr`).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from .._cv import cv2
from ..errors import ConfigError, DatasetError
from .config import resolve_image_files

BUILTIN_OCR = ("text-demo",)
BUNDLED: tuple[str, ...] = tuple(string.digits + string.ascii_lowercase + string.ascii_uppercase
                                 + string.punctuation + " ")
IGNORE = "###"


def read_dict(path: str | Path, *, space: bool = True) -> list[str]:
    """The characters of a dictionary file, one per line, plus ``" "`` when ``space`` (and absent).

    Example:
        >>> import tempfile; p = Path(tempfile.mkdtemp()) / "keys.txt"; _ = p.write_text("a\\nb\\n")
        >>> read_dict(p)
        ['a', 'b', ' ']
    """
    p = Path(path).expanduser()
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the character dictionary {p}: {e}") from e
    chars = [ln for ln in lines if ln != ""]
    if not chars:
        raise ConfigError(f"character dictionary {p} is empty: give one character per line")
    if space and " " not in chars:
        chars.append(" ")
    return chars


@dataclass(frozen=True, kw_only=True)
class OcrDataConfig:
    root: Path
    train: list[Path]
    val: list[Path]
    yaml_path: Path
    test: list[Path] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=lambda: dict(enumerate(BUNDLED)))

    @property
    def nc(self) -> int:
        return len(self.names)


def label_path(img: Path) -> Path:
    parts = list(img.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            return Path(*parts).with_suffix(".txt")
    return img.with_suffix(".txt")


def read_labels(path: Path) -> tuple[np.ndarray, list[str]]:
    """A label file -> (quads float32[n, 4, 2], texts); a missing file is an image without text.

    Example:
        >>> import tempfile; p = Path(tempfile.mkdtemp()) / "a.txt"; _ = p.write_text("0,0,9,0,9,4,0,4,a,b\\n")
        >>> q, t = read_labels(p); q.shape, t
        ((1, 4, 2), ['a,b'])
    """
    if not path.is_file():
        return np.zeros((0, 4, 2), np.float32), []
    quads, texts = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.lstrip("\ufeff").split(",", 8)
        try:
            quads.append(np.array([float(v) for v in parts[:8]], np.float32).reshape(4, 2))
        except ValueError as e:
            raise DatasetError(f"{path}:{n}: expected 'x1,y1,x2,y2,x3,y3,x4,y4,text', got {line!r}") from e
        texts.append(parts[8] if len(parts) > 8 else "")
    return (np.stack(quads) if quads else np.zeros((0, 4, 2), np.float32)), texts


def load_ocr_data(data: str | Path) -> OcrDataConfig:
    """Read an OCR dataset yaml (or a folder holding ``data.yaml``, or ``"text-demo"``).

    Example:
        >>> import tempfile; from libreyolo.data.shapes_ocr import ensure_text_demo_dataset
        >>> cfg = load_ocr_data(ensure_text_demo_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64))
        >>> len(cfg.train), len(cfg.val), cfg.nc
        (2, 1, 95)
    """
    from .maps import open_dataset_yaml

    builtin = None
    if isinstance(data, str) and data in BUILTIN_OCR:
        from .shapes_ocr import ensure_text_demo_dataset as builtin
    yaml_path, doc, root = open_dataset_yaml(
        data, builtin=builtin, noun="OCR", hint="pass a yaml (path/train/val[/dict]) or data='text-demo'",
        keys="train, val (optional: path, dict)", required=("train", "val"), optional="path, dict, test")
    splits = {k: resolve_image_files(doc[k], root=root, key=k, yaml_path=yaml_path)
              for k in ("train", "val", "test") if doc.get(k) is not None}
    names = dict(enumerate(BUNDLED))
    if doc.get("dict"):
        d = Path(str(doc["dict"])).expanduser()
        names = dict(enumerate(read_dict(d if d.is_absolute() else root / d)))
    return OcrDataConfig(root=root.resolve(), train=splits["train"], val=splits["val"], test=splits.get("test", []),
                         yaml_path=yaml_path, names=names)


class OcrDataset(Dataset):
    """Images letterboxed to ``imgsz`` (square, 114 grey) with their quads mapped onto it."""

    def __init__(self, files: list[Path], *, imgsz: int, prefix: str = "") -> None:
        self.files, self.imgsz, self.prefix = [Path(f) for f in files], int(imgsz), prefix
        self.labels = [read_labels(label_path(f)) for f in self.files]

    def set_epoch(self, epoch: int) -> None:
        """No epoch-dependent augmentation."""

    def set_seed(self, seed: int) -> None:
        """No random augmentation."""

    @property
    def mosaic_enabled(self) -> bool:
        return False

    def close_mosaic(self) -> None:
        """No mosaic for OCR."""

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> dict[str, Any]:
        img = cv2.imread(str(self.files[i]), cv2.IMREAD_COLOR)
        if img is None:
            raise DatasetError(f"{self.prefix}cannot read image {self.files[i]}")
        h, w = img.shape[:2]
        s = self.imgsz
        r = min(s / h, s / w)
        nh, nw = max(1, round(h * r)), max(1, round(w * r))
        top, left = (s - nh) // 2, (s - nw) // 2
        canvas = np.full((s, s, 3), 114, np.uint8)
        canvas[top:top + nh, left:left + nw] = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR) \
            if (nh, nw) != (h, w) else img
        quads, texts = self.labels[i]
        quads = quads * r + np.array([left, top], np.float32)
        rgb = np.ascontiguousarray(canvas[:, :, ::-1])
        return {"img": torch.from_numpy(rgb).permute(2, 0, 1).contiguous(), "polys": quads.astype(np.float32),
                "texts": list(texts), "im_file": str(self.files[i]), "ori_shape": (h, w)}


def collate_ocr(items: list[dict[str, Any]]) -> dict[str, Any]:
    """``img`` Tensor[B, 3, S, S] uint8; ``polys`` / ``texts`` / ``im_file`` / ``ori_shape`` as lists."""
    out: dict[str, Any] = {"img": torch.stack([it["img"] for it in items])}
    for key in ("polys", "texts", "im_file", "ori_shape"):
        out[key] = [it[key] for it in items]
    return out
