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


# --------------------------------------------------------------------------- tensor trees
# A stage's input and output is a tensor or a (nested) tuple / list / dict of tensors; other
# leaves (None, numbers, strings) are constants. A captured stage needs the tensors as a flat list
# (its static buffers) and the structure to rebuild the value from them.

TreeSpec = tuple  # ("tensor",) | ("tuple"|"list", (spec, ...)) | ("dict", (key, ...), (spec, ...)) | ("const", value)


def flatten(tree: Any) -> tuple[list[Any], TreeSpec]:
    """Split ``tree`` into its tensor leaves (depth-first order) and a spec to rebuild it.

    Example:
        >>> import torch
        >>> leaves, spec = flatten((torch.zeros(1), {"a": torch.ones(2)}, None))
        >>> len(leaves)
        2
    """
    import torch

    leaves: list[Any] = []

    def walk(node: Any) -> TreeSpec:
        if isinstance(node, torch.Tensor):
            leaves.append(node)
            return ("tensor",)
        if isinstance(node, (tuple, list)):
            return ("tuple" if isinstance(node, tuple) else "list", tuple(walk(v) for v in node))
        if isinstance(node, dict):
            keys = tuple(node)
            return ("dict", keys, tuple(walk(node[k]) for k in keys))
        return ("const", node)

    spec = walk(tree)
    return leaves, spec


def unflatten(spec: TreeSpec, leaves: list[Any]) -> Any:
    """Inverse of :func:`flatten`: rebuild the tree from ``spec`` with ``leaves`` in order."""
    it = iter(leaves)

    def build(s: TreeSpec) -> Any:
        kind = s[0]
        if kind == "tensor":
            return next(it)
        if kind == "tuple":
            return tuple(build(c) for c in s[1])
        if kind == "list":
            return [build(c) for c in s[1]]
        if kind == "dict":
            return {k: build(c) for k, c in zip(s[1], s[2], strict=False)}
        return s[1]

    out = build(spec)
    if next(it, None) is not None:
        raise ValueError("unflatten: more leaves than the spec has tensor slots")
    return out
