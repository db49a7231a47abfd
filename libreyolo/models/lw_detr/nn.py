"""LW-DETR network (Chen et al., "LW-DETR: A Transformer Replacement to YOLO for Real-Time
Detection", arXiv:2406.03459), sizes tiny and small.

A plain ViT (width 192, 16 px patches, LayerScale 0.1, a 14 x 14 position embedding resampled to
the input grid) with interleaved window / global attention over 4 x 4 windows
(:class:`~libreyolo.models._vit.windowed.WindowedViT`); the outputs of a few blocks are
concatenated and projected by a C2f block to one stride-16 map (P4), which the LW-DETR decoder
reads (:mod:`libreyolo.models._detr.lwdetr`: two-stage Group-DETR query selection, 3 decoder layers,
deformable cross-attention with 16 heads and 2 points, no denoising).

=====  =====  =========================  ===========  =======  =======================
size   depth  window blocks              out blocks   queries  params (paper / ours)
=====  =====  =========================  ===========  =======  =======================
tiny   6      0, 2, 4                    1, 3, 5      100      12.1 M / see the test
small  10     0, 1, 3, 6, 7, 9           2, 4, 5, 9   300      14.6 M / see the test
=====  =====  =========================  ===========  =======  =======================

Forward contract (as the other DETRs, SPEC G-9): eval ``net(x)`` -> ``(logits Tensor[B, Q, nc],
boxes Tensor[B, Q, 4] xyxy input pixels)``; train ``net(x)`` -> the projector's maps; the criterion
runs ``net.decoder(maps)`` eagerly. Input sides: multiples of 64 (16 px patches x 4 windows).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ConfigError
from .._detr.lwdetr import LWDecoder, LWDecoderConfig, LWNetBase, Projector
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
        self.encoder = Projector(cfg.dim * len(cfg.out_blocks), cfg.decoder, norm="bn")
        self.decoder = LWDecoder(nc=nc, cfg=cfg.decoder)
        self.strides = (cfg.patch,)


VARIANTS: dict[str, LWDETRConfig] = {
    "tiny": LWDETRConfig(depth=6, window_blocks=(0, 2, 4), out_blocks=(1, 3, 5),
                         decoder=LWDecoderConfig(num_queries=100)),
    "small": LWDETRConfig(),
}
PAPER_PARAMS_M = {"tiny": 12.1, "small": 14.6}  # LW-DETR paper, Table 2


def build_lw_detr(*, size: str, nc: int) -> LWDETRNet:
    if size not in VARIANTS:
        raise ConfigError(f"lw_detr has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return LWDETRNet(cfg=VARIANTS[size], nc=nc)
