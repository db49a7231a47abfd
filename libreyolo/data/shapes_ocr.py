"""``text-demo``: the built-in OCR demo set, short random words drawn with Pillow's default font.

Each image is ``imgsz`` square (default 128) on a random light background with one to three
words (3-6 characters of digits and letters) in dark colours at random, non-overlapping places,
font size 14-22 px (``ImageFont.load_default(size=...)``, the FreeType font Pillow ships).
Labels are ICDAR-2015 style lines ``x1,y1,x2,y2,x3,y3,x4,y4,text`` (clockwise from the top-left,
pixels), the word's ink box grown by 2 px. A pure function of ``(seed, split, index)``: the same
bytes on every run with the same Pillow (PNG, lossless). Written once under
``$LIBREYOLO_DATASETS_DIR`` as ``text-demo-<hash>/{images,labels}/{train,val}`` plus ``data.yaml``.
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np

from .._cv import cv2
from .materialise import check_sizes, dataset_folder, materialise
from .shapes import default_datasets_dir

OCR_GENERATOR_VERSION = 1
ALPHABET = string.digits + string.ascii_letters


def render_text_scene(seed: int, split: int, index: int, *, imgsz: int = 128) -> tuple[np.ndarray, list[tuple[np.ndarray, str]]]:
    """(image ndarray[imgsz, imgsz, 3] uint8 BGR, [(quad float32[4, 2], word), ...]).

    Example:
        >>> img, words = render_text_scene(0, 0, 0, imgsz=96)
        >>> img.shape, 1 <= len(words) <= 3, words[0][0].shape
        ((96, 96, 3), True, (4, 2))
    """
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng([seed, split, index, OCR_GENERATOR_VERSION, 47])
    bg = tuple(int(v) for v in rng.integers(170, 256, 3))
    im = Image.new("RGB", (imgsz, imgsz), bg)
    draw = ImageDraw.Draw(im)
    taken: list[tuple[int, int, int, int]] = []
    words: list[tuple[np.ndarray, str]] = []
    for _ in range(int(rng.integers(1, 4))):
        word = "".join(ALPHABET[i] for i in rng.integers(0, len(ALPHABET), int(rng.integers(3, 7))))
        font = ImageFont.load_default(size=int(rng.integers(14, 23)))
        x0, y0, x1, y1 = draw.textbbox((0, 0), word, font=font)
        tw, th = x1 - x0, y1 - y0
        if tw + 6 >= imgsz:
            continue
        for _try in range(20):
            x, y = int(rng.integers(3, imgsz - tw - 3)), int(rng.integers(3, max(imgsz - th - 3, 4)))
            box = (x - 2, y - 2, x + tw + 2, y + th + 2)
            if all(box[2] < b[0] or box[0] > b[2] or box[3] < b[1] or box[1] > b[3] for b in taken):
                break
        else:
            continue
        colour = tuple(int(v) for v in rng.integers(0, 90, 3))
        draw.text((x - x0, y - y0), word, fill=colour, font=font)
        taken.append(box)
        a, b, c, d = (float(v) for v in box)
        words.append((np.array([[a, b], [c, b], [c, d], [a, d]], np.float32), word))
    return np.ascontiguousarray(np.asarray(im)[:, :, ::-1]), words


def label_line(quad: np.ndarray, text: str) -> str:
    """``x1,y1,...,x4,y4,text`` (coordinates rounded to 0.1 px).

    Example:
        >>> label_line(np.array([[0, 0], [10, 0], [10, 5], [0, 5]], np.float32), "ab")
        '0,0,10,0,10,5,0,5,ab'
    """
    return ",".join(f"{v:g}" for v in np.round(quad.reshape(-1).astype(np.float64), 1)) + "," + text


def ensure_text_demo_dataset(root: Path | None = None, *, n_train: int = 200, n_val: int = 20, imgsz: int = 128,
                             seed: int = 0) -> Path:
    """Return the ``data.yaml`` of the demo set (``.../text-demo-<hash>/``), generating it first if needed.

    Example:
        >>> import tempfile; p = ensure_text_demo_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64)
        >>> p.name, sorted(f.name for f in (p.parent / "labels" / "train").iterdir())
        ('data.yaml', ['train_000000.txt', 'train_000001.txt'])
    """
    check_sizes("ensure_text_demo_dataset", n_train=n_train, n_val=n_val, imgsz=imgsz)
    root = Path(root) if root is not None else default_datasets_dir()
    final = dataset_folder(root, "text-demo", f"ocr-v{OCR_GENERATOR_VERSION}-{n_train}-{n_val}-{imgsz}-{seed}")

    def write(tmp: Path) -> None:
        for split, (name, n) in enumerate((("train", n_train), ("val", n_val))):
            (tmp / "images" / name).mkdir(parents=True)
            (tmp / "labels" / name).mkdir(parents=True)
            for i in range(n):
                img, words = render_text_scene(seed, split, i, imgsz=imgsz)
                stem = f"{name}_{i:06d}"
                if not cv2.imwrite(str(tmp / "images" / name / f"{stem}.png"), img):
                    raise OSError(f"could not write {stem}.png under {tmp}")
                (tmp / "labels" / name / f"{stem}.txt").write_text("".join(label_line(q, t) + "\n" for q, t in words))
        (tmp / "data.yaml").write_text(
            f"# libreyolo built-in 'text-demo' OCR dataset (generator v{OCR_GENERATOR_VERSION}, seed {seed})\n"
            f"path: {final.resolve()}\ntrain: images/train\nval: images/val\n")

    return materialise(final, write, what="text-demo dataset", detail=f"{n_train} train + {n_val} val images, {imgsz} px")
