"""Weights of the PIDNet reference implementation (XuJiacong/PIDNet) onto ours.

The reference's module names are ours almost everywhere (``conv1``, ``layer1``-``layer5``,
``layer3_``-``layer5_``, ``layer3_d``-``layer5_d``, ``compression3/4``, ``pag3/4.f_x/f_y``,
``diff3/4``, ``dfm.conv_p/conv_i``, ``seghead_p``, ``seghead_d``, ``final_layer``). The differences:
a training wrapper's ``model.`` (or DataParallel's ``module.``) prefix is dropped, and in the pooling
module ``spp.scale<k>`` (k = 1..4) -> ``spp.scales.<k-1>`` and ``spp.scale_process`` ->
``spp.process`` (``spp.scale0``, ``spp.compression``, ``spp.shortcut`` keep their names). Every
tensor keeps its shape; the loss's buffers of a training checkpoint (``loss.*``) are dropped.

The reference's ``.pt`` / ``.pth.tar`` files on disk are recognised by :mod:`libreyolo.convert.pidnet`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all

SOURCES = ("pidnet",)
PLANES = {32: "s"}  # conv1 width -> size (PIDNet-M / L, planes 64, are not built here)


def rename_key(k: str) -> str | None:
    """Our name for one reference key (module docstring); ``None`` for a key that is dropped.

    Example:
        >>> rename_key("model.spp.scale3.1.running_mean")
        'spp.scales.2.1.running_mean'
        >>> rename_key("layer3_d.conv1.weight")
        'layer3_d.conv1.weight'
    """
    k = re.sub(r"^(module\.)?(model\.)?", "", k)
    if k.startswith("loss."):
        return None
    k = re.sub(r"^spp\.scale([1-4])\.", lambda m: f"spp.scales.{int(m[1]) - 1}.", k)
    k = re.sub(r"^spp\.scale_process\.", "spp.process.", k)
    if not re.match(r"(conv1|layer[1-5](_|_d)?|compression[34]|pag[34]|diff[34]|spp|dfm|seghead_[pd]|final_layer)\.", k):
        raise CheckpointError(f"reference key {k!r} is not part of a PIDNet this converter knows.")
    return k


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for a reference PIDNet state dict, else ``None``."""
    sd = {re.sub(r"^(module\.)?(model\.)?", "", k): v for k, v in getattr(fw, "state_dict", {}).items()}
    stem, cls = sd.get("conv1.0.weight"), sd.get("final_layer.conv2.weight")
    if stem is None or cls is None or "dfm.conv_p.0.weight" not in sd:
        return None
    size = PLANES.get(int(stem.shape[0]))
    if size is None:
        raise CheckpointError(f"this PIDNet (planes {int(stem.shape[0])}) is none of the sizes {', '.join(PLANES.values())}"
                              " (PIDNet-S, planes 32)")
    if "seghead_p.conv2.weight" not in sd:
        raise CheckpointError("this PIDNet state dict has no auxiliary heads (seghead_p / seghead_d); libreyolo reads "
                              "the reference's training checkpoints (augment=True)")
    return size, int(cls.shape[0])


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference PIDNet state dict -> ours (first misfit named)."""
    return fit(rename_all(src, rename_key), own)
