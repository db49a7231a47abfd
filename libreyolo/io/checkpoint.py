"""The checkpoint contract.

A checkpoint is a dict loaded with ``torch.load(weights_only=True)`` (no code is executed)::

    {"libreyolo": {"format": 1, "version": str, "family": str, "size": str, "task": str,
                   "nc": int, "names": {int: str}, "imgsz": int},
     "model": {param_name: Tensor},          # weights (EMA weights for trained models)
     ...}                                    # training state: epoch, optimizer, ema, train_args, ...

``.safetensors`` files hold the same weights with the metadata as JSON under the header key
``"libreyolo"``. Writes are atomic: a temporary file is written, fsynced and renamed, so a crash
mid-save never leaves a truncated checkpoint behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .._version import __version__
from ..errors import CheckpointError

if TYPE_CHECKING:
    from ..models._base.family import Family

FORMAT = 1
REQUIRED_META = ("family", "size", "task", "nc", "names")


def atomic_save(obj: Any, path: Path) -> Path:
    """``torch.save`` to ``path`` through a temporary file + fsync + rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp creates 0600; checkpoints are ordinary files
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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
    if getattr(model, "quant", None) is not None:
        from ..quant.model import quant_metadata

        meta["quant"] = quant_metadata(model)
    return meta


def save_model(model: Family, path: Path, *, extra: dict[str, Any] | None = None,
               state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write ``model`` (or ``state_dict`` in its place, e.g. EMA weights) with metadata."""
    if model.fused:
        raise CheckpointError("a fused model cannot be saved as a trainable checkpoint; save before fuse()")
    sd = state_dict if state_dict is not None else model.net.state_dict()
    obj: dict[str, Any] = {"libreyolo": model_metadata(model),
                           "model": {k: v.detach().cpu().clone() for k, v in sd.items()}}
    if extra:
        obj.update(extra)
    if Path(path).suffix == ".safetensors":
        from safetensors.torch import save_file

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        meta = {"libreyolo": json.dumps({**obj["libreyolo"], "names": {str(k): v for k, v in model.names.items()}})}
        tmp = Path(path).with_suffix(".safetensors.tmp")
        save_file({k: v.contiguous() for k, v in obj["model"].items()}, str(tmp), metadata=meta)
        os.replace(tmp, path)
        return Path(path)
    return atomic_save(obj, Path(path))


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint dict without executing code; raise :class:`CheckpointError` if unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    if path.suffix == ".safetensors":
        return _read_safetensors(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means an unusable file
        raise CheckpointError(
            f"cannot read checkpoint {str(path)!r}: {type(e).__name__}: {str(e).splitlines()[0][:200]} "
            "(corrupt, truncated, or not a libreyolo checkpoint)"
        ) from e
    return validate_checkpoint(obj, str(path))


def _read_safetensors(path: Path) -> dict[str, Any]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get("libreyolo", "null"))
            sd = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"cannot read safetensors file {str(path)!r}: {e}") from e
    if meta is None:
        raise CheckpointError(f"{str(path)!r} has no 'libreyolo' metadata: not a libreyolo checkpoint")
    meta["names"] = {int(k): v for k, v in meta.get("names", {}).items()}
    return validate_checkpoint({"libreyolo": meta, "model": sd}, str(path))


def validate_checkpoint(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict) or "libreyolo" not in obj or "model" not in obj:
        raise CheckpointError(f"{where!r} is not a libreyolo checkpoint (no 'libreyolo' metadata / 'model' weights)")
    meta = obj["libreyolo"]
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise CheckpointError(f"checkpoint {where!r} metadata lacks {', '.join(missing)}")
    if not isinstance(obj["model"], dict) or not all(isinstance(v, torch.Tensor) for v in obj["model"].values()):
        raise CheckpointError(f"checkpoint {where!r}: 'model' is not a dict of tensors")
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
    except ConfigError as e:
        raise CheckpointError(f"checkpoint {where!r} metadata does not describe a buildable model: {e}") from e
    if meta.get("quant"):
        from ..quant.model import restore_quant_structure

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
    """Copy tensors into the model's existing parameters/buffers (addresses unchanged)."""
    own = model.net.state_dict()
    missing = [k for k in own if k not in state_dict]
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
    with torch.no_grad():
        for k, t in own.items():
            if k in state_dict:
                t.copy_(state_dict[k])
