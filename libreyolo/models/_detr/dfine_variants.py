"""D-FINE size table, as data: the ``dfine`` and ``deim`` families both build from it (DEIM is the
D-FINE architecture; it changes only the training recipe).

Values are those of the reference configs (``configs/dfine/dfine_hgnetv2_{n,s}_coco.yml`` over
``include/dfine_hgnetv2.yml`` of Peterande/D-FINE; ``configs/deim_dfine/deim_hgnetv2_{n,s}_coco.yml``
of ShihuaHuang95/DEIM include these n / s model configs unchanged):

* n: HGNetv2-B0 stages 2-3 (strides 16, 32), hidden 128, encoder FFN 512, expansion 0.34,
  depth_mult 0.5; decoder 3 layers, FFN 512, 6 sampling points per level (2 levels).
* s: HGNetv2-B0 stages 1-3 (strides 8, 16, 32), hidden 256, encoder FFN 1024, expansion 0.5,
  depth_mult 0.34; decoder 3 layers, FFN 1024, points (3, 6, 3).

Shared: 8 heads, 300 queries, 100 denoising queries (label noise 0.5, box noise 1.0), reg_max
32, reg_scale 4. ``paper_params_m``: published parameter count (millions, 80 classes, rounded
to whole millions in the tables); ``reference_params``: the reference implementation's
training-mode count at 80 classes (D-FINE-S and DEIM-D-FINE-S: 10,321,877, reported for the reference code; this
build has exactly two fewer, the reference's two frozen scalar parameters ``up`` and
``reg_scale`` being plain constants here).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .dfine_net import DFineNetConfig


@dataclass(frozen=True, kw_only=True)
class DFineVariant:
    size: str
    net: DFineNetConfig
    paper_params_m: float
    reference_params: int | None = None


VARIANTS: dict[str, DFineVariant] = {
    "n": DFineVariant(size="n", paper_params_m=4.0, net=DFineNetConfig(
        return_idx=(2, 3), hidden=128, enc_ffn=512, expansion=0.34, depth_mult=0.5,
        dec_layers=3, dec_ffn=512, num_points=(6, 6))),
    "s": DFineVariant(size="s", paper_params_m=10.0, reference_params=10_321_877, net=DFineNetConfig(
        return_idx=(1, 2, 3), hidden=256, enc_ffn=1024, expansion=0.5, depth_mult=0.34,
        dec_layers=3, dec_ffn=1024, num_points=(3, 6, 3))),
}


def deim_net(cfg: DFineNetConfig) -> DFineNetConfig:
    """A D-FINE size as DEIM (and RT-DETRv4, which includes DEIM's ``deim.yml``) builds it: SiLU in
    the decoder FFN and LQE (``DFINETransformer.activation: silu``) and in the query-position and
    box heads (``mlp_act: silu``); D-FINE's own configs keep the ReLU defaults."""
    return replace(cfg, act="silu", mlp_act="silu")


# RT-DETRv4 (RT-DETRs/RT-DETRv4 ``configs/rtv4/rtv4_hgnetv2_{s,m}_coco.yml``): the D-FINE s / m
# configs with DEIM's ``deim.yml`` on top; the VFM distillation head exists only in training.
# m: HGNetv2-B2 stages 1-3, hidden 256, depth_mult 0.67, 4 decoder layers (``dfine_hgnetv2_m_coco.yml``).
RTDETRV4_VARIANTS: dict[str, DFineVariant] = {
    "s": DFineVariant(size="s", paper_params_m=10.0, net=deim_net(VARIANTS["s"].net)),
    "m": DFineVariant(size="m", paper_params_m=19.0, net=deim_net(DFineNetConfig(
        backbone="B2", return_idx=(1, 2, 3), hidden=256, enc_ffn=1024, expansion=1.0, depth_mult=0.67,
        dec_layers=4, dec_ffn=1024, num_points=(3, 6, 3)))),
}
