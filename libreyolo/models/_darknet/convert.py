"""Darknet ``.weights`` files (pjreddie/darknet, AlexeyAB/darknet) onto the Darknet-lineage nets.

The file is a header then one flat float32 array: per ``[convolutional]`` layer of the ``.cfg``,
in layer order, either (with ``batch_normalize=1``) the BatchNorm shift ``beta``, scale ``gamma``,
running mean and running variance (``n`` each) followed by the kernel ``n * c * k * k``, or (the
output convs) the conv bias then the kernel. A ``[connected]`` layer (YOLOv1) stores its bias
(``outputs``) then its ``outputs x inputs`` matrix (row-major: PyTorch's ``nn.Linear`` layout); a
``[local]`` layer its bias (one per output element) then one kernel block per output location
(:mod:`.local`). Nothing names the tensors: the layout is the network's, so a net lists its
layers in cfg order (``net.darknet_order()``, expanded by
:func:`~libreyolo.models._darknet.blocks.darknet_convs`).

Header: int32 major, minor, revision, then the number of images seen as uint64 when
``major * 10 + minor >= 2`` (uint32 before).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from ...errors import CheckpointError
from .blocks import darknet_convs

FLAT_KEY = "darknet.weights"  # the one tensor a read .weights file holds (ForeignWeights.state_dict)


def layout(net: nn.Module) -> list[tuple[str, str | None, tuple[int, ...], int]]:
    """Per layer in cfg order: (layer module name, BatchNorm module name or None, weight shape,
    values before the weight: ``4 n`` BatchNorm terms, or the bias size)."""
    names = {id(m): n for n, m in net.named_modules()}
    return [(names[id(c)], names[id(b)] if b is not None else None, tuple(c.weight.shape),
             4 * int(c.weight.shape[0]) if b is not None else int(c.bias.numel()))
            for c, b in darknet_convs(net.darknet_order())]


def float_count(net: nn.Module) -> int:
    """How many float32 values a ``.weights`` file of ``net`` holds after its header."""
    return sum(int(np.prod(shape)) + pre for _, _, shape, pre in layout(net))


def read_weights(path: str | Path) -> tuple[tuple[int, int, int, int], np.ndarray]:
    """(major, minor, revision, seen), float32 values of a ``.weights`` file."""
    raw = Path(path).read_bytes()
    if len(raw) < 20:
        raise CheckpointError(f"'{path}' is too short to be a Darknet .weights file")
    major, minor, revision = (int(v) for v in np.frombuffer(raw, np.int32, 3))
    wide = major * 10 + minor >= 2 and major < 1000 and minor < 1000
    off = 20 if wide else 16
    seen = int(np.frombuffer(raw, np.uint64 if wide else np.uint32, 1, 12)[0])
    if (len(raw) - off) % 4:
        raise CheckpointError(f"'{path}' is truncated: its float data is not a whole number of float32 values")
    return (major, minor, revision, seen), np.frombuffer(raw, np.float32, offset=off)


def unpack(flat: np.ndarray | Tensor, net: nn.Module, own: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The flat values -> a complete state dict for ``net`` (whose ``state_dict()`` is ``own``);
    buffers the file lacks (anchors, BatchNorm step counters) are taken from ``own``."""
    values = torch.as_tensor(np.asarray(flat, dtype=np.float32))
    want = float_count(net)
    if values.numel() != want:
        raise CheckpointError(f"the file holds {values.numel():,} values; this network's layout needs {want:,}")
    sd = {k: v.clone() for k, v in own.items()}
    pos = 0

    def take(n: int) -> Tensor:
        nonlocal pos
        t = values[pos:pos + n]
        pos += n
        return t

    for conv, bn, shape, pre in layout(net):
        if bn is not None:
            for key in ("bias", "weight", "running_mean", "running_var"):  # Darknet's order: beta, gamma, mean, var
                sd[f"{bn}.{key}"] = take(shape[0]).clone()
        else:
            sd[f"{conv}.bias"] = take(pre).view(own[f"{conv}.bias"].shape).clone()
        sd[f"{conv}.weight"] = take(int(np.prod(shape))).view(shape).clone()
    return sd


def pack(net: nn.Module) -> np.ndarray:
    """The flat float32 values of ``net`` in ``.weights`` order (the inverse of :func:`unpack`)."""
    mods = dict(net.named_modules())
    parts: list[np.ndarray] = []
    for conv, bn, _, _ in layout(net):
        c = mods[conv]
        if bn is not None:
            b = mods[bn]
            parts += [t.detach().float().cpu().numpy().ravel() for t in (b.bias, b.weight, b.running_mean, b.running_var)]
        else:
            parts.append(c.bias.detach().float().cpu().numpy().ravel())
        parts.append(c.weight.detach().float().cpu().numpy().ravel())
    return np.concatenate(parts).astype(np.float32)


def write_weights(net: nn.Module, path: str | Path, *, seen: int = 0) -> Path:
    """Write ``net`` as a Darknet ``.weights`` file (header 0.2.0, uint64 ``seen``)."""
    p = Path(path)
    with p.open("wb") as f:
        f.write(np.array([0, 2, 0], np.int32).tobytes())
        f.write(np.array([seen], np.uint64).tobytes())
        f.write(pack(net).tobytes())
    return p


def plausible(flat: np.ndarray, net: nn.Module, *, n_layers: int = 12) -> bool:
    """Whether the BatchNorm running variances of ``net``'s layout, up to the ``n_layers``-th or
    the first output conv (whose size depends on the class count), fall on non-negative values
    of ``flat`` (tells apart layouts with equal value counts)."""
    pos = 0
    for i, (_, bn, shape, _) in enumerate(layout(net)):
        if bn is None or i >= n_layers:
            break
        n = shape[0]
        var = flat[pos + 3 * n:pos + 4 * n]
        if var.size < n or (var < 0).any() or not np.isfinite(var).all():
            return False
        pos += 4 * n + int(np.prod(shape))
    return True


def match_nc(flat: np.ndarray, build: object) -> int | None:
    """The class count whose layout (``build(nc)``, a network) has exactly ``flat.size`` values and
    plausible variances, or None. Output convs hold ``na * (5 + nc) * (c_in + 1)`` values each."""
    net1 = build(1)  # type: ignore[operator]
    base = float_count(net1)
    per_class = int(net1.head.na) * sum(c.in_channels + 1 for c in net1.head.m)
    extra = flat.size - base
    if extra < 0 or extra % per_class:
        return None
    nc = 1 + extra // per_class
    return nc if plausible(flat, net1) else None
