"""YOLOv9-P2 network (sizes t, s): the lineage's :class:`YOLO9Net` with the stride-4 neck
extension (:class:`~libreyolo.models._gelan.net.P2Neck`) and the :class:`DetectHead` on four
levels.

Contract: input Tensor[B, 3, H, W] float in [0, 1], H and W multiples of 32; output, in train and
eval mode alike, a list of four tensors for strides 4, 8, 16, 32, each
Tensor[B, 4 * reg_max + nc, H / s, W / s] of raw logits (box distribution logits first, then class
logits). Decoding is postprocessing, so the forward is static and CUDA-graph capturable.
"""

from __future__ import annotations

from .._gelan.net import YOLO9Net, check_build_args
from .variants import P2_NECKS, VARIANTS


def build_yolo9_p2(*, size: str, nc: int, box_groups: int = 4) -> YOLO9Net:
    """Build an untrained YOLOv9-P2 detector (``box_groups``: 4 as YOLOv9's ``DDetect``, 1 as
    Ultralytics' ``Detect``).

    Example:
        >>> import torch
        >>> net = build_yolo9_p2(size="t", nc=80)
        >>> net.strides, [tuple(o.shape[2:]) for o in net(torch.zeros(1, 3, 64, 64))]
        ((4, 8, 16, 32), [(16, 16), (8, 8), (4, 4), (2, 2)])
    """
    check_build_args("yolo9_p2", size=size, nc=nc, sizes=VARIANTS, box_groups=box_groups)
    return YOLO9Net(VARIANTS[size], nc=nc, box_groups=box_groups, p2_neck=P2_NECKS[size])
