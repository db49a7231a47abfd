"""What the per-pixel ("map") datasets share: depth maps (:mod:`.depth`), index masks
(:mod:`.semantic`) and LQ / HQ pairs (:mod:`.restore`), and any new task whose items are an image
with a map (or a second image) of the same layout.

- :func:`open_dataset_yaml`: a dataset yaml (or a folder holding ``data.yaml``, or a built-in's
  yaml) read and checked: the required keys present, ``path`` resolved against the yaml's folder.
- :func:`swap_folder` and :func:`pair_splits`: the partner file of each image (the last
  ``images`` folder of its path becomes ``depth`` / ``masks``, ...) for every split.
- :func:`image_hw` (header only), :func:`read_rgb`, :func:`hwc_to_tensor`.
- :class:`MapDataset`: ``pairs``, ``imgsz``, ``prefix`` and the trainer's dataset interface
  (:class:`~.seeded.SeededDataset`: ``set_epoch`` / ``set_seed``, no mosaic, the per-item
  generator of ``(seed, epoch, index)``).
- :func:`letterbox_pair` (validation: the image letterboxed as prediction does, the map with it
  by nearest-neighbour sampling) and :func:`scale_crop_pair` (training: random scale, crop or
  padding, HSV jitter, horizontal flip).
- :func:`collate_maps`: stack the tensors of a batch, keep the per-image values as lists.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from .._cv import cv2
from ..errors import ConfigError, DatasetError
from .config import resolve_image_files
from .seeded import SeededDataset


def open_dataset_yaml(data: str | Path, *, builtin: Callable[[], Path] | None, noun: str, hint: str,
                      keys: str, required: tuple[str, ...], optional: str) -> tuple[Path, dict, Path]:
    """(yaml path, its mapping, the dataset root) of ``data``: the yaml ``builtin()`` writes when
    given, else a yaml file or a folder holding ``data.yaml``. Every problem raises a one-line
    :class:`DatasetError`: ``noun`` names the dataset kind, ``hint`` follows "not found; ",
    ``keys`` is the mapping's key list and ``optional`` its optional keys (for the messages).

    Example:
        >>> import tempfile; d = Path(tempfile.mkdtemp()); _ = (d / "data.yaml").write_text("train: a\\nval: b\\n")
        >>> p, doc, root = open_dataset_yaml(d, builtin=None, noun="demo", hint="pass a yaml", keys="train, val",
        ...                                  required=("train", "val"), optional="path")
        >>> p.name, doc["val"], root == d.resolve()
        ('data.yaml', 'b', True)
    """
    if builtin is not None:
        yaml_path = builtin()
    else:
        yaml_path = Path(data).expanduser()
        if yaml_path.is_dir() and (yaml_path / "data.yaml").is_file():
            yaml_path = yaml_path / "data.yaml"
        if not yaml_path.is_file():
            raise DatasetError(f"{noun} dataset yaml {yaml_path} not found; {hint}")
    yaml_path = yaml_path.resolve()
    try:
        doc = yaml.safe_load(yaml_path.read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"dataset yaml {yaml_path} cannot be read: {e}") from e
    if not isinstance(doc, dict):
        raise DatasetError(f"dataset yaml {yaml_path} must be a mapping with keys {keys}")
    for key in required:
        if doc.get(key) is None:
            raise DatasetError(f"dataset yaml {yaml_path} is missing key '{key}' (required: {', '.join(required)}; "
                               f"optional: {optional})")
    raw_root = doc.get("path")
    root = yaml_path.parent if raw_root is None else Path(str(raw_root)).expanduser()
    root = root if root.is_absolute() else yaml_path.parent / root
    if not root.is_dir():
        raise DatasetError(f"{yaml_path}: dataset root 'path' {root} is not a folder")
    return yaml_path, doc, root


def swap_folder(path: Path, src: str, dst: str) -> Path | None:
    """``path`` with its last ``src`` folder renamed ``dst`` (None when no folder is ``src``).

    Example:
        >>> swap_folder(Path("/d/images/train/a.jpg"), "images", "masks").as_posix()
        '/d/masks/train/a.jpg'
    """
    parts = list(path.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == src:
            parts[i] = dst
            return Path(*parts)
    return None


def pair_splits(doc: dict, *, root: Path, yaml_path: Path,
                partner: Callable[[Path], Path]) -> dict[str, list[tuple[Path, Path]]]:
    """``{split: [(image, partner(image)), ...]}`` for the ``train`` / ``val`` / ``test`` keys of ``doc``."""
    splits: dict[str, list[tuple[Path, Path]]] = {}
    for key in ("train", "val", "test"):
        if doc.get(key) is not None:
            files = resolve_image_files(doc[key], root=root, key=key, yaml_path=yaml_path)
            splits[key] = [(f, partner(f)) for f in files]
    return splits


def image_hw(path: Path, *, label: str = "image") -> tuple[int, int]:
    """(h, w) of an image from its header; a :class:`DatasetError` (``label`` names it) when unreadable."""
    from PIL import Image

    try:
        with Image.open(path) as im:  # reads the header only
            return int(im.size[1]), int(im.size[0])
    except OSError as e:
        raise DatasetError(f"{label} {path} could not be read ({e})") from e


def read_rgb(path: Path, prefix: str = "") -> np.ndarray:
    """An image file -> ndarray[h, w, 3] uint8 RGB; a one-line :class:`DatasetError` when unreadable."""
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise DatasetError(f"{prefix}image {path} could not be read (missing or not an image)")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def hwc_to_tensor(img: np.ndarray) -> torch.Tensor:
    """ndarray[h, w, 3] (any strides) -> a contiguous Tensor[3, h, w] of the same dtype."""
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous()


class MapDataset(SeededDataset):
    """Base of the map datasets: ``pairs`` (image, partner file), the square item side ``imgsz``,
    the error ``prefix``, and the trainer's dataset interface."""

    def __init__(self, pairs: list[tuple[Path, Path]], *, imgsz: int, prefix: str = "") -> None:
        if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < 8:
            raise ConfigError(f"imgsz must be an int >= 8, got {imgsz!r}")
        self.pairs = [(Path(a), Path(b)) for a, b in pairs]
        self.imgsz, self.prefix = imgsz, prefix
        self._init_state()

    def __len__(self) -> int:
        return len(self.pairs)


def letterbox_pair(img: np.ndarray, target: np.ndarray, size: int, *, fill: float, dtype: torch.dtype,
                   convert: Callable[[np.ndarray], torch.Tensor] = torch.from_numpy) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(the image letterboxed to ``size`` x ``size`` as prediction does with ``rect=False``, the
    map resized with it by nearest-neighbour sampling into a ``fill``-ed Tensor[size, size] of
    ``dtype`` (``convert`` turns the resized map into its values), the letterbox parameters)."""
    from ..ops.letterbox import letterbox

    boxed, p = letterbox(torch.from_numpy(img).permute(2, 0, 1), (size, size))
    nh, nw = p.new_shape
    small = cv2.resize(target, (nw, nh), interpolation=cv2.INTER_NEAREST) if (nh, nw) != target.shape else target
    out = torch.full((size, size), fill, dtype=dtype)
    left, top = int(p.pad[0]), int(p.pad[1])
    out[top:top + nh, left:left + nw] = convert(small)
    return boxed, out, p


def scale_crop_pair(img: np.ndarray, target: np.ndarray, rng: np.random.Generator, *, size: int,
                    scale: tuple[float, float], fill: float, hsv: tuple[float, float, float],
                    fliplr: float) -> tuple[np.ndarray, np.ndarray]:
    """The training transform of an image and its map (ndarray[h, w]): a random scale of the
    fitting size, a random ``size`` x ``size`` crop or padding (114 grey, ``fill`` in the map),
    HSV jitter and a horizontal flip, drawn from ``rng`` in that order. The outputs may be
    non-contiguous views."""
    from .augment import hsv_jitter

    s = size
    h, w = target.shape
    r = s / max(h, w) * rng.uniform(*scale)
    nh, nw = max(1, round(h * r)), max(1, round(w * r))
    img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
    target = cv2.resize(target, (nw, nh), interpolation=cv2.INTER_NEAREST)
    canvas = np.full((max(s, nh), max(s, nw), 3), 114, np.uint8)
    tcanvas = np.full(canvas.shape[:2], fill, target.dtype)
    oy, ox = int(rng.integers(0, canvas.shape[0] - nh + 1)), int(rng.integers(0, canvas.shape[1] - nw + 1))
    canvas[oy:oy + nh, ox:ox + nw], tcanvas[oy:oy + nh, ox:ox + nw] = img, target
    cy, cx = int(rng.integers(0, canvas.shape[0] - s + 1)), int(rng.integers(0, canvas.shape[1] - s + 1))
    img, target = canvas[cy:cy + s, cx:cx + s], tcanvas[cy:cy + s, cx:cx + s]
    img = hsv_jitter(np.ascontiguousarray(img), rng, h=hsv[0], s=hsv[1], v=hsv[2])
    if rng.random() < fliplr:
        img, target = img[:, ::-1], target[:, ::-1]
    return img, target


def collate_maps(items: list[dict[str, Any]], *, stack: tuple[str, ...], lists: tuple[str, ...] = ("im_file",),
                 optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """A batch: the ``stack`` keys stacked, the ``lists`` keys as lists, and the ``optional``
    keys as lists when the items have them (validation-only values).

    Example:
        >>> b = collate_maps([{"img": torch.zeros(3, 2, 2), "im_file": "a"}] * 2, stack=("img",))
        >>> b["img"].shape, b["im_file"]
        (torch.Size([2, 3, 2, 2]), ['a', 'a'])
    """
    out: dict[str, Any] = {k: torch.stack([it[k] for it in items]) for k in stack}
    out.update({k: [it[k] for it in items] for k in lists})
    for key in optional:
        if key in items[0]:
            out[key] = [it[key] for it in items]
    return out
