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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import DatasetError
from .constants import BUILTIN, IMG_SUFFIXES

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """A parsed dataset yaml.

    root: dataset root (``path`` resolved); train / val / test: sorted image files (``test``
    empty when the yaml has none); names: class id -> name (ids 0..nc-1); nc: number of classes;
    yaml_path: the yaml file read (or the COCO folder); coco: the splits given as COCO JSON
    (:mod:`libreyolo.data.coco`).
    """

    root: Path
    train: list[Path]
    val: list[Path]
    names: dict[int, str]
    nc: int
    yaml_path: Path
    test: list[Path] = field(default_factory=list)
    coco: dict[str, Any] = field(default_factory=dict)  # split -> libreyolo.data.coco.CocoSplit

    def label_index(self, split: str, files: list[Path], *, prefix: str = "") -> Any:
        """The labels of ``files`` of ``split`` when that split is COCO JSON (a
        :class:`~libreyolo.data.labels.LabelIndex`), else None (labels are ``.txt`` files)."""
        coco = self.coco.get(split)
        return coco.index(files, nc=self.nc, prefix=prefix) if coco is not None else None


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
    if isinstance(data, str) and data == "shapes-depth":
        raise DatasetError("'shapes-depth' is a depth dataset (images + depth maps); a detection model needs a "
                           "dataset yaml with YOLO label files, or data='shapes'")
    if isinstance(data, str) and data == "shapes-matte":
        raise DatasetError("'shapes-matte' is a matte dataset (images + alpha mask PNGs); train a matte model on it, "
                           "e.g. LibreYOLO('LibreBiRefNetlite-matte.pt', pretrained=False), or use data='shapes' here")
    if isinstance(data, str) and data == "shapes-pose":
        raise DatasetError("'shapes-pose' is a pose dataset (boxes + keypoints); train a pose model on it, e.g. "
                           "LibreYOLO('LibreYOLO9poset-pose.pt', pretrained=False), or use data='shapes' here")
    if isinstance(data, str) and data == "shapes-sem":
        raise DatasetError("'shapes-sem' is a semantic-segmentation dataset (images + PNG masks); a detection "
                           "model needs a dataset yaml with YOLO label files, or data='shapes'")
    if isinstance(data, str) and data in BUILTIN:
        from .shapes import ensure_shapes_dataset

        yaml_path = ensure_shapes_dataset()
    else:
        yaml_path = Path(data).expanduser()
        if yaml_path.is_dir() and (yaml_path / "data.yaml").is_file():
            yaml_path = yaml_path / "data.yaml"
        elif yaml_path.is_dir():
            from .coco import find_coco_folder

            splits = find_coco_folder(yaml_path)
            if splits:
                return _coco_folder_config(yaml_path.resolve(), splits)
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
    has_json = any(doc.get(f"{k}_json") is not None for k in ("train", "val", "test"))
    for key in ("train", "val") + (() if has_json else ("names",)):
        if doc.get(key) is None:
            raise DatasetError(f"dataset yaml {yaml_path} is missing key '{key}' (required: train, "
                               "val, names; optional: path, nc, test, <split>_json)")
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
    coco = _coco_splits(doc, root=root, yaml_path=yaml_path)
    names = _parse_names(doc["names"], yaml_path) if doc.get("names") is not None else next(iter(coco.values())).names
    nc = doc.get("nc")
    if nc is not None and (isinstance(nc, bool) or not isinstance(nc, int) or nc != len(names)):
        raise DatasetError(f"{yaml_path}: key 'nc' ({nc!r}) does not match the {len(names)} "
                           "entries of 'names'; fix or remove 'nc'")
    for split, c in coco.items():
        if len(c.names) != len(names):
            raise DatasetError(f"{yaml_path}: {c.json_path.name} ({split}_json) has {len(c.names)} categories "
                               f"but 'names' has {len(names)}")
    splits = {}
    for key in ("train", "val", "test"):
        if key in coco:
            splits[key] = sorted(coco[key].files)
        elif doc.get(key) is not None:
            splits[key] = resolve_image_files(doc[key], root=root, key=key, yaml_path=yaml_path)
    logger.debug("dataset %s: %d train, %d val, %d test images, %d classes", yaml_path, len(splits["train"]),
                 len(splits["val"]), len(splits.get("test", [])), len(names))
    return DataConfig(root=root.resolve(), train=splits["train"], val=splits["val"], test=splits.get("test", []),
                      names=names, nc=len(names), yaml_path=yaml_path, coco=coco)


def _coco_splits(doc: dict[str, Any], *, root: Path, yaml_path: Path) -> dict[str, Any]:
    """The ``<split>_json`` entries of a dataset yaml, read (:mod:`libreyolo.data.coco`)."""
    from .coco import read_coco

    out: dict[str, Any] = {}
    for key in ("train", "val", "test"):
        raw = doc.get(f"{key}_json")
        if raw is None:
            continue
        if not isinstance(raw, str) or not isinstance(doc.get(key), str):
            raise DatasetError(f"{yaml_path}: '{key}_json' must be one JSON path and '{key}' the one image "
                               "folder its file_names are relative to")
        js = Path(raw).expanduser()
        images = Path(doc[key]).expanduser()
        out[key] = read_coco(js if js.is_absolute() else root / js,
                             images if images.is_absolute() else root / images)
    if out:
        first = next(iter(out.values()))
        for key, c in out.items():
            if c.names != first.names:
                raise DatasetError(f"{yaml_path}: the categories of {c.json_path.name} ({key}) differ from those "
                                   f"of {first.json_path.name}")
    return out


def _coco_folder_config(root: Path, splits: dict[str, tuple[Path, Path]]) -> DataConfig:
    """A COCO folder given as ``data=`` (:func:`libreyolo.data.coco.find_coco_folder`)."""
    from .coco import read_coco

    missing = [r for r in ("train", "val") if r not in splits]
    if missing:
        found = ", ".join(f"{r}: {js.name}" for r, (js, _) in splits.items())
        raise DatasetError(f"COCO folder {root} has no {' or '.join(missing)} annotations "
                           f"(annotations/instances_<split>.json; found {found})")
    coco = {role: read_coco(js, images) for role, (js, images) in splits.items()}
    names = coco["train"].names
    for role, c in coco.items():
        if c.names != names:
            raise DatasetError(f"COCO folder {root}: the categories of {c.json_path.name} ({role}) differ from "
                               f"those of {coco['train'].json_path.name}")
    return DataConfig(root=root, train=sorted(coco["train"].files), val=sorted(coco["val"].files),
                      test=sorted(coco["test"].files) if "test" in coco else [], names=names, nc=len(names),
                      yaml_path=root, coco=coco)


def _is_classify_root(path: Path) -> bool:
    """A folder without data.yaml whose train/ holds class folders of images (ImageFolder layout)."""
    if not path.is_dir() or (path / "data.yaml").is_file() or (path / "labels").is_dir():
        return False
    from .classify import looks_like_classify_root

    return looks_like_classify_root(path)
