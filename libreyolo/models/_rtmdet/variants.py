"""RTMDet size table, as data.

Numbers are those of the reference detection configs (``configs/rtmdet/rtmdet_{tiny,s,m,l,x}
_8xb32-300e_coco.py`` of open-mmlab/mmdetection): the CSPNeXt backbone is the P5 architecture
scaled by ``deepen`` (block counts, ``max(round(n * deepen), 1)``) and ``widen`` (channels,
``int(c * widen)``); the PAFPN neck and the head are ``width`` channels wide; ``neck_blocks`` is
the neck's ``num_csp_blocks``; ``exp_on_reg`` says whether box distances are ``exp(raw)``
(m, l, x) or ``raw`` (tiny, s), in stride units either way.
"""

from __future__ import annotations

from dataclasses import dataclass

# P5 CSPNeXt stages: (c_in, c_out, blocks, shortcut, spp), before scaling.
P5_STAGES: tuple[tuple[int, int, int, bool, bool], ...] = (
    (64, 128, 3, True, False),
    (128, 256, 6, True, False),
    (256, 512, 6, True, False),
    (512, 1024, 3, False, True),
)


@dataclass(frozen=True, kw_only=True)
class RTMDetVariant:
    """One size of the RTMDet detector.

    paper_params_m: parameters (millions, 80 classes) in the reference model-zoo table.
    """

    size: str
    deepen: float
    widen: float
    neck_blocks: int
    exp_on_reg: bool
    paper_params_m: float

    @property
    def width(self) -> int:
        """Neck output / head feature channels (``int(256 * widen)``)."""
        return int(256 * self.widen)


VARIANTS: dict[str, RTMDetVariant] = {
    "t": RTMDetVariant(size="t", deepen=0.167, widen=0.375, neck_blocks=1, exp_on_reg=False, paper_params_m=4.8),
    "s": RTMDetVariant(size="s", deepen=0.33, widen=0.5, neck_blocks=1, exp_on_reg=False, paper_params_m=8.89),
    "m": RTMDetVariant(size="m", deepen=0.67, widen=0.75, neck_blocks=2, exp_on_reg=True, paper_params_m=24.71),
    "l": RTMDetVariant(size="l", deepen=1.0, widen=1.0, neck_blocks=3, exp_on_reg=True, paper_params_m=52.3),
    "x": RTMDetVariant(size="x", deepen=1.33, widen=1.25, neck_blocks=4, exp_on_reg=True, paper_params_m=94.86),
}
