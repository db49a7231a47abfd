"""RT-DETRv2 size table, as data.

Values are those of the reference configs (``rtdetrv2_pytorch/configs/rtdetrv2/rtdetrv2_r{18,34}vd_120e_coco.yml``
and ``include/rtdetrv2_r50vd.yml`` of lyuwenyu/RT-DETR): the RT-DETR architecture (ResNet-vd,
hybrid encoder with RepC3 expansion 0.5, 3 / 4 decoder layers) with the v2 decoder options:
``num_points`` per level (``(4, 4, 4)`` in the released configs) and the cross-attention
sampling ``method`` (``"default"`` bilinear; ``"discrete"`` is the optional deployment operator,
off by default). ``paper_params_m``: published parameter count (millions, 80 classes).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._detr.net import DETRNetConfig


@dataclass(frozen=True, kw_only=True)
class RTDETRv2Variant:
    size: str
    net: DETRNetConfig
    paper_params_m: float


VARIANTS: dict[str, RTDETRv2Variant] = {
    "r18": RTDETRv2Variant(size="r18", paper_params_m=20.0, net=DETRNetConfig(
        depth=18, expansion=0.5, dec_layers=3, num_points=(4, 4, 4), method="default")),
    "r34": RTDETRv2Variant(size="r34", paper_params_m=31.0, net=DETRNetConfig(
        depth=34, expansion=0.5, dec_layers=4, num_points=(4, 4, 4), method="default")),
}
