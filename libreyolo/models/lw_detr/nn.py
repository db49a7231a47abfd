"""LW-DETR network (Chen et al., "LW-DETR: A Transformer Replacement to YOLO for Real-Time
Detection", arXiv:2406.03459), sizes tiny, small, medium, large and xlarge.

A plain ViT (width 192 / 384 / 768, 12 heads, 16 px patches, LayerScale 0.1, a 14 x 14 position
embedding resampled to the input grid) with interleaved window / global attention over 4 x 4
windows (:class:`~libreyolo.models._vit.windowed.WindowedViT`); the outputs of a few blocks are
concatenated and projected by a C2f block to one stride-16 map (P4; large / xlarge: two levels, P3
and P5, each resampled from the same block outputs), which the LW-DETR decoder reads
(:mod:`libreyolo.models._detr.lwdetr`: two-stage Group-DETR query selection, 3 decoder layers,
deformable cross-attention, no denoising). The sizes follow the reference's
``scripts/lwdetr_<size>_coco_eval.sh``:

======  =====  =====  ================  ==========  ======  =====================  =======  =======
size    width  depth  window blocks     out blocks  levels  decoder (d, sa/ca, p)  queries  paper
======  =====  =====  ================  ==========  ======  =====================  =======  =======
tiny    192    6      0, 2, 4           1, 3, 5     P4      256, 8 / 16, 2         100      12.1 M
small   192    10     0, 1, 3, 6, 7, 9  2, 4, 5, 9  P4      256, 8 / 16, 2         300      14.6 M
medium  384    10     as small          as small    P4      256, 8 / 16, 2         300      28.2 M
large   384    10     as small          as small    P3, P5  384, 12 / 24, 4        300      46.8 M
xlarge  768    10     as small          as small    P3, P5  384, 12 / 24, 4        300      118.0 M
======  =====  =====  ================  ==========  ======  =====================  =======  =======

(d: decoder width, sa / ca: self- / cross-attention heads, p: sampling points per level; our exact
counts are in the test.)

Forward contract (as the other DETRs, SPEC G-9): eval ``net(x)`` -> ``(logits Tensor[B, Q, nc],
boxes Tensor[B, Q, 4] xyxy input pixels)``; train ``net(x)`` -> the projector's maps; the criterion
runs ``net.decoder(maps)`` eagerly. Input sides: multiples of 64 (16 px patches x 4 windows).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ConfigError
from .._detr.lwdetr import LWDecoder, LWDecoderConfig, LWNetBase, build_projector
from .._vit.windowed import WindowedViT


@dataclass(frozen=True, kw_only=True)
class LWDETRConfig:
    """One size: the ViT (``dim``, ``depth``, ``heads``, window / output blocks) and the decoder."""

    dim: int = 192
    depth: int = 10
    heads: int = 12
    patch: int = 16
    pos_grid: int = 14  # pretrained at 224 px
    windows: int = 4  # per side: 16 windows
    window_blocks: tuple[int, ...] = (0, 1, 3, 6, 7, 9)
    out_blocks: tuple[int, ...] = (2, 4, 5, 9)
    decoder: LWDecoderConfig = field(default_factory=LWDecoderConfig)
    fused_attn: bool = False


class LWDETRNet(LWNetBase):
    """ViT backbone + C2f projector + LW-DETR decoder (module docs)."""

    def __init__(self, *, cfg: LWDETRConfig, nc: int) -> None:
        super().__init__()
        self.nc, self.cfg = nc, cfg
        self.backbone = WindowedViT(dim=cfg.dim, depth=cfg.depth, heads=cfg.heads, patch=cfg.patch,
                                    pos_grid=cfg.pos_grid, windows=cfg.windows, window_blocks=cfg.window_blocks,
                                    out_blocks=cfg.out_blocks, cls_token=False, layer_scale=0.1, out_norm=False,
                                    pos_antialias=False, fused_attn=cfg.fused_attn)
        self.encoder = build_projector([cfg.dim] * len(cfg.out_blocks), cfg.decoder, norm="bn")
        self.decoder = LWDecoder(nc=nc, cfg=cfg.decoder)
        self.strides = tuple(int(cfg.patch / s) for s in cfg.decoder.scales)


# large / xlarge: the P3 + P5 projector and a wider decoder (width 384, 12 / 24 heads, 4 points)
_WIDE = LWDecoderConfig(hidden=384, sa_heads=12, ca_heads=24, points=4, num_levels=2, scales=(2.0, 0.5))
VARIANTS: dict[str, LWDETRConfig] = {
    "tiny": LWDETRConfig(depth=6, window_blocks=(0, 2, 4), out_blocks=(1, 3, 5),
                         decoder=LWDecoderConfig(num_queries=100)),
    "small": LWDETRConfig(),
    "medium": LWDETRConfig(dim=384),
    "large": LWDETRConfig(dim=384, decoder=_WIDE),
    "xlarge": LWDETRConfig(dim=768, decoder=_WIDE),
}
PAPER_PARAMS_M = {"tiny": 12.1, "small": 14.6, "medium": 28.2, "large": 46.8, "xlarge": 118.0}  # paper, Table 2


def build_lw_detr(*, size: str, nc: int) -> LWDETRNet:
    if size not in VARIANTS:
        raise ConfigError(f"lw_detr has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return LWDETRNet(cfg=VARIANTS[size], nc=nc)
