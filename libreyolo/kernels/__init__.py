"""``libreyolo.kernels``: a small run-time registry of pluggable kernel implementations.

See ``docs/kernels.md``. Public API (SPEC K-2)::

    active() -> dict[str, str]
    resolve(op, *args, **kwargs) -> Callable | None
    register(op, impl, *, name, predicate=None)
    unregister(op, name)
    clear_cache()
"""

from __future__ import annotations

from . import slots as _slots  # noqa: F401 - declares the in-tree slots (no provider imports)
from .registry import active, clear_cache, dispatch, register, resolve, unregister

__all__ = ["active", "clear_cache", "dispatch", "register", "resolve", "unregister"]
