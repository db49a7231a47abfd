"""Darknet ``.weights`` of the YOLOv1 cfgs onto our YOLOv1: ``yolov1.cfg`` (size ``darknet``:
24 convs, ``[local]``, ``[connected]``), ``yolov1-tiny.cfg`` (``tiny``), and the paper's network
with BatchNorm convs (``b``: 24 convs, ``[connected] 4096``, ``[connected]``). The flat values
are laid onto the layers in cfg order (:mod:`libreyolo.models._darknet.convert`); the class count
is solved from the value count (only the last ``[connected]`` layer depends on it:
``(inputs + 1) * S * S`` values per class).

Layouts are measured on networks built on the ``meta`` device (shapes only): matching a file
never allocates a 270 M-parameter network.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from .._darknet.convert import FLAT_KEY, float_count, plausible, unpack
from .nn import SIZES, build_yolo1

SOURCES = ("darknet",)


def _layout_net(size: str, nc: int) -> torch.nn.Module:
    with torch.device("meta"):
        return build_yolo1(size=size, nc=nc)


def match_size(n_values: int, flat: object) -> tuple[str, int] | None:
    """``(size, nc)`` whose layout holds exactly ``n_values`` values with plausible BatchNorm variances."""
    for size in SIZES:
        net1 = _layout_net(size, 1)
        base = float_count(net1)
        per_class = (net1.fc2.in_features + 1) * net1.S * net1.S
        extra = n_values - base
        if extra < 0 or extra % per_class:
            continue
        if plausible(flat, net1):  # type: ignore[arg-type]
            return size, 1 + extra // per_class
    return None


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when the file's value count and variances fit one of the YOLOv1 layouts."""
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    if FLAT_KEY not in sd:
        return None
    flat = sd[FLAT_KEY].numpy()
    return match_size(int(flat.size), flat)


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Flat Darknet values -> our state dict (the layout of a net with ``own``'s size and class count)."""
    size = "b" if "fc1.weight" in own else "darknet" if "local.weight" in own else "tiny"
    boxes = 3 if size == "darknet" else 2
    nc = int(own["fc2.bias"].numel()) // 49 - 5 * boxes
    return unpack(src[FLAT_KEY].numpy(), _layout_net(size, nc), own)
