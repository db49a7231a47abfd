"""YOLOv9 GELAN detection network (sizes t, s, m, c): the lineage's :class:`YOLO9Net` with three
levels (strides 8, 16, 32) and the :class:`DetectHead` (:mod:`libreyolo.models._gelan.net`).

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float in [0, 1],
H and W multiples of 32; output, in train and eval mode alike, a list of three tensors for
strides 8, 16, 32, each Tensor[B, 4 * reg_max + nc, H / s, W / s] of raw logits (box
distribution logits first, then class logits). Decoding is postprocessing
(:mod:`libreyolo.models.yolo9.postprocess`), so the forward is static and CUDA-graph capturable.
"""

from __future__ import annotations

from .._gelan.convert import YOLO9_LAYOUT
from .._gelan.net import REG_MAX, STRIDES, DetectHead, YOLO9Net, check_build_args
from .._gelan.variants import VARIANTS

__all__ = ["REFERENCE_LAYER_INDEX", "REG_MAX", "STRIDES", "DetectHead", "YOLO9Net", "build_yolo9"]

# Attribute name -> layer index of the reference model (``model.<i>.`` state-dict prefix).
REFERENCE_LAYER_INDEX: dict[str, int] = dict(YOLO9_LAYOUT.layers)


def build_yolo9(*, size: str, nc: int, box_groups: int = 4) -> YOLO9Net:
    """Build an untrained YOLOv9 (GELAN) detector (``box_groups``: see :class:`DetectHead`).

    Example:
        >>> import torch
        >>> net = build_yolo9(size="t", nc=80)
        >>> [o.shape[1:] for o in net(torch.zeros(1, 3, 64, 64))]
        [torch.Size([144, 8, 8]), torch.Size([144, 4, 4]), torch.Size([144, 2, 2])]
    """
    check_build_args("yolo9", size=size, nc=nc, sizes=VARIANTS, box_groups=box_groups)
    return YOLO9Net(VARIANTS[size], nc=nc, box_groups=box_groups)
