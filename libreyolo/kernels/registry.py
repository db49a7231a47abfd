"""The run-time kernel registry (SPEC K-1..K-4, K-7, K-11).

An *op slot* is a name such as ``"fake_quant_fp8"`` or ``"ms_deform_attn"``. Each slot may have
a portable *reference* implementation (defined in ``libreyolo/quant`` or ``libreyolo/layers``)
and any number of registered implementations. :func:`resolve` returns the newest registered
implementation whose predicate holds for the call's arguments, else the reference (or ``None``
for slots without one: GEMM and attention callers keep their own portable path, K-6).

Predicates receive the same positional and keyword arguments as the implementation. Called
with no arguments (``resolve(op)``, :func:`active`), a predicate answers whether the
implementation can run on this machine at all; a predicate whose signature needs arguments is
taken to apply then. A predicate that raises is warned about once and treated as "does not
apply" (K-3).

Resolutions are memoised until :func:`clear_cache` or any registry change, keyed on the op,
the override variables, the execution context (tracing / compiling / exporting / ONNX export /
CUDA-graph capture) and a signature of the arguments. The signature of a tensor is its device
(type and index), dtype, ``requires_grad``, rank, contiguity and, per dimension, whether it is
a multiple of 16; ``bool``/``int``/``str``/``None`` values and ``torch.dtype`` count by value,
anything else by type. **A predicate must decide from these features only**; anything finer
(exact sizes) must be checked by the implementation, which may fall back on its own.

Accelerated providers are imported lazily on the first resolution of their slot and never
under ``LIBREYOLO_KERNELS=off|reference|skip`` (K-4), nor during a CUDA-graph capture (K-12).
An out-of-tree package ``libreyolo_kernels``, when installed, is imported once the same way and
can self-register with :func:`register` (K-11).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import env
from ..errors import ConfigError, LibreYOLOError

logger = logging.getLogger(__name__)

Predicate = Callable[..., bool]

REFERENCE_VALUES = frozenset({"off", "reference", "skip"})
#: names an implementation may not take: they are override values or answers of ``active()``.
RESERVED_NAMES = REFERENCE_VALUES | {"unavailable"}
OUT_OF_TREE_PACKAGE = "libreyolo_kernels"
_CACHE_MAX = 4096  # memoised resolutions; the cache is dropped whole when it grows past this


@dataclass
class _Impl:
    name: str
    fn: Callable[..., Any]
    predicate: Predicate | None


@dataclass
class _Slot:
    reference: Callable[..., Any] | None = None
    reference_name: str = "reference"
    impls: list[_Impl] = field(default_factory=list)  # newest first


_lock = threading.RLock()
_slots: dict[str, _Slot] = {}
_providers: dict[str, list[str]] = {}  # op -> provider modules imported on first use
_imported_providers: set[str] = set()
_cache: dict[tuple, tuple[str, Callable[..., Any] | None]] = {}
_warned: set[tuple[str, str]] = set()
_disabled: set[tuple[str, str]] = set()  # (op, name) implementations that failed at run time
_out_of_tree_done = False


# ---------------------------------------------------------------------------------- declaring
def define_slot(
    op: str,
    *,
    reference: Callable[..., Any] | None = None,
    reference_name: str = "reference",
    providers: tuple[str, ...] = (),
) -> None:
    """Declare an op slot, its reference implementation and the modules that register its
    accelerated implementations (imported lazily, never under ``LIBREYOLO_KERNELS=off``).

    Example:
        >>> define_slot("my_slot", reference=lambda x: x)
    """
    if not isinstance(op, str) or not op:
        raise ConfigError(f"kernel op must be a non-empty string, got {op!r}")
    if reference is not None and not callable(reference):
        raise ConfigError(f"define_slot({op!r}): reference {reference!r} is not callable")
    with _lock:
        slot = _slots.setdefault(op, _Slot())
        if reference is not None:
            slot.reference = reference
            slot.reference_name = reference_name
        known = _providers.setdefault(op, [])
        known.extend(p for p in providers if p not in known)
        _cache.clear()


def register(
    op: str, impl: Callable[..., Any], *, name: str, predicate: Predicate | None = None
) -> None:
    """Register ``impl`` for ``op`` under ``name``; it is tried before older registrations.

    Registering a name that ``op`` already has replaces it (and moves it to the front). An
    unknown ``op`` creates a slot without reference.

    Example:
        >>> import libreyolo.kernels as kernels
        >>> kernels.register("my_op", lambda x: x, name="mine")
        >>> kernels.unregister("my_op", "mine")
    """
    if not isinstance(op, str) or not op:
        raise ConfigError(f"kernel op must be a non-empty string, got {op!r}")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"register({op!r}, ...) needs a non-empty name=, got {name!r}")
    if name.strip().lower() in RESERVED_NAMES:
        raise ConfigError(
            f"register({op!r}, name={name!r}): {sorted(RESERVED_NAMES)} are reserved "
            "(LIBREYOLO_KERNELS values / active() answers); choose another name"
        )
    if not callable(impl):
        raise ConfigError(f"register({op!r}, name={name!r}): impl {impl!r} is not callable")
    if predicate is not None and not callable(predicate):
        raise ConfigError(f"register({op!r}, name={name!r}): predicate {predicate!r} is not callable")
    with _lock:
        slot = _slots.setdefault(op, _Slot())
        slot.impls = [i for i in slot.impls if i.name != name]
        slot.impls.insert(0, _Impl(name, impl, predicate))
        _disabled.discard((op, name))
        _cache.clear()
    logger.debug("kernel %s: registered %s", op, name)


def unregister(op: str, name: str) -> None:
    """Remove the implementation ``name`` of ``op``; unknown op or name raises ``ConfigError``."""
    with _lock:
        slot = _slots.get(op)
        if slot is None:
            raise ConfigError(f"unregister: unknown kernel op {op!r}; known ops: {sorted(_slots)}")
        names = [i.name for i in slot.impls]
        if name not in names:
            raise ConfigError(
                f"unregister: op {op!r} has no implementation {name!r}; registered: {names}"
            )
        slot.impls = [i for i in slot.impls if i.name != name]
        _disabled.discard((op, name))
        _cache.clear()


def clear_cache() -> None:
    """Drop memoised resolutions (they are also dropped on every registry change)."""
    with _lock:
        _cache.clear()


# ---------------------------------------------------------------------------------- overrides
def override() -> str | None:
    """The effective override: ``LIBREYOLO_KERNELS``, else ``LIBREYOLO_QUANT_KERNELS`` (K-4)."""
    value = env.get("LIBREYOLO_KERNELS")
    if value is None:
        value = env.get("LIBREYOLO_QUANT_KERNELS")
    value = value.strip().lower() if value else None
    return value or None


def reference_only() -> bool:
    """True under ``LIBREYOLO_KERNELS=off|reference|skip`` (or the alias)."""
    return override() in REFERENCE_VALUES


def hub_kernels_enabled() -> bool:
    """False under ``LIBREYOLO_HUB_KERNELS=0/false/off/no`` or a reference-only override (K-4)."""
    return env.get_flag("LIBREYOLO_HUB_KERNELS") and not reference_only()


# ---------------------------------------------------------------------------------- introspection
def ops() -> list[str]:
    """Every declared or registered slot."""
    _load_providers_all()
    return sorted(_slots)


def implementations(op: str) -> list[str]:
    """Names registered for ``op``, newest first."""
    _load_providers(op)
    slot = _slots.get(op)
    return [i.name for i in slot.impls] if slot else []


# ---------------------------------------------------------------------------------- internals
def _context_key() -> tuple[bool, ...]:
    from .context import execution_context

    return execution_context()


def _arg_key(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("T", value.device.type, value.device.index, value.dtype, value.requires_grad,
                value.dim(), value.is_contiguous(), tuple(d % 16 == 0 for d in value.shape))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_arg_key(v) for v in value))
    if value is None or isinstance(value, (bool, int, str, torch.dtype)):
        return (type(value).__name__, value)
    return (type(value).__name__,)


def _signature(args: tuple, kwargs: dict) -> tuple:
    return (
        tuple(_arg_key(a) for a in args),
        tuple(sorted((k, _arg_key(v)) for k, v in kwargs.items())),
    )


def _warn_once(key: tuple[str, str], message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    logger.warning(message)


def _load_out_of_tree() -> None:
    global _out_of_tree_done
    if _out_of_tree_done:
        return
    _out_of_tree_done = True
    try:
        importlib.import_module(OUT_OF_TREE_PACKAGE)
        logger.debug("kernels: imported out-of-tree package %s", OUT_OF_TREE_PACKAGE)
    except ModuleNotFoundError as e:
        if e.name != OUT_OF_TREE_PACKAGE:
            _warn_once(("<import>", OUT_OF_TREE_PACKAGE), f"{OUT_OF_TREE_PACKAGE} failed to import: {e}")
    except Exception as e:  # noqa: BLE001 - a broken third-party package must not break us (K-3)
        _warn_once(("<import>", OUT_OF_TREE_PACKAGE), f"{OUT_OF_TREE_PACKAGE} failed to import: {e!r}")


def _capturing() -> bool:
    from .context import is_capturing

    return is_capturing()


def _load_providers(op: str) -> None:
    if reference_only():
        return
    pending = [m for m in _providers.get(op, ()) if m not in _imported_providers]
    if (not pending and _out_of_tree_done) or _capturing():
        return  # nothing to do, or never import inside a CUDA-graph capture (K-12)
    with _lock:
        for module in pending:
            if module in _imported_providers:
                continue
            _imported_providers.add(module)
            try:
                importlib.import_module(module)
            except Exception as e:  # noqa: BLE001 - an optional provider is a fallback, never an error
                logger.debug("kernel provider %s not available: %r", module, e)
        _load_out_of_tree()


def _load_providers_all() -> None:
    for op in list(_providers):
        _load_providers(op)


def _needs_args(predicate: Predicate) -> bool:
    try:
        inspect.signature(predicate).bind()
    except TypeError:
        return True
    except ValueError:  # builtins without a signature
        return False
    return False


def _holds(op: str, impl: _Impl, args: tuple, kwargs: dict) -> bool:
    if impl.predicate is None:
        return True
    if not args and not kwargs and _needs_args(impl.predicate):
        return True  # a machine-level question to an argument-level predicate
    try:
        return bool(impl.predicate(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - K-3: a raising predicate is "does not apply"
        _warn_once(
            (op, impl.name),
            f"kernel {op!r}: predicate of implementation {impl.name!r} raised {e!r}; "
            "treating it as not applicable and using the next implementation",
        )
        return False


def _choose(op: str, args: tuple, kwargs: dict) -> tuple[str, Callable[..., Any] | None]:
    slot = _slots.get(op)
    if slot is None:
        return "unavailable", None
    ov = override()
    if ov not in REFERENCE_VALUES:
        for impl in slot.impls:
            if (op, impl.name) in _disabled:
                continue
            if ov is not None and impl.name.lower() != ov:
                continue
            if _holds(op, impl, args, kwargs):
                return impl.name, impl.fn
    if slot.reference is not None:
        return slot.reference_name, slot.reference
    return "unavailable", None


def _resolve(op: str, args: tuple, kwargs: dict) -> tuple[str, Callable[..., Any] | None]:
    _load_providers(op)
    key = (op, _signature(args, kwargs), _context_key(), override(), env.get_flag("LIBREYOLO_HUB_KERNELS"))
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            return hit
        name, fn = _choose(op, args, kwargs)
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[key] = (name, fn)
    logger.debug("kernel %s -> %s", op, name)
    return name, fn


# ---------------------------------------------------------------------------------- public
def resolve(op: str, *args: Any, **kwargs: Any) -> Callable[..., Any] | None:
    """The callable that will run ``op`` for these arguments, or ``None`` when nothing applies
    and the slot has no reference (or the slot is unknown).

    Example:
        >>> import libreyolo.kernels as kernels
        >>> fn = kernels.resolve("fake_quant_fp8")
    """
    return _resolve(op, args, kwargs)[1]


def resolve_name(op: str, *args: Any, **kwargs: Any) -> str:
    """Name of the implementation :func:`resolve` picks (``"unavailable"`` if none)."""
    return _resolve(op, args, kwargs)[0]


def active() -> dict[str, str]:
    """``{slot: chosen implementation name or "unavailable"}`` for this machine.

    Example:
        >>> import libreyolo.kernels as kernels
        >>> kernels.active()["fake_quant_fp8"] in ("reference", "triton")
        True
    """
    _load_providers_all()
    with _lock:
        slots = sorted(_slots)
    return {op: _resolve(op, (), {})[0] for op in slots}


def disable(op: str, name: str, reason: str) -> None:
    """Disable an implementation for the rest of the process with one warning (K-7)."""
    with _lock:
        _disabled.add((op, name))
        _cache.clear()
    _warn_once(
        (op, name + ":disabled"),
        f"kernel {op!r}: implementation {name!r} disabled for this process ({reason}); "
        "falling back to the next implementation",
    )


def dispatch(op: str, *args: Any, **kwargs: Any) -> Any:
    """Resolve and run ``op``.

    If a registered implementation raises (anything but a libreyolo error about the caller's
    input), it is disabled for the process with one warning and the call is retried on the
    next choice (K-7). Raises ``ConfigError`` when nothing applies and the slot has no reference.
    """
    while True:
        name, fn = _resolve(op, args, kwargs)
        if fn is None:
            raise ConfigError(
                f"kernel op {op!r} has no implementation that applies to these inputs and no "
                "reference; callers of reference-less slots must check resolve() first (K-6)"
            )
        slot = _slots[op]
        if fn is slot.reference and name == slot.reference_name:
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        except LibreYOLOError:
            raise
        except Exception as e:  # noqa: BLE001 - K-7: a failing kernel falls back, once
            disable(op, name, f"raised {type(e).__name__}: {str(e)[:200]}")
