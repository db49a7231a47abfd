"""RF-DETR network (Robinson et al., "RF-DETR: Neural Architecture Search for Real-Time Detection
Transformers", arXiv:2511.09554), sizes nano, small and medium.

A DINOv2 ViT-S (width 384, 12 blocks, 6 heads, LayerScale, 16 px patches, a class token) with
windowed attention over 2 x 2 windows except in the global blocks
(:class:`~libreyolo.models._vit.windowed.WindowedViT`); four block outputs (after DINOv2's final
LayerNorm) are concatenated and projected by a C2f block with LayerNorm convolutions to one
stride-16 map, which the LW-DETR decoder reads (:mod:`libreyolo.models._detr.lwdetr`: two-stage
Group-DETR selection of 300 queries, deformable cross-attention with 16 heads and 2 points).

======  ==========  ========  ===========  =====================
size    resolution  pos grid  dec layers   params (published)
======  ==========  ========  ===========  =====================
nano    384         24        2            30.5 M
small   512         32        3            32.1 M
medium  576         36        4            33.7 M
======  ==========  ========  ===========  =====================

Every size: output blocks 2, 5, 8, 11 (DINOv2 stages 3, 6, 9, 12), global attention in blocks 3, 6
and 9 (the reference's rule: every block up to the last output stage that is not an output stage
is windowed). Inputs: sides multiples of 32 (16 px patches x 2 windows). The 14 px-patch
``base`` (560 px, 4 x 4 windows) is not built: its stride (56) is not the family's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ConfigError
from .._detr.lwdetr import LWDecoder, LWDecoderConfig, LWNetBase, Projector
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
        self.encoder = Projector(cfg.dim * len(cfg.out_stages), cfg.decoder, norm="ln")
        self.decoder = LWDecoder(nc=nc, cfg=cfg.decoder)
        self.strides = (cfg.patch,)


def _size(pos: int, layers: int) -> RFDETRConfig:
    return RFDETRConfig(pos_grid=pos, decoder=LWDecoderConfig(dec_layers=layers, dropout=0.1))


VARIANTS: dict[str, RFDETRConfig] = {"nano": _size(24, 2), "small": _size(32, 3), "medium": _size(36, 4)}
RESOLUTION = {"nano": 384, "small": 512, "medium": 576}
PUBLISHED_PARAMS_M = {"nano": 30.5, "small": 32.1, "medium": 33.7}  # rfdetr 1.x README


def build_rf_detr(*, size: str, nc: int) -> RFDETRNet:
    if size not in VARIANTS:
        raise ConfigError(f"rf_detr has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return RFDETRNet(cfg=VARIANTS[size], nc=nc)
