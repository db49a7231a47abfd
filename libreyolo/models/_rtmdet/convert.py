"""Map an mmdetection RTMDet / RTMDet-Ins state dict (``backbone.*``, ``neck.*``, ``bbox_head.*``)
onto the lineage's networks (``rtmdet``: :class:`~.net.RTMDetSepBNHead`; ``rtmdet_ins``: its
instance head).

Renames (everything else keeps its name):

- DepthwiseSeparableConvModule ``depthwise_conv`` / ``pointwise_conv`` -> ``dconv`` / ``pconv``.
- Neck: ``reduce_layers.{0,1}`` -> ``reduce5``, ``reduce4``; ``top_down_blocks.{0,1}`` -> ``top4``,
  ``top3``; ``downsamples.{0,1}`` -> ``down3``, ``down4``; ``bottom_up_blocks.{0,1}`` ->
  ``bottom4``, ``bottom5``.
- Head: ``bbox_head.`` -> ``head.``; the level-shared convs ``{cls,reg}_convs.{level}.{i}.conv``
  (aliases of level 0) -> ``{cls,reg}_convs.{i}.conv`` from level 0 only, their per-level
  BatchNorms ``{cls,reg}_convs.{level}.{i}.bn`` -> ``{cls,reg}_convs.{i}.bns.{level}``. In
  RTMDet-Ins the reference's ``reg_convs`` *is* its ``cls_convs`` (the same modules), so a target
  without ``reg_convs`` drops them.

Tensors: the reference feeds BGR pixels, so the first convolution's input channels are reversed;
mmdetection's configs train with BatchNorm eps 1e-5 (SyncBN defaults) where ours use 1e-3, so every
BatchNorm weight is rescaled to give the same eval-mode function
(:func:`~libreyolo.models._base.convert_rules.fold_bn_eps`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from ...layers.conv import BN_EPS
from .._base.convert_rules import fit, fold_bn_eps, rename_all
from .variants import P5_STAGES, VARIANTS

SOURCES = ("mmdet",)
STEM_WEIGHT = "backbone.stem.0.conv.weight"
KERNEL_WEIGHT = "bbox_head.rtm_kernel.0.weight"  # only RTMDet-Ins has dynamic-kernel predictions
CLS_WEIGHT = "bbox_head.rtm_cls.0.weight"
REFERENCE_BN_EPS = 1e-5
_NECK = {"reduce_layers.0": "reduce5", "reduce_layers.1": "reduce4", "top_down_blocks.0": "top4",
         "top_down_blocks.1": "top3", "downsamples.0": "down3", "downsamples.1": "down4",
         "bottom_up_blocks.0": "bottom4", "bottom_up_blocks.1": "bottom5"}
_SHARED = re.compile(r"^bbox_head\.(cls_convs|reg_convs)\.(\d+)\.(\d+)\.(conv|bn)\.(.+)$")


def rename_key(key: str) -> str | None:
    """Our name for one reference key; ``None`` for an alias that is not stored separately (the
    shared conv of levels 1 and 2).

    Example:
        >>> rename_key("neck.top_down_blocks.1.blocks.0.conv2.depthwise_conv.conv.weight")
        'neck.top3.blocks.0.conv2.dconv.conv.weight'
        >>> rename_key("bbox_head.cls_convs.2.1.bn.running_mean"), rename_key("bbox_head.cls_convs.2.1.conv.weight")
        ('head.cls_convs.1.bns.2.running_mean', None)
    """
    m = _SHARED.match(key)
    if m:
        branch, level, i, kind, rest = m.groups()
        if kind == "conv":
            return f"head.{branch}.{i}.conv.{rest}" if level == "0" else None
        return f"head.{branch}.{i}.bns.{level}.{rest}"
    key = key.replace(".depthwise_conv.", ".dconv.").replace(".pointwise_conv.", ".pconv.")
    if key.startswith("neck."):
        for old, new in _NECK.items():
            if key.startswith(f"neck.{old}."):
                return f"neck.{new}." + key[len(f"neck.{old}."):]
        return key
    if key.startswith("bbox_head."):
        return "head." + key[len("bbox_head."):]
    return key


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> a complete state dict for a network whose ``state_dict()`` is ``own``
    (renamed, stem reversed to RGB, BatchNorm eps folded; ``reg_convs`` dropped when ``own`` has
    none). Raises :class:`~libreyolo.errors.CheckpointError` naming the first key that does not fit.
    """
    drop_reg = not any(k.startswith("head.reg_convs.") for k in own)

    def rename(key: str) -> str | None:
        if key.startswith("data_preprocessor."):
            return None
        name = rename_key(key)
        return None if name is not None and drop_reg and name.startswith("head.reg_convs.") else name

    out = fit(rename_all(src, rename), own)
    out[STEM_WEIGHT] = out[STEM_WEIGHT].flip(1)  # BGR input channels -> RGB
    return fold_bn_eps(out, eps_ref=REFERENCE_BN_EPS, eps_ours=BN_EPS)


def infer_size_nc(src: Mapping[str, Tensor]) -> tuple[str, int]:
    """``(size, nc)`` of a reference state dict: the size from the stem width (``int(64 w) // 2``),
    the classes from the class prediction."""
    width = int(src[STEM_WEIGHT].shape[0])
    nc = int(src[CLS_WEIGHT].shape[0])
    for size, v in VARIANTS.items():
        if int(P5_STAGES[0][0] * v.widen // 2) == width:
            return size, nc
    raise CheckpointError(f"this RTMDet (stem width {width}) matches none of the sizes {', '.join(VARIANTS)}.")


def match_state_dict(src: Mapping[str, Tensor], *, instance: bool) -> tuple[str, int] | None:
    """``(size, nc)`` when ``src`` is an mmdetection RTMDet (``instance=False``) or RTMDet-Ins
    (``instance=True``) state dict, else ``None``."""
    if STEM_WEIGHT not in src or CLS_WEIGHT not in src or (KERNEL_WEIGHT in src) != instance:
        return None
    return infer_size_nc(src)
