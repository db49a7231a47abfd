"""Map an mmdetection RTMDet-Ins state dict onto the ``rtmdet_ins`` network: the lineage's
renames (:mod:`libreyolo.models._rtmdet.convert`; the reference's ``reg_convs`` are its
``cls_convs`` and are dropped), the stem's BGR -> RGB flip and mmdetection's BatchNorm eps 1e-5.

Tested against mmdetection's own ``RTMDetInsSepBNHead`` network when mmdetection imports
(``tests/unit/convert/test_rtmdet_ins_mmdet.py``); not wired to ``LibreYOLO(path)`` yet.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from .._rtmdet.convert import REFERENCE_BN_EPS, convert_state_dict, rename_key, set_bn_eps

__all__ = ["REFERENCE_BN_EPS", "convert_state_dict", "load_reference", "rename_key", "set_bn_eps"]


def load_reference(net: nn.Module, src: Mapping[str, Tensor]) -> nn.Module:
    """Load an mmdetection RTMDet-Ins ``state_dict`` (``backbone.*``, ``neck.*``, ``bbox_head.*``)
    into ``net`` (a :func:`~libreyolo.models.rtmdet_ins.nn.build_rtmdet_ins` network of the same
    size and classes), in place; returns ``net``.
    """
    net.load_state_dict(convert_state_dict(src, net.state_dict()))
    set_bn_eps(net)
    return net
