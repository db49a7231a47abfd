"""Training callbacks: user functions the loop calls at fixed points of a run.

``model.train(..., callbacks={"on_fit_epoch_end": fn})`` (a function or a list of them per event).
Every callback is called ``fn(trainer, info)`` on the main process (rank 0 under DDP), in the order
given, with ``info`` a plain dict:

=====================  ===========================================================================
event                  when, and ``info``
=====================  ===========================================================================
``on_train_start``     set-up done, before the first epoch: the run's arguments (``cfg.to_dict()``)
``on_train_epoch_end`` after an epoch's training batches, before validation: ``{"epoch": N, <loss
                       name>: mean loss, ...}`` (``N`` 1-based, as in ``results.csv``)
``on_fit_epoch_end``   after validation and the checkpoint: the epoch's ``results.csv`` row
                       (losses, ``metrics/...``, ``lr/pg<i>``, times)
``on_train_end``       after the last epoch (also an early stop): the result ``train()`` returns
=====================  ===========================================================================

An exception raised by a callback stops the run like any other error (``last.pt`` stays
resumable). Functions cannot travel to the processes a multi-GPU launch starts, so callbacks
with ``device="0,1"`` raise :class:`~libreyolo.errors.ConfigError`; inside a torchrun world the
script's own callbacks run on rank 0.

Example:
    >>> seen = []
    >>> cbs = Callbacks({"on_fit_epoch_end": lambda trainer, row: seen.append(row["epoch"])})
    >>> cbs.run("on_fit_epoch_end", None, {"epoch": 1})
    >>> seen
    [1]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError, check_keys

EVENTS = ("on_train_start", "on_train_epoch_end", "on_fit_epoch_end", "on_train_end")
Callback = Callable[[Any, dict[str, Any]], None]


class Callbacks:
    """The callbacks of one run, by event (see the module docstring)."""

    def __init__(self, given: Mapping[str, Callback | Sequence[Callback]] | None = None) -> None:
        self.by_event: dict[str, list[Callback]] = {e: [] for e in EVENTS}
        given = dict(given or {})
        check_keys(given, list(EVENTS), what="callback event")
        for event, fns in given.items():
            for fn in (fns if isinstance(fns, (list, tuple)) else [fns]):
                self.add(event, fn)

    def add(self, event: str, fn: Callback) -> None:
        """Call ``fn(trainer, info)`` at ``event``."""
        check_keys({event: fn}, list(EVENTS), what="callback event")
        if not callable(fn):
            raise ConfigError(f"callback for {event} must be callable fn(trainer, info), got {fn!r}")
        self.by_event[event].append(fn)

    def append(self, fn: Callback) -> None:
        """``add("on_fit_epoch_end", fn)`` (the per-epoch ``fn(trainer, row)`` hook of earlier versions)."""
        self.add("on_fit_epoch_end", fn)

    def run(self, event: str, trainer: Any, info: dict[str, Any]) -> None:
        for fn in self.by_event[event]:
            fn(trainer, info)

    def __bool__(self) -> bool:
        return any(self.by_event.values())
