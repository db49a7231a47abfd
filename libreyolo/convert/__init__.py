"""Weights from other libraries: recognise a foreign checkpoint, read it safely, convert it.

Readers (one module per origin) turn a file into :class:`ForeignWeights` — a plain
``{name: Tensor}`` state dict plus what the file says about itself — without executing code
from it (:mod:`.unpickle` for pickled model objects, ``weights_only=True`` / safetensors for
plain state dicts). The mapping onto our networks lives with each family, in
``libreyolo/models/<family>/convert.py``, which offers:

- ``SOURCES``: the origins it can read (``"ultralytics"``, ``"timm"``, ...);
- ``match(foreign) -> (size, nc) | None``: whether this checkpoint is of that family;
- ``EXPLICIT_ONLY`` (optional): match only when the family is asked for by name (a second family
  of the same network); a callable ``(foreign) -> bool`` decides it per file;
- ``convert_state_dict(src, own, *, arch) -> state dict``: the renamed (reshaped) tensors for a
  network whose ``state_dict()`` is ``own`` (``arch`` is what the file calls its architecture), raising :class:`~libreyolo.errors.CheckpointError` that
  names the first key that does not fit.

The dispatcher asks every registered family (no family is named here).

Example:
    >>> from libreyolo.convert import detect_format
    >>> detect_format("LibreYOLO9t.pt") is None  # a libreyolo checkpoint is not foreign
    True
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..errors import CheckpointError

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

__all__ = ["ForeignWeights", "detect_format", "read_foreign", "convert_foreign", "load_foreign"]


@dataclass(kw_only=True)
class ForeignWeights:
    """A checkpoint of another library, read into tensors.

    source: the origin, e.g. ``"ultralytics"``, ``"timm"``.
    arch: what the file calls its architecture (``"yolov9t"``, ``"resnet18"``), or ``""``.
    state_dict: the reference's own tensor names (``model.0.conv.weight``, ``conv1.weight``).
    names: class names when the file has them.
    licence: the licence the weights are usually published under (informational).
    """

    source: str
    arch: str
    state_dict: dict[str, torch.Tensor]
    path: str
    names: dict[int, str] | None = None
    licence: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


_LABELS = {"ultralytics": "an Ultralytics", "timm": "a timm", "transformers": "a transformers", "yolox": "a YOLOX",
           "basicsr": "a BasicSR (NAFNet / Real-ESRGAN)", "super_gradients": "a super-gradients",
           "mmdet": "an mmdetection RTMDet",
           "darknet": "a Darknet .weights", "depth_anything_3": "a Depth Anything 3", "birefnet": "a BiRefNet",
           "dinov2_seg": "a DINOv2 linear segmentation head", "pidnet": "a PIDNet reference",
           "dfine_release": "an original D-FINE / DEIM release"}


def _readers() -> tuple[Any, ...]:
    from . import basicsr as basicsr_reader
    from . import birefnet as birefnet_reader
    from . import darknet as darknet_reader
    from . import depth_anything3 as da3_reader
    from . import dfine_release as dfine_release_reader
    from . import dinov2_seg as dinov2_seg_reader
    from . import mmdet as mmdet_reader
    from . import pidnet as pidnet_reader
    from . import super_gradients as sg_reader
    from . import timm as timm_reader
    from . import transformers as hf_reader
    from . import ultralytics as ul_reader
    from . import yolox as yolox_reader

    return (ul_reader, timm_reader, birefnet_reader, hf_reader, yolox_reader, basicsr_reader, sg_reader, mmdet_reader,
            darknet_reader, da3_reader, dinov2_seg_reader, pidnet_reader,
            dfine_release_reader)  # birefnet before transformers: its Hub files may have a config.json


def detect_format(path: str | Path) -> str | None:
    """The origin of a foreign checkpoint file (``"ultralytics"``, ``"timm"``), or ``None`` when
    it is not one this package reads (a libreyolo checkpoint, a missing file, anything else)."""
    p = Path(path)
    if not p.is_file():
        return None
    for reader in _readers():
        if reader.recognise(p):
            return reader.SOURCE
    return None


def read_foreign(path: str | Path, *, source: str | None = None) -> ForeignWeights:
    """Read ``path`` with the reader of its origin (detected when ``source`` is None)."""
    readers = {r.SOURCE: r for r in _readers()}
    src = source or detect_format(path)
    if src is None:
        raise CheckpointError(f"'{path}' is not a checkpoint format libreyolo can convert (it reads Ultralytics "
                              ".pt files, and timm or transformers .safetensors/.bin with their config.json).")
    if src not in readers:
        raise CheckpointError(f"unknown checkpoint origin {src!r}; known: {', '.join(readers)}.")
    return readers[src].read(Path(path))


def _convert_module(cls: type[Family]) -> Any | None:
    package = cls.__module__.rsplit(".", 1)[0]
    try:
        return importlib.import_module(f"{package}.convert")
    except ModuleNotFoundError as e:
        if e.name == f"{package}.convert":
            return None
        raise


def convert_foreign(fw: ForeignWeights, *, family: str | None = None) -> Family:
    """Build the libreyolo model a foreign checkpoint describes and load its converted weights.

    ``family`` restricts the choice (e.g. from ``model=LibreResNet18-cls.pt``).

    Raises:
        CheckpointError: no family reads it, or its tensors do not fit (the first key is named).
    """
    from ..io.checkpoint import load_state_into
    from ..registry import families

    tried: list[str] = []
    for name, cls in sorted(families().items()):
        if family is not None and name != family:
            continue
        mod = _convert_module(cls)
        if mod is None or fw.source not in getattr(mod, "SOURCES", ()):
            continue
        explicit = getattr(mod, "EXPLICIT_ONLY", False)
        if family is None and (explicit(fw) if callable(explicit) else explicit):
            continue  # reads these files only when asked for by name
        tried.append(name)
        found = mod.match(fw)
        if found is None:
            continue
        size, nc = found
        names = fw.names if fw.names and len(fw.names) == nc else None
        model = cls(size=size, nc=nc, names=names)
        adapt = getattr(mod, "adapt_model", None)  # architecture options the weights need (yolo9: box_groups)
        if adapt is not None:
            adapt(model, fw)
        try:
            sd = mod.convert_state_dict(fw.state_dict, model.net.state_dict(), arch=fw.arch)
        except CheckpointError as e:
            raise CheckpointError(f"'{fw.path}' ({fw.source} {fw.arch or name}) cannot be converted to "
                                  f"{name}-{size}: {e}") from e
        load_state_into(model, sd, strict=True, where=fw.path)
        model.ckpt_path = fw.path
        logger.info("converted %s checkpoint '%s' (%s) to %s-%s, nc=%d", fw.source, fw.path,
                    fw.arch or "?", name, size, nc)
        return model
    what = (f"family {family!r}" if family else
            f"libreyolo family (those that read {fw.source} weights: {', '.join(tried) or 'none'})")
    label = _LABELS.get(fw.source, f"a {fw.source}")
    raise CheckpointError(f"'{fw.path}' is {label} checkpoint ({fw.arch or 'unknown architecture'}) that "
                          f"matches no {what}; see docs/weights.md for the checkpoints that convert.")


def load_foreign(path: str | Path, *, family: str | None = None) -> Family:
    """:func:`read_foreign` then :func:`convert_foreign`."""
    return convert_foreign(read_foreign(path), family=family)
