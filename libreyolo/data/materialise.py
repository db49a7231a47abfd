"""Writing a generated demo dataset once, atomically: the scaffold of the ``shapes-*`` generators.

A generator checks its sizes (:func:`check_sizes`), names its folder by a hash of everything that
changes its content (:func:`dataset_folder`), and hands :func:`materialise` a function that writes
the images, targets and ``data.yaml`` into a temporary folder. That folder is renamed into place
only when complete, so an interrupted run leaves no half dataset behind, and two processes racing
to build the same set both end with the one that finished first.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)


def check_sizes(caller: str, *, n_train: object, n_val: object, imgsz: object) -> None:
    """Raise a one-line ``ConfigError`` naming ``caller`` unless the counts are ints >= 1 and ``imgsz`` >= 32.

    Example:
        >>> check_sizes("ensure_x", n_train=2, n_val=1, imgsz=64)
        >>> check_sizes("ensure_x", n_train=0, n_val=1, imgsz=64)
        Traceback (most recent call last):
        ...
        libreyolo.errors.ConfigError: ensure_x: n_train must be an int >= 1, got 0
    """
    from ..errors import ConfigError

    for key, v, lo in (("n_train", n_train, 1), ("n_val", n_val, 1), ("imgsz", imgsz, 32)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ConfigError(f"{caller}: {key} must be an int >= {lo}, got {v!r}")


def dataset_folder(root: Path, name: str, tag: str) -> Path:
    """``root / "<name>-<12 hex digits of sha256(tag)>"``.

    Example:
        >>> dataset_folder(Path("/d"), "shapes-sem", "sem-v1-2-1-64-0").name
        'shapes-sem-485cb7df92a3'
    """
    return root / f"{name}-{hashlib.sha256(tag.encode()).hexdigest()[:12]}"


def materialise(final: Path, write: Callable[[Path], None], *, what: str, detail: str = "") -> Path:
    """``final / "data.yaml"``, after ``write(tmp)`` filled a temporary sibling folder renamed to ``final``
    (nothing is written when the dataset already exists). ``what`` names the dataset in the log and
    in the one-line ``DatasetError`` an ``OSError`` becomes; ``detail`` (its size) goes to the log.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> p = materialise(root / "demo", lambda tmp: (tmp.mkdir(), (tmp / "data.yaml").write_text("x: 1\\n")),
        ...                 what="demo dataset")
        >>> p.read_text(), [q.name for q in root.iterdir()]
        ('x: 1\\n', ['demo'])
    """
    from ..errors import DatasetError

    yaml_path = final / "data.yaml"
    if yaml_path.is_file():
        return yaml_path
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    logger.info("generating the %s%s in %s", what, f" ({detail})" if detail else "", final)
    try:
        write(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not yaml_path.is_file():  # not a lost race with another process: a real failure
                raise
    except OSError as e:
        raise DatasetError(f"cannot write the {what} to {final} ({e}); set LIBREYOLO_DATASETS_DIR "
                           "to a writable folder") from e
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return yaml_path
