"""Folder exports written atomically: into a scratch folder beside the target, moved into place
only when complete, so an interrupted or failed export never leaves a half-written model where a
loadable one was. Shared by the OpenVINO, NCNN and ExecuTorch exporters. The finished folder gets
the permissions a plain ``mkdir`` would give it (not the scratch folder's private 0700)."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import CheckpointError

META_FILE = "libreyolo.json"  # the export's metadata beside the runtime's files


@contextmanager
def staged_folder(folder: Path, meta: dict[str, Any]) -> Iterator[Path]:
    """Yield an absolute scratch folder in ``folder.parent``; when the block ends without an
    error, write ``meta`` as :data:`META_FILE` into it and replace ``folder`` with it. The scratch
    folder is removed in every case."""
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent)).resolve()
    try:
        yield scratch
        (scratch / META_FILE).write_text(json.dumps(meta))
        scratch.chmod(_folder_mode(scratch))  # mkdtemp makes it 0700; an export folder is as any other
        if folder.exists():
            shutil.rmtree(folder)
        scratch.rename(folder)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def locate_staged(path: Path, *, suffix: str, runtime: str, fmt: str) -> tuple[Path, Path]:
    """(the model file, :data:`META_FILE`) of a staged export folder holding one ``*<suffix>``
    file, or of that file itself (OpenVINO ``.xml``, ExecuTorch ``.pte``); one-line
    :class:`CheckpointError` otherwise, naming ``runtime`` and ``export(format=fmt)``."""
    if path.is_dir():
        found = sorted(path.glob(f"*{suffix}"))
        if len(found) != 1:
            raise CheckpointError(f"{str(path)!r} should hold one {runtime} {suffix}, found {len(found)}")
        model = found[0]
    elif path.suffix == suffix and path.is_file():
        model = path
    else:
        raise CheckpointError(f"{runtime} model {str(path)!r} does not exist (pass the *_{fmt}_model folder "
                              f"or its {suffix})")
    meta = model.parent / META_FILE
    if not meta.is_file():
        raise CheckpointError(f"{str(path)!r} is not a libreyolo {runtime} export (no {META_FILE} beside the "
                              f"{suffix}); export one with model.export(format='{fmt}')")
    return model, meta


def _folder_mode(inside: Path) -> int:
    """The mode a plain ``mkdir`` gives a new folder here (the umask applied), read from a probe
    folder made and removed inside ``inside`` (no process-wide umask change, so thread-safe)."""
    probe = inside / f".mode.{uuid.uuid4().hex}"
    probe.mkdir()
    try:
        return probe.stat().st_mode & 0o777
    finally:
        probe.rmdir()
