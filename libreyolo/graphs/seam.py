"""Seams (SPEC G-9): a network described as a chain of stages, some capturable, some eager.

A family whose whole forward can be captured has one stage. A family with a stage a graph cannot
hold (data-dependent shapes, an op that replays wrongly) splits at a verified seam: capturable
stages replay, eager stages run eagerly, and the chained output equals all-eager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One link of the forward chain.

    fn maps the previous stage's output (the preprocessed batch for the first stage) to this
    stage's output: a tensor or a tuple/list of tensors.
    """

    name: str
    fn: Callable[[Any], Any]
    capturable: bool = True
    reason: str = ""  # why an eager stage is eager


def run_eager(stages: list[Stage], x: Any) -> Any:
    """Run the chain eagerly: the contract every graph replay must equal bit-for-bit."""
    for stage in stages:
        x = stage.fn(x)
    return x
