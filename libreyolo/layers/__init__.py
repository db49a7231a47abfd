"""Shared network blocks: code that more than one family uses lives here, not in a family."""

from __future__ import annotations

from .conv import ConvBNAct, RepConvN, autopad, fuse_conv_bn, fuse_modules
from .elan import ELAN1, SPPELAN, AConv, ADown, RepNBottleneck, RepNCSP, RepNCSPELAN4

__all__ = [
    "ConvBNAct", "RepConvN", "autopad", "fuse_conv_bn", "fuse_modules",
    "ELAN1", "SPPELAN", "ADown", "AConv", "RepNBottleneck", "RepNCSP", "RepNCSPELAN4",
]
