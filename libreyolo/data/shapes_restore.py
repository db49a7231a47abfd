"""``shapes-denoise``, ``shapes-sr`` and ``shapes-sr2``: the built-in restoration demo sets, degraded
shapes scenes.

Each HQ image is a square scene of :func:`libreyolo.data.shapes.render_scene` (``imgsz`` px);
its LQ image is

- ``kind="denoise"``: the scene plus Gaussian noise of standard deviation ``sigma`` (in 0-255
  units, default 25), rounded and clipped to uint8;
- ``kind="sr"`` / ``kind="sr2"``: the scene downscaled x4 / x2 with Pillow's antialiased bicubic
  filter.

A pure function of ``(seed, split, index)``: byte-identical on every run (PNG, lossless).
Written once under ``$LIBREYOLO_DATASETS_DIR`` (default ``~/.cache/libreyolo/datasets``) as
``shapes-<kind>-<hash>/{lq,hq}/{train,val}`` plus ``data.yaml`` (``scale`` 1, 4 or 2), through a
temporary folder renamed when complete.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._cv import cv2
from .materialise import check_sizes, dataset_folder, materialise
from .shapes import GENERATOR_VERSION, default_datasets_dir, render_scene

KINDS = {"denoise": 1, "sr": 4, "sr2": 2}  # kind -> scale


def render_pair(seed: int, split: int, index: int, *, imgsz: int, kind: str,
                sigma: float = 25.0) -> tuple[np.ndarray, np.ndarray]:
    """One (LQ, HQ) pair, both ndarray[h, w, 3] uint8 BGR; HQ is ``imgsz`` square, LQ the same
    size (denoise) or ``imgsz // 4`` (sr) / ``imgsz // 2`` (sr2).

    Example:
        >>> lq, hq = render_pair(0, 0, 0, imgsz=64, kind="sr")
        >>> lq.shape, hq.shape
        ((16, 16, 3), (64, 64, 3))
    """
    from PIL import Image

    rng = np.random.default_rng([seed, split, index, GENERATOR_VERSION, 31])
    hq, _ = render_scene(rng, height=imgsz, width=imgsz)
    if kind == "denoise":
        noisy = hq.astype(np.float64) + rng.normal(0.0, sigma, hq.shape)
        return np.clip(np.rint(noisy), 0, 255).astype(np.uint8), hq
    k = KINDS[kind]
    small = Image.fromarray(np.ascontiguousarray(hq[:, :, ::-1])).resize((imgsz // k, imgsz // k),
                                                                        Image.Resampling.BICUBIC)
    return np.ascontiguousarray(np.asarray(small)[:, :, ::-1]), hq


def ensure_shapes_restore_dataset(root: Path | None = None, *, kind: str = "denoise", n_train: int = 200,
                                  n_val: int = 20, imgsz: int | None = None, sigma: float = 25.0,
                                  seed: int = 0) -> Path:
    """Return the ``data.yaml`` of the dataset (``.../shapes-<kind>-<hash>/``), generating it first
    if needed. ``imgsz`` (HQ side) defaults to 64 for denoise and 128 for sr.

    Example:
        >>> import tempfile; p = ensure_shapes_restore_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=32)
        >>> p.name, sorted(f.name for f in (p.parent / "hq" / "train").iterdir())
        ('data.yaml', ['train_000000.png', 'train_000001.png'])
    """
    from ..errors import ConfigError

    if kind not in KINDS:
        raise ConfigError(f"ensure_shapes_restore_dataset: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    imgsz = imgsz if imgsz is not None else (64 if kind == "denoise" else 128)  # sr, sr2
    check_sizes("ensure_shapes_restore_dataset", n_train=n_train, n_val=n_val, imgsz=imgsz)
    if imgsz % KINDS[kind]:
        raise ConfigError(f"ensure_shapes_restore_dataset: imgsz must be a multiple of {KINDS[kind]} for "
                          f"kind={kind!r}, got {imgsz}")
    root = Path(root) if root is not None else default_datasets_dir()
    tag = f"{kind}-v{GENERATOR_VERSION}-{n_train}-{n_val}-{imgsz}-{seed}" + (f"-{sigma:g}" if kind == "denoise" else "")
    final = dataset_folder(root, f"shapes-{kind}", tag)

    def write(tmp: Path) -> None:
        for split, (name, n) in enumerate((("train", n_train), ("val", n_val))):
            for side in ("lq", "hq"):
                (tmp / side / name).mkdir(parents=True)
            for i in range(n):
                lq, hq = render_pair(seed, split, i, imgsz=imgsz, kind=kind, sigma=sigma)
                stem = f"{name}_{i:06d}.png"
                if not (cv2.imwrite(str(tmp / "lq" / name / stem), lq) and cv2.imwrite(str(tmp / "hq" / name / stem), hq)):
                    raise OSError(f"could not write {stem} under {tmp}")
        (tmp / "data.yaml").write_text(
            f"# libreyolo built-in 'shapes-{kind}' dataset (generator v{GENERATOR_VERSION}, seed {seed})\n"
            f"path: {final.resolve()}\ntrain: lq/train\nval: lq/val\nscale: {KINDS[kind]}\n")

    return materialise(final, write, what=f"shapes-{kind} dataset",
                       detail=f"{n_train} train + {n_val} val pairs, {imgsz} px")
