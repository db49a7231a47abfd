"""PicoDet size table, as data.

Numbers are those of the reference configs of the PP-PicoDet paper's models (PaddleDetection
``configs/picodet/legacy_model/picodet_{s,m,l}_*_coco.yml`` over ``_base_/picodet_esnet.yml``,
the 2021.10 model zoo): the ESNet width ``scale`` and its per-block ``channel_ratio`` (13
blocks: 3, 7, 3 per stage), the CSP-PAN / head width and the head depth (``num_convs``).
``paper_params_m`` is the parameter count (millions, 80 classes) of that model zoo table and of
the paper's Table 4 (0.99M, 2.15M, 3.30M).
"""

from __future__ import annotations

from dataclasses import dataclass

ESNET_REPEATS = (3, 7, 3)  # blocks per stage (strides 8, 16, 32)
REG_MAX = 7  # the reference's reg_max: distances take the values 0..7 (8 bins)


def make_divisible(v: float, divisor: int = 16) -> int:
    """Round ``v`` to the nearest multiple of ``divisor`` (at least ``divisor``), never more
    than 10% below ``v``: the channel rounding of the reference ESNet.

    Example:
        >>> make_divisible(96), make_divisible(160), make_divisible(int(192 * 0.625), divisor=8)
        (96, 160, 120)
    """
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


@dataclass(frozen=True, kw_only=True)
class PicoDetVariant:
    """One size of PicoDet.

    scale: ESNet width multiplier; channel_ratio: per-block ratio of the block's middle width
    to its stage width; width: CSP-PAN and head channels; head_convs: depthwise-separable conv
    pairs per level in the head; imgsz: default input size; paper_params_m: published count.
    """

    size: str
    scale: float
    channel_ratio: tuple[float, ...]
    width: int
    head_convs: int
    imgsz: int
    paper_params_m: float

    @property
    def stage_channels(self) -> tuple[int, int, int]:
        """ESNet stage widths (strides 8, 16, 32)."""
        return tuple(make_divisible(c * self.scale) for c in (128, 256, 512))  # type: ignore[return-value]


_RATIO_S = (0.875, 0.5, 0.5, 0.5, 0.625, 0.5, 0.625, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5)
_RATIO_ML = (0.875, 0.5, 1.0, 0.625, 0.5, 0.75, 0.625, 0.625, 0.5, 0.625, 1.0, 0.625, 0.75)

VARIANTS: dict[str, PicoDetVariant] = {
    "s": PicoDetVariant(size="s", scale=0.75, channel_ratio=_RATIO_S, width=96, head_convs=2, imgsz=320,
                        paper_params_m=0.99),
    "m": PicoDetVariant(size="m", scale=1.0, channel_ratio=_RATIO_ML, width=128, head_convs=4, imgsz=416,
                        paper_params_m=2.15),
    "l": PicoDetVariant(size="l", scale=1.25, channel_ratio=_RATIO_ML, width=160, head_convs=4, imgsz=640,
                        paper_params_m=3.30),
}
