"""The process the fault tests kill: it writes something, pauses at a named point, and waits there.

Usage: ``python _child.py <scenario> <folder> <point>``. At the point it creates
``<folder>/READY`` (atomically) and sleeps, so the parent can SIGKILL it exactly there.
Scenarios:

- ``ckpt``: ``atomic_save`` of version 2 (a 4 MB tensor of 2s) to ``<folder>/last.pt``; points
  ``before_write``, ``mid_write`` (half the bytes written and fsynced), ``before_rename``,
  ``after_rename``.
- ``ckpt_loop``: saves versions 1, 2, 3... to ``last.pt`` forever; READY after version 1.
- ``shapes``: generates a 120 + 24 image shapes dataset under ``<folder>``; points ``mid_images``
  (after 30 images), ``before_rename`` (everything written, not yet renamed).
- ``export``: ONNX export of an untrained yolo9-t (nc=3) to ``<folder>/m.onnx``; points
  ``mid_trace`` (the exporter's file written), ``before_rename``.
- ``fsize``: ``atomic_save`` of 4 MB under RLIMIT_FSIZE = 256 KiB (SIGXFSZ ignored), so the OS
  refuses the write as a full disk would; prints the error and exits 0.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

_REAL_REPLACE = os.replace  # the scenarios patch os.replace; READY must not go through the patch


def ready_and_wait(folder: Path) -> None:
    tmp = folder / "READY.tmp"
    tmp.write_text(str(os.getpid()))
    _REAL_REPLACE(tmp, folder / "READY")
    time.sleep(120)  # the parent kills us long before
    sys.exit(3)


def payload(version: int):
    import torch

    return {"libreyolo": {"family": "yolo9", "size": "t", "task": "detect", "nc": 1, "names": {0: "x"}},
            "model": {"w": torch.full((1024, 1024), float(version))}, "version": version}


def ckpt(folder: Path, point: str) -> None:
    import io

    import torch

    from libreyolo.io import checkpoint as ck

    real_save, real_replace, real_fsync_dir = torch.save, os.replace, ck._fsync_dir
    if point == "before_write":
        def save(obj, f):
            ready_and_wait(folder)
        torch.save = save
    elif point == "mid_write":
        def save(obj, f):
            buf = io.BytesIO()
            real_save(obj, buf)
            data = buf.getvalue()
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
            ready_and_wait(folder)
        torch.save = save
    elif point == "before_rename":
        def replace(src, dst):
            ready_and_wait(folder)
            real_replace(src, dst)
        os.replace = replace
    elif point == "after_rename":
        def fsync_dir(d):
            ready_and_wait(folder)
            real_fsync_dir(d)
        ck._fsync_dir = fsync_dir
    ck.atomic_save(payload(2), folder / "last.pt")
    sys.exit(4)  # not reached: every point waits to be killed


def ckpt_loop(folder: Path) -> None:
    from libreyolo.io import checkpoint as ck

    v = 1
    while True:
        ck.atomic_save(payload(v), folder / "last.pt")
        if v == 1:
            (folder / "READY").write_text("1")
        v += 1


def shapes(folder: Path, point: str) -> None:
    from libreyolo.data import shapes as sh

    real_write, real_rename = sh._write_one, os.rename
    lock, count = threading.Lock(), [0]
    if point == "mid_images":
        def write_one(*a, **k):
            with lock:
                count[0] += 1
                stop = count[0] > 30
            if stop:
                ready_and_wait(folder) if count[0] == 31 else time.sleep(120)
            real_write(*a, **k)
        sh._write_one = write_one
    elif point == "before_rename":
        def rename(src, dst):
            ready_and_wait(folder)
            real_rename(src, dst)
        os.rename = rename
    sh.ensure_shapes_dataset(folder, n_train=120, n_val=24, imgsz=64)
    sys.exit(4)


def export(folder: Path, point: str) -> None:
    import torch

    from libreyolo import LibreYOLO

    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=3)
    real_export, real_replace = torch.onnx.export, os.replace
    if point == "mid_trace":
        def export_(*a, **k):
            real_export(*a, **k)
            ready_and_wait(folder)
        torch.onnx.export = export_
    elif point == "before_rename":
        def replace(src, dst):
            if str(dst).endswith(".onnx"):
                ready_and_wait(folder)
            real_replace(src, dst)
        os.replace = replace
    model.export(format="onnx", imgsz=64, file=str(folder / "m.onnx"))
    sys.exit(4)


def fsize(folder: Path) -> None:
    import resource
    import signal

    from libreyolo.errors import CheckpointError
    from libreyolo.io import checkpoint as ck

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))
    try:
        ck.atomic_save(payload(2), folder / "last.pt")
    except CheckpointError as e:
        print(f"CheckpointError: {e}")
        sys.exit(0)
    sys.exit(5)


if __name__ == "__main__":
    scenario, folder = sys.argv[1], Path(sys.argv[2])
    point = sys.argv[3] if len(sys.argv) > 3 else ""
    {"ckpt": lambda: ckpt(folder, point), "ckpt_loop": lambda: ckpt_loop(folder),
     "shapes": lambda: shapes(folder, point), "export": lambda: export(folder, point),
     "fsize": lambda: fsize(folder)}[scenario]()
