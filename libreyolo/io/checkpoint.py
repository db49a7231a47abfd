"""The checkpoint contract.

A checkpoint is a dict loaded with ``torch.load(weights_only=True)`` (no code is executed)::

    {"libreyolo": {"format": 1, "version": str, "family": str, "size": str, "task": str,
                   "nc": int, "names": {int: str}, "imgsz": int,
                   "arch": {option: value}},  # only when the family's architecture options differ
     "model": {param_name: Tensor},          # weights (EMA weights for trained models)
     ...}                                    # training state: epoch, optimizer, ema, train_args, ...

``.safetensors`` files hold the same weights with the metadata as JSON under the header key
``"libreyolo"``. Writes are atomic: a temporary file is written, fsynced and renamed, so a crash
mid-save never leaves a truncated checkpoint behind.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import torch

from .._version import __version__
from ..errors import CheckpointError, LibreYOLOError

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

FORMAT = 1
REQUIRED_META = ("family", "size", "task", "nc", "names")


def atomic_save(obj: Any, path: Path) -> Path:
    """``torch.save`` to ``path`` through a temporary file + fsync + rename.

    The previous ``path`` stays intact until the rename, whatever happens before it (a kill, a
    full disk). Partial files left by an interrupted earlier save are removed first, with a
    warning that says so (:func:`remove_stale_partials`).

    Raises:
        CheckpointError: the file cannot be written (no space left, read-only folder, ...); the
            message says whether a previous ``path`` is still there.
    """
    path = Path(path)
    return atomic_write(path, lambda f: torch.save(obj, f))


def partial_path(path: Path) -> Path:
    """A fresh temporary name next to ``path`` that :func:`remove_stale_partials` recognises."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def atomic_write(path: Path, write: Callable[[BinaryIO], object], *, what: str = "checkpoint",
                 error: type[LibreYOLOError] = CheckpointError) -> Path:
    """Write ``path`` through ``write(file)`` on a temporary file + fsync + rename.

    Whatever happens before the rename (a kill, a full disk, an exception in ``write``), the
    previous ``path`` is unchanged and the temporary file is removed (a SIGKILL leaves it for
    :func:`remove_stale_partials` to clean up at the next write, with a warning).

    Raises:
        LibreYOLOError: ``error`` (``CheckpointError`` by default) for an ``OSError``, saying
            whether an earlier ``path`` is intact.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise _write_error(path, e, what=what, error=error) from e
    rec: _RecordingFile | None = None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp creates 0600; checkpoints are ordinary files
        with os.fdopen(fd, "wb") as f:
            rec = _RecordingFile(f)
            write(rec)  # type: ignore[arg-type]
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        # torch's zip writer turns a failed write (ENOSPC, EFBIG) into a RuntimeError; the
        # OSError it swallowed is the real cause.
        cause = e if isinstance(e, OSError) else (rec.error if rec is not None else None)
        if cause is not None and not isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise _write_error(path, cause, what=what, error=error) from e
        raise
    return path


class _RecordingFile:
    """A binary file that remembers the first ``OSError`` its ``write`` raised."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._f.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        self._f.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _write_error(path: Path, e: OSError, *, what: str, error: type[LibreYOLOError]) -> LibreYOLOError:
    why = "no space left on the device" if e.errno == errno.ENOSPC else (e.strerror or str(e) or type(e).__name__)
    kept = (f"the previous {path.name} is unchanged" if path.is_file()
            else f"no earlier {path.name} existed, so nothing was lost")
    return error(f"cannot write {what} '{path}' ({why}); {kept}; free disk space or choose another folder "
                 "and try again.")


def remove_stale_partials(path: Path, *, max_age_s: float = 600.0) -> list[Path]:
    """Remove ``.<name>.*.tmp`` files that an interrupted save of ``path`` left next to it.

    A partial file is stale when the process that wrote it (its pid is in the name) is gone, or,
    for names without a pid, when it was not modified for ``max_age_s`` seconds; a save still
    running in another process is left alone. Logs one warning naming what was removed.

    Example:
        >>> remove_stale_partials(Path("/tmp/no-such-dir/last.pt"))
        []
    """
    path = Path(path)
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.(?:(\d+)\.)?[^.]+\.tmp$")
    removed: list[Path] = []
    try:
        candidates = list(path.parent.iterdir())
    except OSError:
        return removed
    now = time.time()
    for p in candidates:
        m = pattern.match(p.name)
        if m is None:
            continue
        pid = int(m.group(1)) if m.group(1) else None
        try:
            if pid is not None:
                if pid == os.getpid() or _pid_alive(pid):
                    continue
            elif now - p.stat().st_mtime < max_age_s:
                continue
            size = p.stat().st_size
            p.unlink()
        except OSError:
            continue
        removed.append(p)
        logger.warning("removed %s (%.1f MB), a partial file left by an interrupted write; %s", p.name,
                       size / 1e6, f"the last complete {path.name} is intact" if path.is_file()
                       else f"no complete {path.name} had been written before")
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def model_metadata(model: Family) -> dict[str, Any]:
    meta = {
        "format": FORMAT,
        "version": __version__,
        "family": model.FAMILY,
        "size": model.size,
        "task": model.task,
        "nc": model.nc,
        "names": dict(model.names),
        "imgsz": model.imgsz,
    }
    arch = getattr(model, "arch", None)
    if arch:  # architecture options beyond the size (e.g. yolo9 box_groups=1 for Ultralytics weights)
        meta["arch"] = dict(arch)
    if getattr(model, "quant", None) is not None:
        from ..kernels.quant.model import quant_metadata

        meta["quant"] = quant_metadata(model)
    return meta


def checkpoint_object(model: Family, *, extra: dict[str, Any] | None = None,
                      state_dict: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
    """What :func:`save_model` writes: metadata, a CPU copy of the weights, ``extra``. Every tensor
    is copied, so the object no longer changes when training goes on (it can be written later,
    e.g. from another thread)."""
    if model.fused:
        raise CheckpointError("a fused model cannot be saved as a trainable checkpoint; save before fuse()")
    sd = state_dict if state_dict is not None else model.net.state_dict()
    obj: dict[str, Any] = {"libreyolo": model_metadata(model),
                           "model": {k: v.detach().cpu().clone() for k, v in sd.items()}}
    if extra:
        obj.update(extra)
    return obj


def save_model(model: Family, path: Path, *, extra: dict[str, Any] | None = None,
               state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write ``model`` (or ``state_dict`` in its place, e.g. EMA weights) with metadata."""
    obj = checkpoint_object(model, extra=extra, state_dict=state_dict)
    if Path(path).suffix == ".safetensors":
        from safetensors.torch import save as save_bytes

        meta = {"libreyolo": json.dumps({**obj["libreyolo"], "names": {str(k): v for k, v in model.names.items()}})}
        data = save_bytes({k: v.contiguous() for k, v in obj["model"].items()}, metadata=meta)
        return atomic_write(Path(path), lambda f: f.write(data))
    return atomic_save(obj, Path(path))


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint dict without executing code; raise :class:`CheckpointError` if unusable.

    Each way a file can be unusable gets one sentence saying what it is and what to do: missing,
    a directory, empty, truncated or corrupt, not a PyTorch file at all, a checkpoint of another
    library (pickled Python objects, which are never unpickled here), a plain state dict, or a
    libreyolo checkpoint with incomplete metadata.

    Example:
        >>> read_checkpoint("missing.pt")  # doctest: +SKIP
        CheckpointError: checkpoint 'missing.pt' does not exist; check the path.
    """
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"checkpoint '{path}' is a directory, not a file; pass the .pt file inside it "
                              "(e.g. runs/detect/train/weights/best.pt).")
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist; check the path.")
    try:
        size = path.stat().st_size
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint '{path}' ({e.strerror or e}).") from e
    if size == 0:
        raise CheckpointError(f"checkpoint '{path}' is empty (0 bytes), so it was never written completely; "
                              "use another copy or save or download it again.")
    if path.suffix == ".safetensors":
        return _read_safetensors(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - every unpickling failure becomes one sentence below
        logger.debug("torch.load(%s) failed: %s: %s", path, type(e).__name__, e)
        raise CheckpointError(_describe_load_failure(path, e)) from e
    return validate_checkpoint(obj, str(path))


_ZIP_MAGIC = b"PK\x03\x04"
_GLOBAL = re.compile(r"GLOBAL ([A-Za-z_][\w.]*)")


def _describe_load_failure(path: Path, e: Exception) -> str:
    """One sentence for a failed ``torch.load(weights_only=True)`` (never torch's own advice)."""
    with open(path, "rb") as f:
        head = f.read(4)
    msg = str(e)
    found = _GLOBAL.search(msg)
    if found:
        name = found.group(1)
        lib = name.split(".", 1)[0]
        if lib == "ultralytics":
            origin = "an Ultralytics checkpoint"
        elif lib in sys.stdlib_module_names or lib == "__main__":
            origin = "a file"
        else:
            origin = f"a checkpoint of another library ({lib})"
        return (f"'{path}' is {origin} that stores pickled Python objects ({name}), which libreyolo never "
                "unpickles because that can run code; libreyolo cannot load it, so start from a libreyolo "
                "checkpoint, or load matching tensors with model.load_weights(state_dict).")
    if head == _ZIP_MAGIC or isinstance(e, EOFError):
        return (f"checkpoint '{path}' is truncated or corrupt ({path.stat().st_size} bytes that do not form "
                "a complete PyTorch file), probably from an interrupted copy or save; use another copy "
                "or save or download it again.")
    if head[:1] != b"\x80":  # neither a zip archive (torch.save) nor a pickle
        return (f"'{path}' is not a PyTorch checkpoint (it does not start like a file written by "
                "torch.save); check that the path names a .pt weights file.")
    return (f"'{path}' is a Python pickle that is not a readable PyTorch checkpoint (corrupt, or written "
            "by another tool); use a checkpoint saved by libreyolo.")


def _read_safetensors(path: Path) -> dict[str, Any]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get("libreyolo", "null"))
            sd = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # noqa: BLE001
        logger.debug("safe_open(%s) failed: %s: %s", path, type(e).__name__, e)
        raise CheckpointError(f"'{path}' is not a readable safetensors file (truncated, corrupt, or another "
                              "format with a .safetensors name); use another copy or save it again.") from e
    if meta is None:
        raise CheckpointError(f"'{path}' has no 'libreyolo' metadata, so it is not a libreyolo checkpoint; "
                              "load its tensors with model.load_weights(safetensors.torch.load_file(path)).")
    meta["names"] = {int(k): v for k, v in meta.get("names", {}).items()}
    return validate_checkpoint({"libreyolo": meta, "model": sd}, str(path))


def validate_checkpoint(obj: Any, where: str) -> dict[str, Any]:
    """Check the checkpoint contract (module docstring); one-sentence :class:`CheckpointError` if not."""
    if isinstance(obj, torch.Tensor):
        raise CheckpointError(f"'{where}' holds a single tensor, not a libreyolo checkpoint; "
                              "save a model with model.save(path).")
    if not isinstance(obj, dict):
        raise CheckpointError(f"'{where}' holds a {type(obj).__name__}, not a libreyolo checkpoint; "
                              "save a model with model.save(path).")
    if "libreyolo" not in obj:
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise CheckpointError(
                f"'{where}' is a plain state dict ({len(obj)} tensors without libreyolo metadata), so the "
                "architecture is unknown; build the model, e.g. LibreYOLO('LibreYOLO9t.pt', pretrained=False, "
                "nc=...), then call model.load_weights(torch.load(path, weights_only=True)).")
        keys = ", ".join(sorted(map(str, obj))[:5]) or "none"
        raise CheckpointError(
            f"'{where}' is not a libreyolo checkpoint (it has no 'libreyolo' metadata; its keys are {keys}), "
            "probably one written by another library; start from a libreyolo checkpoint, or load matching "
            "tensors with model.load_weights(state_dict).")
    if "model" not in obj:
        raise CheckpointError(f"libreyolo checkpoint '{where}' has no 'model' weights; save it again.")
    meta = obj["libreyolo"]
    if not isinstance(meta, dict):
        raise CheckpointError(f"libreyolo checkpoint '{where}' has unreadable metadata; save it again.")
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise CheckpointError(f"checkpoint '{where}' metadata lacks {', '.join(missing)}; save it again "
                              "with this version of libreyolo.")
    if not isinstance(obj["model"], dict) or not all(isinstance(v, torch.Tensor) for v in obj["model"].values()):
        raise CheckpointError(f"checkpoint '{where}': 'model' is not a dict of tensors; save it again.")
    return obj


def model_from_checkpoint(obj: dict[str, Any], where: str) -> Family:
    """Build the family named by the metadata and load its weights (strict)."""
    from ..errors import ConfigError
    from ..registry import get_family

    meta = obj["libreyolo"]
    try:
        cls = get_family(meta["family"])
        model = cls(size=meta["size"], task=meta["task"], nc=int(meta["nc"]),
                    names=meta["names"], imgsz=meta.get("imgsz"))
        if meta.get("arch"):
            set_arch = getattr(model, "set_arch", None)
            if set_arch is None:
                raise ConfigError(f"{model.FAMILY} has no architecture options, the file names {meta['arch']}")
            set_arch(**meta["arch"])
    except (ConfigError, TypeError) as e:
        raise CheckpointError(f"checkpoint {where!r} metadata does not describe a buildable model: {e}") from e
    if meta.get("quant"):
        from ..kernels.quant.model import restore_quant_structure

        try:
            restore_quant_structure(model, meta["quant"])
        except ConfigError as e:
            raise CheckpointError(f"checkpoint {where!r}: cannot rebuild its quantized layers: {e}") from e
    load_state_into(model, obj["model"], strict=True, where=where)
    model.ckpt_path = where
    model.train_args = dict(obj.get("train_args") or {})
    return model


def load_state_into(model: Family, state_dict: dict[str, torch.Tensor], *, strict: bool = True,
                    where: str = "state_dict") -> None:
    """Copy tensors into the model's existing parameters/buffers (addresses unchanged).

    Keys under the family's ``OPTIONAL_STATE_PREFIXES`` (parts added after older files were
    saved, e.g. PP-OCR's angle classifier) may be missing even when ``strict``: those tensors keep
    their freshly built values."""
    own = model.net.state_dict()
    optional = tuple(getattr(model, "OPTIONAL_STATE_PREFIXES", ()))
    kept, missing = [], []
    for k in own:
        if k not in state_dict:
            (kept if optional and k.startswith(optional) else missing).append(k)
    unexpected = [k for k in state_dict if k not in own]
    wrong = [k for k in own if k in state_dict and tuple(own[k].shape) != tuple(state_dict[k].shape)]
    if wrong or (strict and (missing or unexpected)):
        parts = []
        if wrong:
            k = wrong[0]
            parts.append(f"{len(wrong)} tensor(s) of the wrong shape, e.g. {k}: "
                         f"{tuple(state_dict[k].shape)} in the file vs {tuple(own[k].shape)} in the model")
        if strict and missing:
            parts.append(f"{len(missing)} missing, e.g. {missing[0]}")
        if strict and unexpected:
            parts.append(f"{len(unexpected)} unexpected, e.g. {unexpected[0]}")
        raise CheckpointError(
            f"weights in {where!r} do not match a {model.FAMILY}-{model.size} ({model.task}, nc={model.nc}): "
            + "; ".join(parts)
        )
    if kept:
        logger.info("%s: %d optional tensor(s) absent (an older file), kept as built, e.g. %s",
                    where, len(kept), kept[0])
    with torch.no_grad():
        for k, t in own.items():
            if k in state_dict:
                t.copy_(state_dict[k])
