"""Shared network blocks: code that several unrelated families use lives here, not in a family.

A block used by one family lives in that family's folder; code one lineage of families shares
(the DETR decoders, encoders and criteria) lives in ``libreyolo/models/_detr/``. Nothing here
imports ``libreyolo.models``.
"""

from __future__ import annotations

from .conv import ConvBNAct, RepConvN, autopad, fuse_conv_bn, fuse_modules

__all__ = ["ConvBNAct", "RepConvN", "autopad", "fuse_conv_bn", "fuse_modules"]
