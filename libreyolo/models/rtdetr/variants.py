"""RT-DETR size table, as data.

Values are those of the reference configs (``rtdetr_pytorch/configs/rtdetr/rtdetr_r{18,34,50}vd_6x_coco.yml``
of lyuwenyu/RT-DETR): ResNet-vd depth, hybrid-encoder RepC3 expansion (0.5 for R18/R34, 1.0 for
R50), decoder layers (3 / 4 / 6); everything else is shared (hidden 256, 8 heads, AIFI FFN 1024,
decoder FFN 1024, 300 queries, 4 sampling points on each of 3 levels, 100 denoising queries,
label noise 0.5, box noise 1.0). ``paper_params_m`` is the published parameter count (millions,
80 classes).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._detr.net import DETRNetConfig


@dataclass(frozen=True, kw_only=True)
class RTDETRVariant:
    size: str
    net: DETRNetConfig
    paper_params_m: float


VARIANTS: dict[str, RTDETRVariant] = {
    "r18": RTDETRVariant(size="r18", net=DETRNetConfig(depth=18, expansion=0.5, dec_layers=3), paper_params_m=20.0),
    "r34": RTDETRVariant(size="r34", net=DETRNetConfig(depth=34, expansion=0.5, dec_layers=4), paper_params_m=31.0),
    "r50": RTDETRVariant(size="r50", net=DETRNetConfig(depth=50, expansion=1.0, dec_layers=6), paper_params_m=42.0),
}
