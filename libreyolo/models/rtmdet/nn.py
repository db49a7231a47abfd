"""The RTMDet detection network (CSPNeXt backbone, CSPNeXt-PAFPN neck, shared-conv head with a
BatchNorm per level) lives in the lineage package, :mod:`libreyolo.models._rtmdet.net`;
re-exported here under this family."""

from .._rtmdet.net import (
    PIXEL_MEAN,
    PIXEL_STD,
    STRIDES,
    CSPNeXt,
    CSPNeXtPAFPN,
    RTMDetNet,
    RTMDetSepBNHead,
    SharedConvSepBN,
    build_rtmdet,
)

__all__ = ["PIXEL_MEAN", "PIXEL_STD", "STRIDES", "CSPNeXt", "CSPNeXtPAFPN", "RTMDetNet", "RTMDetSepBNHead",
           "SharedConvSepBN", "build_rtmdet"]
