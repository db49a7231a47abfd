"""YOLO-NAS size table, as data.

Numbers are those of the reference architecture files (super-gradients 3.7.1,
``recipes/arch_params/yolo_nas_{s,m,l}_arch_params.yaml``): the stem width, per backbone stage
``(out, blocks, hidden, concat_intermediates)``, the SPP width, per neck stage
``(out, blocks, hidden)`` and the per-level head widths before the head width multiplier. The
published parameter counts (80 classes) are Deci's model card (YOLO-NAS S 12.18M, M 31.92M,
L 44.53M). The card does not say how it counted; building the networks shows S and M match
the fused (deployed, QARepVGG-merged) networks and L the trainable (unfused) one, which
``paper_counts`` records:

====  ======  ========  =========
size  card    fused     unfused
====  ======  ========  =========
s     12.18M  12.168M   12.878M
m     31.92M  31.894M   33.861M
l     44.53M  41.985M   44.529M
====  ======  ========  =========
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


def head_width(inter: int, mult: float, divisor: int = 8) -> int:
    """The reference's head width multiplier: ``ceil(int(inter * mult) / divisor) * divisor``.

    Example:
        >>> head_width(128, 0.5), head_width(128, 0.33)
        (64, 48)
    """
    return math.ceil(int(inter * mult) / divisor) * divisor


StageArgs = tuple[int, int, int, bool]  # (out, blocks, hidden, concat_intermediates)
NeckArgs = tuple[int, int, int]  # (out, blocks, hidden)


@dataclass(frozen=True, kw_only=True)
class NASVariant:
    """One size of the YOLO-NAS backbone + PAN neck + detection heads.

    stem: output width of the stride-2 QARepVGG stem.
    stages: the four backbone stages (strides 4, 8, 16, 32), each a stride-2 QARepVGG
        downsample and a CSP layer of QARepVGG bottlenecks.
    spp: output width of the SPP context module after the last stage.
    up: the two up-sampling neck stages (to stride 16, then stride 8).
    down: the two down-sampling neck stages (to stride 16, then stride 32).
    head_inter: per-level head widths (strides 8, 16, 32) before ``head_width_mult``.
    head_width_mult: the head width multiplier (result rounded up to a multiple of 8).
    paper_params_m: published parameters (millions, 80 classes).
    paper_counts: which network the published count matches, ``"fused"`` or ``"unfused"``.
    """

    size: str
    stem: int
    stages: tuple[StageArgs, StageArgs, StageArgs, StageArgs]
    spp: int
    up: tuple[NeckArgs, NeckArgs]
    down: tuple[NeckArgs, NeckArgs]
    head_inter: tuple[int, int, int] = (128, 256, 512)
    head_width_mult: float
    paper_params_m: float
    paper_counts: Literal["fused", "unfused"]


VARIANTS: dict[str, NASVariant] = {
    "s": NASVariant(
        size="s", stem=48,
        stages=((96, 2, 32, False), (192, 3, 64, False), (384, 5, 96, False), (768, 2, 192, False)),
        spp=768, up=((192, 2, 64), (96, 2, 48)), down=((192, 2, 64), (384, 2, 64)),
        head_width_mult=0.5, paper_params_m=12.18, paper_counts="fused"),
    "m": NASVariant(
        size="m", stem=48,
        stages=((96, 2, 64, True), (192, 3, 128, True), (384, 5, 256, True), (768, 2, 384, False)),
        spp=768, up=((192, 2, 192), (96, 3, 64)), down=((192, 2, 192), (384, 3, 256)),
        head_width_mult=0.75, paper_params_m=31.92, paper_counts="fused"),
    "l": NASVariant(
        size="l", stem=48,
        stages=((96, 2, 96, True), (192, 3, 128, True), (384, 5, 256, True), (768, 2, 512, True)),
        spp=768, up=((192, 4, 128), (96, 4, 128)), down=((192, 4, 128), (384, 4, 256)),
        head_width_mult=1.0, paper_params_m=44.53, paper_counts="unfused"),
}
