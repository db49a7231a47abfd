"""Tensor-level helpers the family converters share (no family is named here).

They live under ``models/_base`` (floor 2) so that the families' ``convert.py`` modules need not
import :mod:`libreyolo.convert` (floor 4); ``libreyolo.convert.rules`` re-exports them.

- :func:`fit`: place renamed reference tensors onto our state dict, reshaping only where the
  two layouts differ by size-1 axes (``Linear`` vs 1x1 ``Conv2d``, ``(C,)`` vs ``(C, 1, 1)``
  layer scales), and raise naming the first key that does not fit;
- :func:`fold_bn_eps`: make a BatchNorm with another ``eps`` compute the same function, by
  rescaling its weight (``gamma * sqrt(var + eps_ours) / sqrt(var + eps_ref)``), exact in eval.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import Tensor

from ...errors import CheckpointError

COUNTER = "num_batches_tracked"


def _squeezed(shape: Iterable[int]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def rename_all(src: Mapping[str, Tensor], rename: Callable[[str], str | None]) -> dict[str, tuple[str, Tensor]]:
    """``{our_key: (reference_key, tensor)}``; ``rename`` returns ``None`` to drop a key and raises
    :class:`CheckpointError` for a key it does not know."""
    out: dict[str, tuple[str, Tensor]] = {}
    for k, v in src.items():
        if k.endswith(COUNTER):
            continue
        new = rename(k)
        if new is None:
            continue
        if new in out:
            raise CheckpointError(f"reference keys {out[new][0]!r} and {k!r} both map to {new!r}.")
        out[new] = (k, v)
    return out


def fit(renamed: Mapping[str, tuple[str, Tensor]], own: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A complete state dict for ``own`` from ``renamed`` (see :func:`rename_all`).

    Raises:
        CheckpointError: the first reference key with no place or another shape, or the first of
            our tensors nothing filled.
    """
    out: dict[str, Tensor] = {}
    for new, (ref_key, v) in renamed.items():
        if new not in own:
            raise CheckpointError(f"reference key {ref_key!r} (ours would be {new!r}) has no place in this network.")
        target = own[new]
        if tuple(v.shape) != tuple(target.shape):
            if v.numel() != target.numel() or _squeezed(v.shape) != _squeezed(target.shape):
                raise CheckpointError(f"reference key {ref_key!r} has shape {tuple(v.shape)}, ours {new!r} has "
                                      f"{tuple(target.shape)}.")
            v = v.reshape(target.shape)
        out[new] = v.detach().to(target.dtype) if v.is_floating_point() else v.detach()
    missing = [k for k in own if k not in out and not k.endswith(COUNTER)]
    if missing:
        raise CheckpointError(f"the reference state dict has nothing for {missing[0]!r} "
                              f"({len(missing)} of our tensors unfilled).")
    for k in own:
        if k.endswith(COUNTER):
            out[k] = torch.zeros_like(own[k])
    return out


@torch.no_grad()
def fold_bn_eps(sd: dict[str, Tensor], *, eps_ref: float, eps_ours: float) -> dict[str, Tensor]:
    """Rescale every BatchNorm weight in ``sd`` (keys ``<p>.weight`` next to ``<p>.running_var``)
    so that eval-mode BatchNorm with ``eps_ours`` equals the reference's with ``eps_ref``."""
    if eps_ref == eps_ours:
        return sd
    out = dict(sd)
    for k, var in sd.items():
        if not k.endswith(".running_var"):
            continue
        w = k[: -len("running_var")] + "weight"
        if w in sd:
            v = var.double()
            out[w] = (sd[w].double() * torch.sqrt(v + eps_ours) / torch.sqrt(v + eps_ref)).to(sd[w].dtype)
    return out


def base_arch(arch: str) -> str:
    """timm architecture without its pretrained tag or hub prefix: ``timm/resnet18.a1_in1k`` ->
    ``resnet18``."""
    return re.sub(r"^(hf[-_]hub:)?(timm/)?", "", arch.strip()).split(".", 1)[0].lower()


KeyRule = tuple[str, Callable[["re.Match[str]"], "str | None"]]


def rename_by_rules(k: str, rules: Iterable[KeyRule], *, what: str) -> str:
    """Our name for reference key ``k``: the first rule ``(pattern, build)`` whose pattern matches
    all of ``k`` and whose ``build(match)`` gives a name (``None``: the rule passes ``k`` on);
    a :class:`CheckpointError` naming ``k`` and ``what`` (the reference) when none does.

    Example:
        >>> rules = [(r"fc\\.(\\w+)", lambda m: f"head.{m[1]}")]
        >>> rename_by_rules("fc.bias", rules, what="a demo net")
        'head.bias'
    """
    for pattern, build in rules:
        if (m := re.fullmatch(pattern, k)) and (name := build(m)) is not None:
            return name
    raise CheckpointError(f"reference key {k!r} is not part of {what} this converter knows.")
