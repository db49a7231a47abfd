"""Read pickled checkpoints of other libraries without executing any code from them.

An Ultralytics (or original YOLOv9 / YOLOv7) ``.pt`` file is a ``torch.save`` zip archive whose
``data.pkl`` pickles whole Python objects (``DetectionModel``, ``Conv``, ``BatchNorm2d`` ...).
``torch.load(weights_only=True)`` refuses those, and a plain ``torch.load`` would import and run
whatever the file names. :func:`read_foreign_pickle` rebuilds only:

- tensors and parameters (from the archive's raw storages, via our own rebuild functions),
- plain containers (dict, OrderedDict, list, tuple, set, frozenset) and scalars,
- ``torch.Size`` (as a tuple) and torch dtypes (looked up by name, nothing imported).

Every other global becomes an inert :class:`Stub` subclass named after it: instantiating or
"calling" it only records its arguments, and its pickled state is kept as a plain dict. Nothing
the file names is imported, and no callable from the file is ever invoked, so a booby-trapped
pickle (a ``__reduce__`` returning ``os.system``) yields a harmless stub.

:func:`module_state_dict` walks a stub ``nn.Module`` tree (``_modules``, ``_parameters``,
``_buffers``) into a ``{name: Tensor}`` state dict, as ``Module.state_dict()`` would.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError

__all__ = ["Stub", "read_foreign_pickle", "module_state_dict", "pickle_globals"]


class Stub:
    """An object of a class the unpickler does not rebuild: its class name and data, inert.

    ``_stub_name`` is ``"module.QualName"`` of the original class; ``_stub_args`` the arguments
    it was constructed or called with; ``__dict__`` holds its pickled state (a dict state is
    merged in, any other state is kept under ``_stub_state``).
    """

    _stub_name = "?"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.__dict__["_stub_args"] = args
        if kwargs:
            self.__dict__["_stub_kwargs"] = kwargs

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict | None):
            # (dict state, slots state) as ``copyreg`` writes it for classes with __slots__
            for part in state:
                if isinstance(part, dict):
                    self.__dict__.update(part)
        elif isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.__dict__["_stub_state"] = state

    def __setitem__(self, key: Any, value: Any) -> None:  # SETITEMS on a dict subclass
        self.__dict__.setdefault("_stub_items", {})[key] = value

    def append(self, value: Any) -> None:  # APPENDS on a list subclass
        self.__dict__.setdefault("_stub_list", []).append(value)

    def extend(self, values: Any) -> None:
        for v in values:
            self.append(v)

    def __repr__(self) -> str:
        return f"<stub {self._stub_name}>"


_STUB_CLASSES: dict[str, type[Stub]] = {}


def _stub_class(module: str, name: str) -> type[Stub]:
    full = f"{module}.{name}"
    cls = _STUB_CLASSES.get(full)
    if cls is None:
        cls = type(name.replace(".", "_"), (Stub,), {"_stub_name": full, "__module__": "libreyolo.stub"})
        _STUB_CLASSES[full] = cls
    return cls


class _StorageType:
    """What a legacy storage class name (``torch.FloatStorage``) stands for: its dtype."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype


_STORAGE_DTYPES = {
    "DoubleStorage": torch.float64, "FloatStorage": torch.float32, "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
}


def _rebuild_tensor(storage: torch.Tensor, offset: int, size: Any, stride: Any, *_: Any) -> torch.Tensor:
    """``torch._utils._rebuild_tensor_v2`` without hooks: a view of the flat storage tensor."""
    if not isinstance(storage, torch.Tensor):
        raise pickle.UnpicklingError("a tensor refers to a storage that is not one")
    size, stride = tuple(size), tuple(stride)
    if len(size) == 0 and storage.numel() == 0:
        return storage.new_empty(())
    return storage.as_strided(size, stride, int(offset))


def _rebuild_parameter(data: Any, requires_grad: Any = False, *_: Any) -> Any:
    return data


def _rebuild_from_type(func: Any, new_type: Any, args: Any, state: Any) -> Any:
    if func in _SAFE_FUNCS:
        return func(*args)
    return _stub_class("torch._tensor", "_rebuild_from_type_v2")(func, new_type, args, state)


def _reconstructor(cls: Any, base: Any, state: Any = None) -> Any:
    """``copyreg._reconstructor``: only stubs and plain containers are ever instantiated."""
    if isinstance(cls, type) and issubclass(cls, Stub):
        return cls()
    if cls in (dict, OrderedDict, list, set):
        return cls()
    return _stub_class("copyreg", "_reconstructor")(cls, base, state)


def _size(dims: Any = ()) -> tuple[int, ...]:
    return tuple(int(d) for d in dims)


def _bytes(*args: Any) -> bytes:
    """``bytes(...)`` as protocol-2 pickles call it, minus ``bytes(n)`` (an n-byte allocation)."""
    if args and isinstance(args[0], int):
        raise pickle.UnpicklingError("bytes(<size>) is refused")
    return bytes(*args)


_SAFE_FUNCS = {_rebuild_tensor, _rebuild_parameter}

# (module, name) -> the object the unpickler hands out instead of importing it.
_ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch", "Size"): _size,
    ("collections", "OrderedDict"): OrderedDict,
    ("copyreg", "_reconstructor"): _reconstructor,
    ("copy_reg", "_reconstructor"): _reconstructor,
}
for _m in ("builtins", "__builtin__"):
    for _n, _v in (("set", set), ("frozenset", frozenset), ("dict", dict), ("list", list),
                   ("tuple", tuple), ("object", object), ("int", int), ("float", float),
                   ("bool", bool), ("str", str), ("bytes", _bytes), ("complex", complex)):
        _ALLOWED[(_m, _n)] = _v
for _n, _dt in _STORAGE_DTYPES.items():
    _ALLOWED[("torch", _n)] = _StorageType(_dt)
_ALLOWED[("torch", "UntypedStorage")] = _StorageType(torch.uint8)


def _find_global(module: str, name: str) -> Any:
    found = _ALLOWED.get((module, name))
    if found is not None:
        return found
    if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
        return getattr(torch, name)
    return _stub_class(module, name)


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, f: io.BytesIO, storages: dict[str, torch.Tensor] | None) -> None:
        super().__init__(f)
        self._storages = storages

    def find_class(self, module: str, name: str) -> Any:  # noqa: D401 - pickle API
        return _find_global(module, name)

    def persistent_load(self, pid: Any) -> Any:
        # torch zip format: ("storage", storage_type, key, location, numel)
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage") or self._storages is None:
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r:.80}")
        stype, key = pid[1], str(pid[2])
        dtype = stype.dtype if isinstance(stype, _StorageType) else (stype if isinstance(stype, torch.dtype) else None)
        if dtype is None:
            raise pickle.UnpicklingError(f"storage {key} has an unknown type")
        raw = self._storages.get(key)
        if raw is None:
            raise pickle.UnpicklingError(f"storage {key} is missing from the archive")
        return raw.view(dtype) if raw.numel() else torch.empty(0, dtype=dtype)


def _read_storages(z: zipfile.ZipFile, prefix: str) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    start = f"{prefix}data/"
    for info in z.infolist():
        if info.filename.startswith(start) and not info.is_dir():
            data = bytearray(z.read(info))
            out[info.filename[len(start):]] = (torch.frombuffer(data, dtype=torch.uint8) if data
                                               else torch.empty(0, dtype=torch.uint8))
    return out


def _archive(path: Path) -> tuple[zipfile.ZipFile, str]:
    z = zipfile.ZipFile(path)
    pkl = [n for n in z.namelist() if n.endswith("data.pkl") and n.count("/") <= 1]
    if not pkl:
        z.close()
        raise CheckpointError(f"'{path}' is a zip archive without data.pkl, so it is not a PyTorch checkpoint; "
                              "check that the path names a .pt weights file.")
    return z, pkl[0][: -len("data.pkl")]


def pickle_globals(path: str | Path, *, limit: int = 200) -> list[str]:
    """The ``module.name`` globals a ``torch.save`` archive's pickle refers to (nothing is run).

    Reads the opcodes with :mod:`pickletools` only. Returns ``[]`` for a file that is not a
    readable torch zip archive.
    """
    import pickletools

    try:
        z, prefix = _archive(Path(path))
        with z:
            data = z.read(prefix + "data.pkl")
    except (OSError, zipfile.BadZipFile, CheckpointError, KeyError):
        return []
    names: list[str] = []
    strings: list[str] = []
    try:
        for op, arg, _pos in pickletools.genops(data):
            if op.name == "GLOBAL":
                names.append(str(arg).replace(" ", "."))
            elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
                strings.append(str(arg))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                names.append(f"{strings[-2]}.{strings[-1]}")
            if len(names) >= limit:
                break
    except Exception:  # noqa: BLE001 - a damaged pickle just has no (more) readable globals
        pass
    return list(dict.fromkeys(names))


def _clip(e: BaseException) -> str:
    """An exception's text as one clause (first line, no sentence breaks, at most 120 characters)."""
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text.replace(". ", "; ")[:120].rstrip(".")


def read_foreign_pickle(path: str | Path) -> Any:
    """Unpickle a ``torch.save`` archive (zip) with the restricted unpickler (module docstring).

    Raises:
        CheckpointError: one sentence for a truncated / corrupt archive or an unreadable pickle.
    """
    path = Path(path)
    try:
        z, prefix = _archive(path)
        with z:
            data = z.read(prefix + "data.pkl")
            storages = _read_storages(z, prefix)
    except (zipfile.BadZipFile, EOFError, KeyError, OSError, RuntimeError) as e:
        raise CheckpointError(
            f"checkpoint '{path}' is truncated or corrupt (not a complete PyTorch zip archive: {_clip(e)}); use "
            "another copy or save or download it again.") from e
    try:
        return _RestrictedUnpickler(io.BytesIO(data), storages).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError,
            RuntimeError) as e:
        raise CheckpointError(f"'{path}' holds a pickle that cannot be read safely ({type(e).__name__}: "
                              f"{_clip(e)}); use another copy of the checkpoint.") from e


def module_state_dict(module: Any, prefix: str = "") -> OrderedDict[str, torch.Tensor]:
    """``state_dict()`` of a stub ``torch.nn.Module`` tree read by :func:`read_foreign_pickle`.

    Parameters first, then persistent buffers, then children, as ``nn.Module`` orders them.
    """
    out: OrderedDict[str, torch.Tensor] = OrderedDict()
    if not isinstance(module, Stub):
        return out
    d = module.__dict__
    for k, v in (d.get("_parameters") or {}).items():
        if isinstance(v, torch.Tensor):
            out[prefix + k] = v
    skip = d.get("_non_persistent_buffers_set") or set()
    for k, v in (d.get("_buffers") or {}).items():
        if isinstance(v, torch.Tensor) and k not in skip:
            out[prefix + k] = v
    for k, child in (d.get("_modules") or {}).items():
        out.update(module_state_dict(child, f"{prefix}{k}."))
    return out
