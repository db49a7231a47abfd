"""COCO-format detection data: an ``instances_*.json`` with its image folder, read straight into the
label index the YOLO-format path builds from ``.txt`` files (no conversion step, nothing written
next to the data).

Two ways to use it:

* a dataset yaml with ``<split>_json`` keys; each split's folder holds the images its JSON lists
  (``file_name`` relative to that folder); ``names`` may be left out (taken from the categories)::

      path: /data/my-coco
      train: images/train2017
      val: images/val2017
      train_json: annotations/instances_train2017.json
      val_json: annotations/instances_val2017.json

* a COCO folder as ``data=``: ``annotations/instances_<split>.json`` plus the images in
  ``images/<split>/`` or ``<split>/`` (``train2017/``, ``val2017/``...); the split's role (train,
  val, test) is read from its name.

Conversion: category ids, sorted, become class ids 0..nc-1 (so COCO's 80 categories with ids 1..90
become 0..79, in id order) and their ``name``\\s the class names; ``bbox`` ``[x, y, w, h]`` in pixels
becomes a normalised ``cx cy w h`` row, clipped to the image; ``iscrowd`` annotations and boxes
with no area after clipping are left out (counted in one log line); images without annotations
are background images.

Example:
    >>> import json, tempfile, pathlib
    >>> from PIL import Image
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "imgs").mkdir(); Image.new("RGB", (40, 20)).save(root / "imgs" / "a.png")
    >>> doc = {"images": [{"id": 7, "file_name": "a.png", "width": 40, "height": 20}],
    ...        "categories": [{"id": 3, "name": "cat"}],
    ...        "annotations": [{"id": 1, "image_id": 7, "category_id": 3, "bbox": [10, 5, 20, 10]}]}
    >>> (root / "a.json").write_text(json.dumps(doc)) > 0
    True
    >>> split = read_coco(root / "a.json", root / "imgs")
    >>> split.names, split.labels[0].tolist()
    ({0: 'cat'}, [[0.0, 0.5, 0.5, 0.5, 0.5]])
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DatasetError
from .labels import LabelIndex, check_image

logger = logging.getLogger(__name__)
SPLIT_ROLES = ("train", "val", "test")


@dataclass(frozen=True, kw_only=True)
class CocoSplit:
    """One COCO split: image files in the JSON's order, their labels (ndarray[n, 5] float32
    ``cls cx cy w h`` normalised), the (h, w) the JSON gives, and the class names."""

    json_path: Path
    files: list[Path]
    labels: list[np.ndarray]
    shapes: list[tuple[int, int]]
    names: dict[int, str]
    images_dir: Path | None = None
    keypoints: list[np.ndarray] | None = None  # per image ndarray[n, K, 3] x y v (read_coco(kpt_shape=...))

    def with_keypoints(self, kpt_shape: tuple[int, int]) -> CocoSplit:
        """This split read again with the annotations' ``keypoints`` (a person-keypoints file)."""
        return read_coco(self.json_path, self.images_dir if self.images_dir is not None else self.files[0].parent,
                         kpt_shape=kpt_shape)

    def pose_labels(self, files: list[Path], *, nc: int,
                    prefix: str = "") -> dict[Path, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per image of ``files``: (classes ndarray[n] int64, boxes ndarray[n, 4] float32 cx cy w h,
        keypoints ndarray[n, K, 3] float32 x y v, normalised), what a pose label file gives
        (:func:`libreyolo.data.pose.parse_pose_file`)."""
        if self.keypoints is None:
            raise DatasetError(f"{prefix}{self.json_path} was read without keypoints")
        by_file = {f: i for i, f in enumerate(self.files)}
        out = {}
        for f in files:
            i = by_file.get(Path(f))
            if i is None:
                raise DatasetError(f"{prefix}{f} is not an image of {self.json_path}")
            lab = self.labels[i]
            if len(lab) and int(lab[:, 0].max()) >= nc:
                raise DatasetError(f"{prefix}{self.json_path}: class id {int(lab[:, 0].max())} >= nc={nc}")
            out[Path(f)] = (lab[:, 0].astype(np.int64), lab[:, 1:5].copy(), self.keypoints[i].copy())
        return out

    def index(self, files: list[Path], *, nc: int, prefix: str = "") -> LabelIndex:
        """The :class:`LabelIndex` of ``files`` (all or some of this split's, e.g. ``fraction``):
        every image is checked readable, and its size must match the JSON's."""
        by_file = {f: i for i, f in enumerate(self.files)}
        kept, shapes, labels, corrupt, background = [], [], [], [], 0
        for f in files:
            i = by_file.get(Path(f))
            if i is None:
                raise DatasetError(f"{prefix}{f} is not an image of {self.json_path}")
            shape, reason = check_image(Path(f))
            if shape is None:
                corrupt.append((str(f), reason))
                continue
            if shape != self.shapes[i]:
                corrupt.append((str(f), f"is {shape[1]}x{shape[0]} but {self.json_path.name} says "
                                        f"{self.shapes[i][1]}x{self.shapes[i][0]}"))
                continue
            lab = self.labels[i]
            if len(lab) and int(lab[:, 0].max()) >= nc:
                raise DatasetError(f"{prefix}{self.json_path}: class id {int(lab[:, 0].max())} >= nc={nc}")
            background += not len(lab)
            kept.append(str(f))
            shapes.append(shape)
            labels.append(lab)
        if corrupt:
            logger.warning("%sskipped %d image(s) of %s: %s", prefix, len(corrupt), self.json_path.name,
                           "; ".join(f"{f}: {r}" for f, r in corrupt[:5]))
        if not kept:
            raise DatasetError(f"{prefix}no usable image in {self.json_path}")
        return LabelIndex(im_files=kept, shapes=np.array(shapes, np.int64).reshape(-1, 2), labels=labels,
                          n_background=background, corrupt=corrupt)


def _load_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise DatasetError(f"COCO annotations {path} not found") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"COCO annotations {path} cannot be read as JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list) or not isinstance(
            doc.get("categories"), list):
        raise DatasetError(f"{path} is not a COCO instances file: expected a mapping with 'images', "
                           "'annotations' and 'categories' lists")
    return doc


def read_coco(json_path: str | Path, images_dir: str | Path, *, kpt_shape: tuple[int, int] | None = None) -> CocoSplit:
    """Read a COCO instances JSON whose ``file_name``\\s are relative to ``images_dir``.

    ``kpt_shape`` (K, D): also read each annotation's ``keypoints`` (COCO person-keypoints files:
    ``[x1, y1, v1, ..., xK, yK, vK]`` in pixels, v 0 not labelled, 1 labelled but occluded, 2
    visible) into ``keypoints``, normalised by the image size; a labelled keypoint outside its
    image is marked v = 0 (counted in the log line), as an unlabelled one is. A category's
    ``keypoints`` name list, where present, must have K entries.

    Raises :class:`DatasetError` for a file that is not COCO instances JSON, a category or image
    entry without its required fields, an annotation pointing at an unknown image or category, a
    listed image that does not exist (the first one named), or (with ``kpt_shape``) an annotation
    without K keypoint triples or with a visibility other than 0, 1, 2.
    """
    json_path, images_dir = Path(json_path), Path(images_dir)
    doc = _load_json(json_path)
    try:
        cat_ids = sorted(int(c["id"]) for c in doc["categories"])
        cat_name = {int(c["id"]): str(c["name"]) for c in doc["categories"]}
    except (KeyError, TypeError, ValueError) as e:
        raise DatasetError(f"{json_path}: every category needs an integer 'id' and a 'name' ({e!r})") from e
    if not cat_ids:
        raise DatasetError(f"{json_path}: 'categories' is empty")
    cls_of = {cid: k for k, cid in enumerate(cat_ids)}
    nk = int(kpt_shape[0]) if kpt_shape is not None else 0
    if kpt_shape is not None:
        for c in doc["categories"]:
            names = c.get("keypoints")
            if isinstance(names, list) and len(names) != nk:
                raise DatasetError(f"{json_path}: category {c.get('name')!r} names {len(names)} keypoints but the "
                                   f"dataset yaml's kpt_shape is [{nk}, {kpt_shape[1]}]")
    kpts: dict[int, list[np.ndarray]] = {}
    outside = 0
    images: dict[int, tuple[Path, int, int]] = {}
    for im in doc["images"]:
        try:
            images[int(im["id"])] = (images_dir / str(im["file_name"]), int(im["height"]), int(im["width"]))
        except (KeyError, TypeError, ValueError) as e:
            raise DatasetError(f"{json_path}: every image needs 'id', 'file_name', 'width' and 'height' "
                               f"(got {im!r})") from e
    rows: dict[int, list[list[float]]] = {i: [] for i in images}
    kpts = {i: [] for i in images}
    dropped = 0
    for a in doc.get("annotations") or []:
        try:
            img_id, cid = int(a["image_id"]), int(a["category_id"])
            x, y, w, h = (float(v) for v in a["bbox"])
        except (KeyError, TypeError, ValueError) as e:
            raise DatasetError(f"{json_path}: annotation {a.get('id')!r} needs 'image_id', 'category_id' and a "
                               f"4-number 'bbox' ({e!r})") from e
        if img_id not in images:
            raise DatasetError(f"{json_path}: annotation {a.get('id')!r} refers to image id {img_id}, which "
                               "'images' does not list")
        if cid not in cls_of:
            raise DatasetError(f"{json_path}: annotation {a.get('id')!r} has category_id {cid}, which "
                               "'categories' does not list")
        if a.get("iscrowd", 0):
            dropped += 1
            continue
        _, ih, iw = images[img_id]
        x1, y1 = min(max(x, 0.0), iw), min(max(y, 0.0), ih)
        x2, y2 = min(max(x + w, 0.0), iw), min(max(y + h, 0.0), ih)
        if x2 - x1 <= 0 or y2 - y1 <= 0:
            dropped += 1
            continue
        rows[img_id].append([cls_of[cid], (x1 + x2) / 2 / iw, (y1 + y2) / 2 / ih, (x2 - x1) / iw, (y2 - y1) / ih])
        if kpt_shape is not None:
            kp, n_out = _keypoints(a, nk, iw, ih, json_path)
            kpts[img_id].append(kp)
            outside += n_out
    if dropped:
        logger.info("%s: left out %d crowd or zero-area annotation(s)", json_path.name, dropped)
    if outside:
        logger.info("%s: %d labelled keypoint(s) outside their image marked not labelled (v = 0)", json_path.name,
                    outside)
    files, labels, shapes, points = [], [], [], []
    for img_id, (f, h, w) in images.items():
        if not f.is_file():
            raise DatasetError(f"{json_path}: image {f} (id {img_id}) does not exist; 'file_name' is read "
                               f"relative to {images_dir}")
        files.append(f)
        shapes.append((h, w))
        labels.append(np.array(rows[img_id], np.float32).reshape(-1, 5))
        if kpt_shape is not None:
            points.append(np.stack(kpts[img_id]) if kpts[img_id] else np.zeros((0, nk, 3), np.float32))
    if not files:
        raise DatasetError(f"{json_path}: 'images' is empty")
    return CocoSplit(json_path=json_path, files=files, labels=labels, shapes=shapes,
                     names={k: cat_name[cid] for cid, k in cls_of.items()}, images_dir=images_dir,
                     keypoints=points if kpt_shape is not None else None)


def _keypoints(ann: dict, k: int, iw: int, ih: int, json_path: Path) -> tuple[np.ndarray, int]:
    """One annotation's ``keypoints`` -> (ndarray[K, 3] float32 x / w, y / h, v; labelled keypoints
    outside the image, now v = 0)."""
    raw = ann.get("keypoints")
    try:
        kp = np.array(raw, np.float64).reshape(k, 3)
    except (TypeError, ValueError):
        n = len(raw) if isinstance(raw, list) else 0
        raise DatasetError(f"{json_path}: annotation {ann.get('id')!r} has {n} keypoint numbers, the dataset yaml's "
                           f"kpt_shape needs {3 * k} (x, y, v for each of {k} keypoints)") from None
    v = kp[:, 2]
    bad = [x for x in v if x not in (0.0, 1.0, 2.0)]
    if bad:
        raise DatasetError(f"{json_path}: annotation {ann.get('id')!r} has keypoint visibility {bad[0]:g}, none of 0 "
                           "(not labelled), 1 (occluded), 2 (visible)")
    out = (v > 0) & ((kp[:, 0] < 0) | (kp[:, 0] > iw) | (kp[:, 1] < 0) | (kp[:, 1] > ih))
    kp[out | (v == 0)] = 0.0
    kp[:, 0] /= iw
    kp[:, 1] /= ih
    return kp.astype(np.float32), int(out.sum())


def role_of(stem: str) -> str | None:
    """The split role of an annotation file stem (``instances_val2017`` -> ``val``), else None."""
    name = stem.lower().removeprefix("instances_")
    for role in SPLIT_ROLES:
        if re.match(rf"^{role}(\d+|$|[_-])", name) or (role == "val" and name.startswith("valid")):
            return role
    return None


def find_coco_folder(root: Path) -> dict[str, tuple[Path, Path]]:
    """A COCO folder's splits: role -> (annotations JSON, image folder); empty if ``root`` is not
    one (no ``annotations/instances_*.json``)."""
    ann = root / "annotations"
    if not ann.is_dir():
        return {}
    out: dict[str, tuple[Path, Path]] = {}
    for js in sorted(ann.glob("instances_*.json")):
        role = role_of(js.stem)
        split = js.stem.removeprefix("instances_")
        if role is None or role in out:
            continue
        for images in (root / "images" / split, root / split, root / "images" / role, root / role):
            if images.is_dir():
                out[role] = (js, images)
                break
        else:
            raise DatasetError(f"{js}: no image folder for it; looked for {root / 'images' / split} and "
                               f"{root / split}")
    return out
