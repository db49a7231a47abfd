"""YOLOv9 end-to-end network (sizes t, s): the lineage's GELAN backbone and neck
(:class:`~libreyolo.models._gelan.net.YOLO9Net`) with YOLOv10's dual head, :class:`E2EHead`.

Contract: input Tensor[B, 3, H, W] float in [0, 1], H and W multiples of 32. Output in eval mode:
the one-to-one head's list of three Tensor[B, 4 * reg_max + nc, H / s, W / s] (strides 8, 16, 32)
of raw logits, box-distribution logits first; that is all prediction and export see. In train
mode: those three followed by the one-to-many head's three (six tensors), which the loss
(:mod:`.loss`) takes apart. Static shapes, no host syncs: capturable in train and eval mode.
"""

from __future__ import annotations

from torch import Tensor, nn

from .._gelan.net import REG_MAX, STRIDES, DetectHead, YOLO9Net, check_build_args
from .._gelan.variants import VARIANTS as GELAN_VARIANTS

SIZES = ("t", "s")
VARIANTS = {s: GELAN_VARIANTS[s] for s in SIZES}


class E2EHead(nn.Module):
    """YOLOv10's consistent dual head on the GELAN features: a one-to-many branch set ``o2m``
    (trained with the task-aligned top-10 assignment) and a one-to-one set ``o2o`` (top-1), each
    a :class:`DetectHead` with YOLOv10's layout (ungrouped box branch, light depthwise-separable
    class branch). ``o2o`` starts as a copy of ``o2m`` and sees the features detached in training
    (its loss does not reach the backbone), as in the reference. Inference runs ``o2o`` only.

    feats ([Tensor[B, ch_i, h_i, w_i]]) -> eval: o2o levels; train: o2o levels + o2m levels.
    """

    def __init__(self, *, nc: int, ch: tuple[int, ...], reg_max: int = REG_MAX,
                 strides: tuple[int, ...] = STRIDES, box_groups: int = 1) -> None:
        super().__init__()
        self.nc, self.reg_max, self.strides = nc, reg_max, tuple(strides)
        kw = {"nc": nc, "ch": ch, "reg_max": reg_max, "strides": strides, "box_groups": box_groups, "light_cls": True}
        self.o2m = DetectHead(**kw)
        self.o2o = DetectHead(**kw)

    def init_bias(self, *, imgsz: int = 640) -> None:
        """Both branch sets get :meth:`DetectHead.init_bias`; ``o2o`` then equals ``o2m``."""
        self.o2m.init_bias(imgsz=imgsz)
        self.o2o.load_state_dict(self.o2m.state_dict())

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        if not self.training:  # module state, fixed between captures (not data-dependent)
            return self.o2o(feats)
        return [*self.o2o([f.detach() for f in feats]), *self.o2m(feats)]


def build_yolo9_e2e(*, size: str, nc: int) -> YOLO9Net:
    """Build an untrained YOLOv9 end-to-end detector.

    Example:
        >>> import torch
        >>> net = build_yolo9_e2e(size="t", nc=80)
        >>> len(net.eval()(torch.zeros(1, 3, 64, 64))), len(net.train()(torch.zeros(2, 3, 64, 64)))
        (3, 6)
    """
    check_build_args("yolo9_e2e", size=size, nc=nc, sizes=VARIANTS)
    return YOLO9Net(VARIANTS[size], nc=nc, box_groups=1, head_cls=E2EHead)
