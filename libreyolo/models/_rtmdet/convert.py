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

The reference feeds BGR pixels: :func:`convert_state_dict` reverses the input channels of the
first convolution. mmdetection trains with BatchNorm eps 1e-5: :func:`set_bn_eps` sets it on the
converted network.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor, nn

from ...errors import ConfigError

STEM_WEIGHT = "backbone.stem.0.conv.weight"
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


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Reference state dict -> a state dict for a network whose ``state_dict()`` is ``own``.

    Raises :class:`~libreyolo.errors.ConfigError` naming the keys when a tensor has no place in
    ``own``, a shape differs or a key of ``own`` stays unfilled (``reg_convs`` are dropped only
    when ``own`` has none: the instance head's box branch reads its class tower).
    """
    out: dict[str, Tensor] = {}
    unknown, bad_shape = [], []
    drop_reg = not any(k.startswith("head.reg_convs.") for k in own)
    for key, value in src.items():
        if key.startswith("data_preprocessor."):
            continue
        name = rename_key(key)
        if name is None or (drop_reg and name.startswith("head.reg_convs.")):
            continue
        if name not in own:
            unknown.append(key)
            continue
        if tuple(value.shape) != tuple(own[name].shape):
            bad_shape.append(f"{key} {tuple(value.shape)} -> {name} {tuple(own[name].shape)}")
            continue
        out[name] = value
    missing = sorted(set(own) - set(out))
    if unknown or bad_shape or missing:
        raise ConfigError("the mmdetection RTMDet state dict does not fit this network: "
                          f"unknown {unknown[:5]}, shape mismatches {bad_shape[:5]}, unfilled {missing[:5]}; "
                          "build the same size and number of classes as the checkpoint")
    if STEM_WEIGHT in out:
        out[STEM_WEIGHT] = out[STEM_WEIGHT].flip(1)  # BGR input channels -> RGB
    return out


def set_bn_eps(net: nn.Module, eps: float = REFERENCE_BN_EPS) -> None:
    """Set every BatchNorm's ``eps`` (mmdetection's RTMDet configs train with 1e-5)."""
    for m in net.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eps = eps
