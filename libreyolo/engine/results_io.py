"""Tables, label files, crops and the probabilities plot of
:class:`~libreyolo.engine.results.Results` (its ``to_df``, ``to_csv``, ``save_txt``, ``save_crop``,
the body of ``save`` and the classification ``plot`` live here to keep ``results.py`` small), and the image writer and
run-folder naming the results and the savers share (:func:`write_bgr`, :func:`next_run_dir`).

pandas is optional: only :func:`summary_to_df` imports it, when first called; CSV is written
with the standard library.

Example:
    >>> summary_to_csv([{"name": "a", "class": 0, "confidence": 0.9,
    ...                  "box": {"x1": 1, "y1": 2, "x2": 3, "y2": 4}}]).splitlines()
    ['name,class,confidence,x1,y1,x2,y2', 'a,0,0.9,1,2,3,4']
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError

if TYPE_CHECKING:
    from .results import Results

_DETECT_COLUMNS = ("name", "class", "confidence", "x1", "y1", "x2", "y2")
_TRACK_COLUMNS = ("track_id",)
_PROBS_COLUMNS = ("name", "class", "confidence")
_SEMANTIC_COLUMNS = ("name", "class", "pixels", "fraction")


def _flat_rows(summary: list[dict[str, Any]], kind: str | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """Flatten ``box`` into x1..y2 and pick the column order: ``kind`` is "detect", "track" or
    "probs" (``None``: guessed from the first row, "detect" when there is none). Mask polygons
    (``segments``) stay out of the table (``to_json`` has them)."""
    rows = []
    for row in summary:
        flat = {k: v for k, v in row.items() if k not in ("box", "point", "segments", "keypoints")}
        flat.update(row.get("box", {}))
        flat.update(row.get("point", {}))
        rows.append(flat)
    if kind is None:
        kind = "detect" if not summary else "semantic" if "pixels" in summary[0] else "points" \
            if "point" in summary[0] else "probs" \
            if "box" not in summary[0] else "track" if "track_id" in summary[0] else "detect"
    if kind == "semantic":
        return list(_SEMANTIC_COLUMNS), rows
    if kind == "points":
        return ["name", "class", "confidence", "x", "y"], rows
    if kind == "probs":
        return list(_PROBS_COLUMNS), rows
    return list(_DETECT_COLUMNS) + (list(_TRACK_COLUMNS) if kind == "track" else []), rows


def summary_to_df(summary: list[dict[str, Any]], kind: str | None = None) -> Any:
    """``Results.summary()`` rows -> ``pandas.DataFrame`` (columns as :func:`summary_to_csv`)."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ConfigError("Results.to_df() needs pandas, which is not installed; `pip install pandas`, "
                          "or use Results.to_csv() / summary(), which do not need it") from e
    columns, rows = _flat_rows(summary, kind)
    return pd.DataFrame(rows, columns=columns)


def summary_to_csv(summary: list[dict[str, Any]], kind: str | None = None) -> str:
    """``Results.summary()`` rows -> CSV text with a header (``name,class,confidence,x1,y1,x2,y2``
    plus ``track_id`` when tracked; ``name,class,confidence`` for classification)."""
    columns, rows = _flat_rows(summary, kind)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def table_kind(r: Results) -> str:
    """The columns :func:`summary_to_csv` uses for ``r``: "track", "detect", "probs" or "semantic"."""
    if r.boxes is None and r.semantic is not None:
        return "semantic"
    if r.boxes is None and r.points is not None:
        return "points"
    if r.boxes is None and r.probs is not None:
        return "probs"
    return "track" if r.boxes is not None and r.boxes.is_track else "detect"


def label_lines(r: Results, *, save_conf: bool) -> list[str]:
    """YOLO label lines of a result: ``cls xc yc w h [conf] [track id]`` (normalised), the
    segment label format ``cls x1 y1 x2 y2 ... [conf]`` (each mask's polygon, normalised) with
    masks, ``prob cls`` for the top-5 of a classification, ``cls x y [conf]`` for points.

    Raises:
        ConfigError: the result has no label-line format (a restored image, a depth, semantic or
            alpha map without boxes): those are written by ``save()`` / ``save_depth()`` /
            ``save_mask()`` / ``save_alpha()``.
    """
    if r.boxes is None:
        if r.points is not None:  # point task: ``cls x y [conf]``, x / y normalised by the image size
            h, w = r.orig_shape
            return [f"{int(c)} {x / w:.6g} {y / h:.6g}" + (f" {cf:.6g}" if save_conf else "")
                    for x, y, cf, c in r.points.cpu().tolist()]
        if r.probs is None:
            from .results_kinds import map_kind

            raise ConfigError(f"save_txt() has no label-line format for a {map_kind(r) or 'empty'} result; "
                              "write it with save() (the image), save_depth() (depth), save_mask() (semantic) or "
                              "save_alpha() (matte)")
        return [f"{float(r.probs._data[c]):.6g} {c}" for c in r.probs.top5]
    if r.masks is not None and r.keypoints is None:  # segment: the polygon replaces the box
        data = r.boxes._data.detach().cpu().float()
        out = []
        for poly, conf, cls in zip(r.masks.xyn, data[:, 4].tolist(), data[:, 5].tolist(), strict=True):
            if len(poly) < 3:  # an empty or degenerate mask has no polygon label
                continue
            coords = " ".join(f"{min(max(float(v), 0.0), 1.0):.6g}" for v in poly.reshape(-1))
            out.append(f"{int(cls)} {coords}" + (f" {conf:.6g}" if save_conf else ""))
        return out
    from ..ops.boxes import xyxy_to_xywh

    data = r.boxes._data.detach().cpu().float()
    h, w = r.orig_shape
    xywhn = (xyxy_to_xywh(data[:, :4]) / data.new_tensor([w, h, w, h])).clamp_(0.0, 1.0).tolist()
    ids = r.boxes._id.tolist() if r.boxes._id is not None else None
    lines = []
    for i, ((xc, yc, bw, bh), conf, cls) in enumerate(zip(xywhn, data[:, 4].tolist(), data[:, 5].tolist(),
                                                           strict=True)):
        line = f"{int(cls)} {xc:.6g} {yc:.6g} {bw:.6g} {bh:.6g}"
        if r.keypoints is not None:  # pose: the keypoints follow the box (the pose label format)
            from .keypoints import keypoint_fields

            line += keypoint_fields(r, i, save_conf=False)
        if save_conf:
            line += f" {conf:.6g}"
        if ids is not None:
            line += f" {int(ids[i])}"
        lines.append(line)
    return lines


def crop_boxes(r: Results) -> list[tuple[int, np.ndarray]]:
    """(class id, BGR crop (h, w, 3) copied from ``orig_img``) per detection with a non-empty box."""
    if r.boxes is None:
        return []
    h, w = r.orig_shape
    out = []
    for x1, y1, x2, y2, _conf, cls in r.boxes._data.detach().cpu().tolist():
        xa, ya = max(0, int(np.floor(x1))), max(0, int(np.floor(y1)))
        xb, yb = min(w, int(np.ceil(x2))), min(h, int(np.ceil(y2)))
        if xb > xa and yb > ya:
            out.append((int(cls), np.ascontiguousarray(r.orig_img[ya:yb, xa:xb])))
    return out


def crop_stem(r: Results, file_name: str | Path | None) -> str:
    """The file stem of ``save_crop``: ``file_name`` without an image suffix, else the source's
    stem (``image`` for an in-memory source; ``_<frame>`` appended for a video frame)."""
    from .results import WRITABLE_SUFFIXES

    if file_name:
        given = Path(file_name)
        return str(given.with_suffix("") if given.suffix.lower() in WRITABLE_SUFFIXES else given)
    stem = Path(r.path).stem if r.path is not None else "image"
    return f"{stem}_{r.frame:06d}" if r.frame is not None else stem


def write_crops(r: Results, save_dir: Path, stem: str) -> list[Path]:
    """Write :func:`crop_boxes` as ``save_dir/<class name>/<stem>[_k].jpg``; returns the files."""
    written = []
    for cls, crop in crop_boxes(r):
        folder = save_dir / _safe(r.names.get(cls, str(cls)))
        folder.mkdir(parents=True, exist_ok=True)
        file, k = folder / f"{stem}.jpg", 1
        while file.exists() or file in written:
            k += 1
            file = folder / f"{stem}_{k}.jpg"
        write_bgr(file, crop)
        written.append(file)
    return written


def _safe(name: str) -> str:
    """A class name usable as a folder name (path separators replaced)."""
    return "".join("_" if ch in '/\\:*?"<>|' else ch for ch in name).strip() or "_"


def plot_probs(r: Results, *, conf: bool) -> np.ndarray:
    """:meth:`Results.plot` of a classification result: the image with the top-5 classes written
    in its top-left corner, best first (OpenCV's font, Pillow's bitmap font without OpenCV)."""
    try:
        import cv2
    except ImportError:
        return _probs_pil(r, conf=conf)

    img = np.ascontiguousarray(r.orig_img.copy())
    h = img.shape[0]
    scale = max(0.4, h / 800)
    th = max(1, round(scale * 2))
    y = int(22 * scale) + 4
    for c in r.probs.top5 if r.probs is not None else []:
        text = r.names.get(c, str(c)) + (f" {float(r.probs._data[c]):.2f}" if conf else "")
        (tw, tht), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, th)
        cv2.rectangle(img, (4, y - tht - 3), (8 + tw, y + base), (0, 0, 0), -1)
        cv2.putText(img, text, (6, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), th, cv2.LINE_AA)
        y += tht + base + 6
    return img


def _probs_pil(r: Results, *, conf: bool) -> np.ndarray:
    """:func:`plot_probs` without OpenCV (Pillow's bitmap font)."""
    from PIL import Image, ImageDraw

    pil = Image.fromarray(np.ascontiguousarray(r.orig_img[:, :, ::-1]))
    draw = ImageDraw.Draw(pil)
    y = 4
    for c in r.probs.top5 if r.probs is not None else []:
        text = r.names.get(c, str(c)) + (f" {float(r.probs._data[c]):.2f}" if conf else "")
        left, top, right, bottom = draw.textbbox((6, y), text)
        draw.rectangle((4, top - 2, right + 2, bottom + 2), fill=(0, 0, 0))
        draw.text((6, y), text, fill=(255, 255, 255))
        y = bottom + 6
    return np.ascontiguousarray(np.asarray(pil)[:, :, ::-1])


def next_run_dir(base: str | Path) -> Path:
    """Create and return the first free run folder: ``base``, then ``base2``, ``base3``...

    Example: ``next_run_dir(Path("runs/detect/predict"))`` -> ``runs/detect/predict2`` when
    ``runs/detect/predict`` exists. Creation is atomic, so two processes never share a folder.
    """
    base = Path(base)
    base.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        candidate = base if n == 1 else base.with_name(f"{base.name}{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1


def write_bgr(file: Path, bgr: np.ndarray) -> None:
    """Encode a BGR image by ``file``'s suffix (JPEG quality 95) and write it: OpenCV when it is
    installed, Pillow otherwise; non-ASCII paths work either way."""
    suffix = file.suffix.lower()
    try:
        import cv2
    except ImportError:
        cv2 = None
    if cv2 is not None:
        params = [cv2.IMWRITE_JPEG_QUALITY, 95] if suffix in (".jpg", ".jpeg") else []
        ok, buf = cv2.imencode(suffix, bgr, params)
        if not ok:
            raise ConfigError(f"OpenCV could not encode an image as '{file.suffix}' for '{file}'")
        try:
            buf.tofile(str(file))  # handles non-ASCII paths, unlike cv2.imwrite
        except OSError as e:
            raise ConfigError(f"cannot write '{file}': {e}") from e
        return
    from PIL import Image

    try:
        Image.fromarray(np.ascontiguousarray(bgr[:, :, ::-1])).save(file, quality=95)
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"cannot write '{file}': {e}") from e


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` both exist and are the same file."""
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def _plural(word: str) -> str:
    """The English plural of a class name (``box`` -> ``boxes``, ``berry`` -> ``berries``)."""
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if len(word) > 1 and word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def save_result(r: Results, target: str | Path | None, *, labels: bool, conf: bool,
                line_width: int | None) -> Path:
    """The body of :meth:`Results.save`: pick the file (``target`` a file, a folder or ``None``),
    refuse the source image and unwritable suffixes, write the picture (and a matte's alpha PNG)."""
    import logging

    from . import restore_io
    from .results import _UNWRITABLE_SUFFIXES, WRITABLE_SUFFIXES

    if target is None:
        default = file_in(r, Path.cwd())
        target = default.with_name(f"results_{default.name}")
    target = Path(target)
    suffix = target.suffix.lower()
    if suffix in WRITABLE_SUFFIXES and not target.is_dir():
        file = target
    elif suffix in _UNWRITABLE_SUFFIXES and not target.is_dir():
        raise ConfigError(
            f"cannot save to '{target}': '{suffix}' is not a format save() writes; "
            f"use one of {', '.join(WRITABLE_SUFFIXES)} or a directory"
        )
    else:  # a directory, even with a dot in its name (runs/exp.1)
        file = file_in(r, target)
    if r.path is not None and _same_file(file, Path(r.path)):
        raise ConfigError(f"save() would overwrite the source image '{r.path}'; pass another file or folder")
    file.parent.mkdir(parents=True, exist_ok=True)
    bgr = restore_io.to_bgr(r) if r.restored is not None else r.plot(labels=labels, conf=conf,
                                                                      line_width=line_width)
    write_bgr(file, bgr)
    if r.alpha is not None:  # a matte: the mask PNG beside the overlay
        r.save_alpha(file.with_name(f"{file.stem}_alpha.png"))
    logging.getLogger("libreyolo.engine.results").debug("saved %s", file)
    r.save_path = file
    return file


def file_in(r: Results, folder: Path) -> Path:
    """The file :meth:`Results.save` writes in ``folder``: named after the source (``_<frame>`` for a
    video frame), else the first free ``image<i>.jpg``."""
    from .results import WRITABLE_SUFFIXES

    if r.path is not None:
        src = Path(r.path)
        if r.frame is not None:
            return folder / f"{src.stem}_{r.frame:06d}.jpg"
        suffix = src.suffix.lower() if src.suffix.lower() in WRITABLE_SUFFIXES else ".jpg"
        return folder / f"{src.stem}{suffix}"
    i = 0
    while (folder / f"image{i}.jpg").exists():
        i += 1
    return folder / f"image{i}.jpg"
