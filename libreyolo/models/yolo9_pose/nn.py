"""YOLOv9 (GELAN) pose network: the lineage's :class:`YOLO9Net` with a :class:`PoseHead` (the
detection head plus one keypoint branch per level).

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float in [0, 1], H and
W multiples of 32; output, in train and eval mode alike, a list of three tensors, for strides 8,
16, 32 Tensor[B, 4 * reg_max + nc + 3 * nkpt, H / s, W / s]: box-distribution logits, class
logits, then per keypoint ``(x, y, visibility logit)`` raw values. A keypoint of the anchor at grid
cell (i, j) of stride s decodes to ``x = (2 * raw_x + j) * s``, ``y = (2 * raw_y + i) * s`` input
pixels (:func:`decode_keypoints`; the decoding of Ultralytics' ``Pose`` head) and ``sigmoid(raw_v)``.
Decoding is postprocessing, so the forward is static and CUDA-graph capturable.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import ConvBNAct
from .._gelan.net import REG_MAX, STRIDES, DetectHead, YOLO9Net, check_build_args
from .._gelan.pose import decode_keypoints  # noqa: F401 - re-exported: the decode of this head (scale 2)
from .._gelan.variants import VARIANTS as GELAN_VARIANTS

NKPT = 17  # default keypoint count (COCO persons); a dataset's kpt_shape rebuilds the head
SIZES = ("t", "s")
VARIANTS = {s: GELAN_VARIANTS[s] for s in SIZES}


class PoseHead(DetectHead):
    """:class:`DetectHead` plus, per level, a keypoint branch (3x3 conv, 3x3 conv, 1x1 conv to
    ``3 * nkpt``; width ``max(ch[0] // 4, 3 * nkpt)``, the rule of Ultralytics' ``Pose``).

    feats ([Tensor[B, ch_i, h_i, w_i]]) -> [Tensor[B, 4 * reg_max + nc + 3 * nkpt, h_i, w_i]].
    """

    def __init__(self, *, nc: int, ch: tuple[int, ...], reg_max: int = REG_MAX, strides: tuple[int, ...] = STRIDES,
                 box_groups: int = 4, nkpt: int = NKPT) -> None:
        super().__init__(nc=nc, ch=ch, reg_max=reg_max, strides=strides, box_groups=box_groups)
        self.nkpt = int(nkpt)
        nk = 3 * self.nkpt
        c_kpt = max(ch[0] // 4, nk)
        self.kpt = nn.ModuleList(
            nn.Sequential(ConvBNAct(c, c_kpt, 3), ConvBNAct(c_kpt, c_kpt, 3), nn.Conv2d(c_kpt, nk, 1)) for c in ch
        )

    def forward(self, feats: list[Tensor]) -> list[Tensor]:  # type: ignore[override]
        levels = zip(feats, self.box, self.cls, self.kpt, strict=True)
        return [torch.cat((box(x), cls(x), kpt(x)), 1) for x, box, cls, kpt in levels]


def check_nkpt(nkpt: object) -> int:
    """``nkpt`` as an int >= 1, else a one-line :class:`ConfigError`."""
    if isinstance(nkpt, bool) or not isinstance(nkpt, int) or nkpt < 1:
        raise ConfigError(f"nkpt (keypoints per object) must be an int >= 1, got {nkpt!r}")
    return nkpt


def build_yolo9_pose(*, size: str, nc: int, nkpt: int = NKPT, box_groups: int = 4) -> YOLO9Net:
    """Build an untrained YOLOv9 pose network with ``nkpt`` keypoints per object (``box_groups``: 4
    as YOLOv9's ``DDetect``, 1 as Ultralytics' ``Detect``).

    Example:
        >>> net = build_yolo9_pose(size="t", nc=2, nkpt=5)
        >>> [tuple(o.shape[1:]) for o in net(torch.zeros(1, 3, 64, 64))]
        [(81, 8, 8), (81, 4, 4), (81, 2, 2)]
    """
    check_build_args("yolo9_pose", size=size, nc=nc, sizes=VARIANTS, box_groups=box_groups)
    nkpt = check_nkpt(nkpt)
    net = YOLO9Net(VARIANTS[size], nc=nc, box_groups=box_groups, head_cls=functools.partial(PoseHead, nkpt=nkpt))
    net.nkpt = nkpt  # type: ignore[assignment]
    return net
