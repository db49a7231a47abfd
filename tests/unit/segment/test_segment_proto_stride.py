"""Validation masks of a segmentation family whose prototypes are not at a quarter of the input:
the prototype stride comes from the family (``MASK_FEAT_STRIDE``, 4 when not declared), the
boxes are mapped with it and the masks are scored at the dataset's mask resolution (input / 4)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from libreyolo.models.yolo9_seg.postprocess import assemble_masks
from libreyolo.tasks import TASKS


class _ProtoFamily:
    MASK_FEAT_STRIDE: ClassVar[int] = 8

    def __init__(self, det: torch.Tensor) -> None:
        self.det = det

    def postprocess(self, raw: Any, **kw: Any) -> list[torch.Tensor]:
        return [self.det]

    def masks(self, proto: torch.Tensor, det: torch.Tensor, *, input_hw: tuple[int, int]) -> torch.Tensor:
        return assemble_masks(proto, det, input_hw=input_hw)


def _val_masks(stride: int) -> torch.Tensor:
    fam = _ProtoFamily(torch.tensor([[0.0, 0.0, 32.0, 32.0, 0.9, 0.0, 10.0, 10.0]]))  # top-left quarter of 64 px
    fam.MASK_FEAT_STRIDE = stride
    proto = torch.ones(1, 2, 64 // stride, 64 // stride)
    (det, masks), = TASKS["segment"].val_outputs(fam, [torch.zeros(1), proto], conf=0.1, iou=0.5, max_det=10)
    assert det.shape == (1, 6)
    return masks


def test_prototypes_at_stride_8_give_masks_at_a_quarter_of_the_input() -> None:
    masks = _val_masks(8)
    assert masks.shape == (1, 16, 16) and masks.dtype == torch.bool
    assert bool(masks[0, :8, :8].all()) and not bool(masks[0, 8:].any()) and not bool(masks[0, :, 8:].any())


def test_prototypes_at_stride_4_are_unchanged() -> None:
    masks = _val_masks(4)
    assert masks.shape == (1, 16, 16)
    assert bool(masks[0, :8, :8].all()) and int(masks.sum()) == 64
