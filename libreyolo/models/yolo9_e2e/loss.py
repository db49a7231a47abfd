"""YOLOv9 end-to-end loss: YOLOv10's consistent dual assignment.

Both heads are scored by the lineage's task-aligned loss (:class:`~libreyolo.models._gelan.loss.YOLO9Loss`:
BCE class, CIoU + DFL box terms, gains 7.5 / 0.5 / 1.5) with the same matching metric
(``score**0.5 * IoU**6``): the one-to-many head with each ground truth's top 10 anchors, the
one-to-one head with its single best anchor (top-1), which is what lets inference skip NMS. The
total is their sum (YOLOv10, arXiv:2405.14458, section 3.1). Eager, like the lineage loss.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .._gelan.loss import YOLO9Loss


class E2ELoss(nn.Module):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: the train-mode network output, the one-to-one levels then the one-to-many levels
    (2 x L tensors); or the eval-mode output (the L one-to-one levels), which scores the
    one-to-one head alone (validation losses). batch: as for :class:`YOLO9Loss`.
    Returns loss (Tensor[], float32) = sum of both heads' losses (each ``(box + cls + dfl) * B``)
    and loss_items (detached): one-to-one box, cls, dfl, then one-to-many box, cls, dfl (only the
    first three for eval-mode input), each already times its gain.

    Example:
        >>> crit = model.build_criterion()  # doctest: +SKIP
        >>> loss, items = crit(model.net.train()(imgs), batch)  # doctest: +SKIP
    """

    def __init__(self, net: Any, *, o2m_topk: int = 10, o2o_topk: int = 1) -> None:
        super().__init__()
        self.levels = len(net.strides)
        self.o2o = YOLO9Loss(net, topk=o2o_topk)
        self.o2m = YOLO9Loss(net, topk=o2m_topk)

    def forward(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        preds = list(preds)
        n = self.levels
        loss_o, items_o = self.o2o(preds[:n], batch)
        if len(preds) == n:
            return loss_o, items_o
        loss_m, items_m = self.o2m(preds[n:], batch)
        return loss_o + loss_m, torch.cat((items_o, items_m))
