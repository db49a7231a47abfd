"""CSPNeXt blocks of the RTMDet lineage: :mod:`libreyolo.models._rtmdet.cspnext`, re-exported here."""

from .._rtmdet.cspnext import ChannelAttention, CSPNeXtBlock, CSPNeXtLayer

__all__ = ["ChannelAttention", "CSPNeXtBlock", "CSPNeXtLayer"]
