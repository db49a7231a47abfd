"""mmdetection RTMDet-Ins checkpoints (``rtmdet-ins_{tiny,s,m,l,x}_*.pth``) onto ``rtmdet_ins``: the
lineage's renames (:mod:`libreyolo.models._rtmdet.convert`; the reference's ``reg_convs`` are its
``cls_convs`` and are dropped), the stem's BGR -> RGB flip and mmdetection's BatchNorm eps folded.

Read by ``LibreYOLO(path)`` through :mod:`libreyolo.convert.mmdet`; fidelity against mmdetection's
own network in ``tests/unit/convert/test_rtmdet_ins_mmdet.py``.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from .._rtmdet.convert import SOURCES, convert_state_dict, match_state_dict, rename_key

__all__ = ["SOURCES", "convert_state_dict", "load_reference", "match", "rename_key"]


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` holds an RTMDet-Ins state dict (dynamic-kernel predictions), else ``None``."""
    return match_state_dict(getattr(fw, "state_dict", {}), instance=True)


def load_reference(net: nn.Module, src: Mapping[str, Tensor]) -> nn.Module:
    """Load an mmdetection RTMDet-Ins ``state_dict`` (``backbone.*``, ``neck.*``, ``bbox_head.*``)
    into ``net`` (a :func:`~libreyolo.models.rtmdet_ins.nn.build_rtmdet_ins` network of the same
    size and classes), in place; returns ``net``.
    """
    net.load_state_dict(convert_state_dict(src, net.state_dict()))
    return net
