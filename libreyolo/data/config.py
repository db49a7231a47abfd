"""Dataset yaml parsing: ``path, train, val, names`` -> :class:`DataConfig`.

Format (YOLO style)::

    path: /data/my-set        # optional; relative paths are relative to the yaml's folder;
                              # default: the yaml's folder
    train: images/train       # a folder (searched recursively for images), a .txt list file
    val: [images/val, extra.txt]   # (one image path per line), an image, or a list of those
    nc: 3                     # optional; must equal the number of names when given
    names: [cat, dog, bird]   # a list, or a dict {0: cat, 1: dog, 2: bird} with ids 0..nc-1

Relative entries of ``train``/``val`` are resolved against ``path``; relative lines of a .txt
list file against the list file's folder. ``load_data_config("shapes")`` generates (once) and
loads the built-in demo dataset (:mod:`libreyolo.data.shapes`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import DatasetError

logger = logging.getLogger(__name__)

IMG_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"})
BUILTIN = ("shapes",)


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """A parsed dataset yaml.

    root: dataset root (``path`` resolved); train / val: sorted image files; names: class id ->
    name (ids 0..nc-1); nc: number of classes; yaml_path: the yaml file read.
    """

    root: Path
    train: list[Path]
    val: list[Path]
    names: dict[int, str]
    nc: int
    yaml_path: Path


def _parse_names(raw: Any, yaml_path: Path) -> dict[int, str]:
    if isinstance(raw, (list, tuple)):
        names = {i: str(n) for i, n in enumerate(raw)}
    elif isinstance(raw, dict):
        names = {}
        for k, v in raw.items():
            try:
                names[int(k)] = str(v)
            except (TypeError, ValueError) as e:
                raise DatasetError(
                    f"{yaml_path}: key 'names' has a non-integer class id {k!r}; use a list of "
                    "names or a mapping {0: name0, 1: name1, ...}") from e
    else:
        raise DatasetError(f"{yaml_path}: key 'names' must be a list or a mapping of class names, "
                           f"got {type(raw).__name__}")
    if not names:
        raise DatasetError(f"{yaml_path}: key 'names' is empty; list at least one class name")
    if sorted(names) != list(range(len(names))):
        raise DatasetError(f"{yaml_path}: key 'names' must have class ids 0..{len(names) - 1} "
                           f"without gaps, got {sorted(names)}")
    return dict(sorted(names.items()))


def _images_in(entry: Path) -> list[Path]:
    return sorted(p for p in entry.rglob("*") if p.suffix.lower() in IMG_SUFFIXES and p.is_file())


def _read_list_file(list_file: Path) -> list[Path]:
    out = []
    for line in list_file.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        p = Path(line).expanduser()
        out.append(p if p.is_absolute() else (list_file.parent / p))
    return out


def resolve_image_files(spec: Any, *, root: Path, key: str, yaml_path: Path) -> list[Path]:
    """Expand a ``train``/``val`` value (folder, .txt list, image, or list of those) to image files."""
    entries = spec if isinstance(spec, (list, tuple)) else [spec]
    if not entries:
        raise DatasetError(f"{yaml_path}: key '{key}' is an empty list; give a folder or list file")
    files: list[Path] = []
    for raw in entries:
        if not isinstance(raw, (str, Path)):
            raise DatasetError(f"{yaml_path}: key '{key}' must hold paths (strings), got {raw!r}")
        p = Path(raw).expanduser()
        p = p if p.is_absolute() else root / p
        if p.is_dir():
            files.extend(_images_in(p))
        elif p.is_file() and p.suffix.lower() == ".txt":
            files.extend(_read_list_file(p))
        elif p.is_file() and p.suffix.lower() in IMG_SUFFIXES:
            files.append(p)
        elif p.exists():
            raise DatasetError(f"{yaml_path}: '{key}' entry {p} is neither a folder, a .txt list "
                               "file nor an image")
        else:
            raise DatasetError(f"{yaml_path}: '{key}' folder or file {p} does not exist; check "
                               f"'{key}' and 'path' (root {root})")
    files = sorted({Path(os.path.normpath(f)) for f in files})
    if not files:
        raise DatasetError(f"{yaml_path}: '{key}' ({spec!r} under {root}) contains no images "
                           f"(looked for {', '.join(sorted(IMG_SUFFIXES))})")
    return files


def load_data_config(data: str | Path) -> DataConfig:
    """Read a dataset yaml (or the built-in name ``"shapes"``) into a :class:`DataConfig`.

    Raises :class:`DatasetError` for a missing or malformed file, a missing key (named), a
    missing image folder, or a split with no images.

    Example:
        >>> cfg = load_data_config("shapes")
        >>> cfg.nc, len(cfg.train)
        (6, 2000)
    """
    if isinstance(data, str) and not data.strip():
        from ..errors import empty_value

        raise empty_value("data")  # the wording every command uses (not "dataset yaml . not found")
    if isinstance(data, str) and data == "shapes-cls" or (
            not (isinstance(data, str) and data in BUILTIN) and _is_classify_root(Path(data).expanduser())):
        raise DatasetError(f"{str(data)!r} is a classification dataset (ImageFolder: train/<class>/*); a detection "
                           "model needs a dataset yaml with keys path/train/val/names and YOLO label files "
                           "(images/<split>/*.jpg with labels/<split>/*.txt), or data='shapes'")
    if isinstance(data, str) and data in BUILTIN:
        from .shapes import ensure_shapes_dataset

        yaml_path = ensure_shapes_dataset()
    else:
        yaml_path = Path(data).expanduser()
        if yaml_path.is_dir() and (yaml_path / "data.yaml").is_file():
            yaml_path = yaml_path / "data.yaml"
        if not yaml_path.is_file():
            raise DatasetError(f"dataset yaml {yaml_path} not found; pass a path to a yaml with "
                               f"keys path/train/val/names, or a built-in name ({', '.join(BUILTIN)})")
    yaml_path = yaml_path.resolve()
    try:
        doc = yaml.safe_load(yaml_path.read_text())
    except yaml.YAMLError as e:
        raise DatasetError(f"dataset yaml {yaml_path} is malformed: {e}") from e
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"dataset yaml {yaml_path} cannot be read: {e}") from e
    if not isinstance(doc, dict):
        raise DatasetError(f"dataset yaml {yaml_path} must be a mapping with keys path, train, val, "
                           f"names; got {type(doc).__name__}")
    for key in ("train", "val", "names"):
        if doc.get(key) is None:
            raise DatasetError(f"dataset yaml {yaml_path} is missing key '{key}' (required: train, "
                               "val, names; optional: path, nc)")
    raw_root = doc.get("path")
    if raw_root is None:
        root = yaml_path.parent
    elif isinstance(raw_root, str):
        root = Path(raw_root).expanduser()
        root = root if root.is_absolute() else (yaml_path.parent / root)
    else:
        raise DatasetError(f"{yaml_path}: key 'path' must be a string, got {raw_root!r}")
    if not root.is_dir():
        raise DatasetError(f"{yaml_path}: dataset root 'path' {root} is not a folder")
    names = _parse_names(doc["names"], yaml_path)
    nc = doc.get("nc")
    if nc is not None and (isinstance(nc, bool) or not isinstance(nc, int) or nc != len(names)):
        raise DatasetError(f"{yaml_path}: key 'nc' ({nc!r}) does not match the {len(names)} "
                           "entries of 'names'; fix or remove 'nc'")
    train = resolve_image_files(doc["train"], root=root, key="train", yaml_path=yaml_path)
    val = resolve_image_files(doc["val"], root=root, key="val", yaml_path=yaml_path)
    logger.debug("dataset %s: %d train, %d val images, %d classes", yaml_path, len(train),
                 len(val), len(names))
    return DataConfig(root=root.resolve(), train=train, val=val, names=names, nc=len(names),
                      yaml_path=yaml_path)


def _is_classify_root(path: Path) -> bool:
    """A folder without data.yaml whose train/ holds class folders of images (ImageFolder layout)."""
    if not path.is_dir() or (path / "data.yaml").is_file() or (path / "labels").is_dir():
        return False
    from .classify import looks_like_classify_root

    return looks_like_classify_root(path)
