"""DEIMv2 size table (HGNetv2 sizes), as data, from the reference configs
``configs/deimv2/deimv2_hgnetv2_{atto,femto}_coco.yml`` over ``configs/base/deimv2.yml`` of
Intellindust-AI-Lab/DEIMv2:

* atto: HGNetv2-Atto stage 2 (stride 16, 256 channels), lite encoder hidden 64, expansion 0.34,
  depth_mult 0.5; decoder hidden 64, 3 layers, SwiGLU FFN 160 (inner 80), points (4, 2) on
  strides (16, 32), 100 queries, shared box head, no gate. Evaluated at 320 px.
* femto: HGNetv2-Femto stage 2 (512 channels), hidden 96, FFN 256, 150 queries; otherwise as
  atto. Evaluated at 416 px.
* pico: HGNetv2-Pico stage 2 (512 channels, two blocks), hidden 112, FFN 320, 200 queries.
  Evaluated at 640 px.
* n: HGNetv2-B0 stages 2-3 (strides 16, 32), hybrid encoder hidden 128 (AIFI FFN 512, expansion
  0.34, depth_mult 0.5, sum fusion); decoder 3 layers, SwiGLU 512, points (6, 6), 300 queries, the
  RMSNorm gate, one box head per layer. Evaluated at 640 px.

``paper_params_m``: the README's parameter count (millions, rounded to 0.1 M at 80 classes).
Larger sizes (s and up: DINOv3 with the spatial
tuning adapter) are not built.
"""

from __future__ import annotations

from dataclasses import dataclass

from .deimv2_net import Deimv2NetConfig


@dataclass(frozen=True, kw_only=True)
class Deimv2Variant:
    size: str
    net: Deimv2NetConfig
    paper_params_m: float
    imgsz: int


VARIANTS: dict[str, Deimv2Variant] = {
    "atto": Deimv2Variant(size="atto", paper_params_m=0.5, imgsz=320, net=Deimv2NetConfig(
        backbone="Atto", hidden=64, dec_ffn=160, num_queries=100)),
    "femto": Deimv2Variant(size="femto", paper_params_m=1.0, imgsz=416, net=Deimv2NetConfig(
        backbone="Femto", hidden=96, dec_ffn=256, num_queries=150)),
    "pico": Deimv2Variant(size="pico", paper_params_m=1.5, imgsz=640, net=Deimv2NetConfig(
        backbone="Pico", hidden=112, dec_ffn=320, num_queries=200)),
    "n": Deimv2Variant(size="n", paper_params_m=3.6, imgsz=640, net=Deimv2NetConfig(
        backbone="B0", return_idx=(2, 3), encoder="hybrid", enc_ffn=512, hidden=128, dec_ffn=512,
        num_points=(6, 6), num_queries=300, use_gateway=True, share_bbox_head=False)),
}
