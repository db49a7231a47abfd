"""``libreyolo.kernels``: a small run-time registry of pluggable kernel implementations.

See ``docs/kernels.md``. Public API (SPEC K-2)::

    active() -> dict[str, str]
    resolve(op, *args, **kwargs) -> Callable | None
    register(op, impl, *, name, predicate=None)
    unregister(op, name)
    clear_cache()

plus ``dispatch(op, *args, **kwargs)`` (resolve and run, with the K-7 fall-back) and
``define_slot(op, *, reference=None, providers=())`` for code that owns a slot's reference.
Importing this package imports no accelerated provider (no Triton, no Hub).
"""

from __future__ import annotations

from . import slots as _slots  # noqa: F401 - declares the in-tree slots (no provider imports)
from .registry import active, clear_cache, define_slot, dispatch, register, resolve, unregister

__all__ = ["active", "clear_cache", "define_slot", "dispatch", "register", "resolve", "unregister"]
