"""RF-DETR network (Robinson et al., "RF-DETR: Neural Architecture Search for Real-Time Detection
Transformers", arXiv:2511.09554), sizes nano, small, medium, large and base.

A DINOv2 ViT-S (width 384, 12 blocks, 6 heads, LayerScale, 16 px patches, a class token) with
windowed attention over 2 x 2 windows except in the global blocks
(:class:`~libreyolo.models._vit.windowed.WindowedViT`); four block outputs (after DINOv2's final
LayerNorm) are concatenated and projected by a C2f block with LayerNorm convolutions to one
stride-16 map, which the LW-DETR decoder reads (:mod:`libreyolo.models._detr.lwdetr`: two-stage
Group-DETR selection of 300 queries, deformable cross-attention with 16 heads and 2 points).

======  ==========  =====  =======  ========  ===========  =====================
size    resolution  patch  windows  pos grid  dec layers   params (published)
======  ==========  =====  =======  ========  ===========  =====================
nano    384         16     2 x 2    24        2            30.5 M
small   512         16     2 x 2    32        3            32.1 M
medium  576         16     2 x 2    36        4            33.7 M
large   704         16     2 x 2    44        4            33.9 M
base    560         14     4 x 4    37        3            29 M (inference)
======  ==========  =====  =======  ========  ===========  =====================

nano / small / medium / large: output blocks 2, 5, 8, 11 (DINOv2 stages 3, 6, 9, 12), global attention in
blocks 3, 6 and 9; base: output blocks 1, 4, 7, 10 (stages 2, 5, 8, 11), global attention in blocks
2, 5, 8, 11 (the reference's rule: every block up to the last output stage that is not an output
stage is windowed). Inputs: sides multiples of ``patch x windows`` (32; base 56).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ConfigError
from .._detr.lwdetr import LWDecoder, LWDecoderConfig, LWNetBase, build_projector
from .._vit.windowed import WindowedViT


def window_blocks(out_stages: tuple[int, ...]) -> tuple[int, ...]:
    """The reference's windowed blocks: ``0 .. out_stages[-1]`` minus the output stages."""
    return tuple(sorted(set(range(out_stages[-1] + 1)) - set(out_stages)))


@dataclass(frozen=True, kw_only=True)
class RFDETRConfig:
    """One size: the DINOv2 backbone and the decoder."""

    dim: int = 384
    depth: int = 12
    heads: int = 6
    patch: int = 16
    pos_grid: int = 32
    windows: int = 2
    out_stages: tuple[int, ...] = (3, 6, 9, 12)  # DINOv2 stage numbers (stage i = after block i - 1)
    decoder: LWDecoderConfig = field(default_factory=lambda: LWDecoderConfig(dropout=0.1))
    fused_attn: bool = False


class RFDETRNet(LWNetBase):
    """Windowed DINOv2 + C2f projector + LW-DETR decoder (module docs)."""

    def __init__(self, *, cfg: RFDETRConfig, nc: int) -> None:
        super().__init__()
        self.nc, self.cfg = nc, cfg
        self.backbone = WindowedViT(dim=cfg.dim, depth=cfg.depth, heads=cfg.heads, patch=cfg.patch,
                                    pos_grid=cfg.pos_grid, windows=cfg.windows,
                                    window_blocks=window_blocks(cfg.out_stages),
                                    out_blocks=tuple(s - 1 for s in cfg.out_stages), cls_token=True, layer_scale=1.0,
                                    out_norm=True, pos_antialias=True, fused_attn=cfg.fused_attn)
        self.encoder = build_projector([cfg.dim] * len(cfg.out_stages), cfg.decoder, norm="ln")
        self.decoder = LWDecoder(nc=nc, cfg=cfg.decoder)
        self.strides = (cfg.patch,)


def _size(pos: int, layers: int) -> RFDETRConfig:
    return RFDETRConfig(pos_grid=pos, decoder=LWDecoderConfig(dec_layers=layers, dropout=0.1))


VARIANTS: dict[str, RFDETRConfig] = {
    "nano": _size(24, 2), "small": _size(32, 3), "medium": _size(36, 4),
    "large": _size(44, 4),  # rfdetr 1.4.1 ``RFDETRLargeConfig`` (``rf-detr-large-2026.pth``)
    # the first release's size: 14 px patches (DINOv2's own grid, 37 x 37 = 518 px), 4 x 4 windows
    "base": RFDETRConfig(patch=14, pos_grid=37, windows=4, out_stages=(2, 5, 8, 11),
                         decoder=LWDecoderConfig(dec_layers=3, dropout=0.1)),
}
RESOLUTION = {"nano": 384, "small": 512, "medium": 576, "large": 704, "base": 560}
# rfdetr 1.x README (all parameters); base: the first release's README, 29 M, which matches the
# inference parameters (query group 0 only; the 12 training-only groups add 3.6 M)
PUBLISHED_PARAMS_M = {"nano": 30.5, "small": 32.1, "medium": 33.7, "large": 33.9, "base": 29.0}


def build_rf_detr(*, size: str, nc: int) -> RFDETRNet:
    if size not in VARIANTS:
        raise ConfigError(f"rf_detr has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return RFDETRNet(cfg=VARIANTS[size], nc=nc)
