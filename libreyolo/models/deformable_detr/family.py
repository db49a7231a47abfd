"""Deformable DETR detection family: sizes r50 and r50refine (iterative box refinement); weights
``LibreDeformableDETRr50.pt``, ``LibreDeformableDETRr50refine.pt``."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from ...graphs.seam import Stage
from .._detr.family import EncoderDecoderFamily

DECODER_EAGER_REASON = "the Hungarian criterion matches on the host (a device-to-host sync per decoder layer)"


class DeformableDETR(EncoderDecoderFamily):
    """Deformable DETR (arXiv:2010.04159): ResNet-50, deformable encoder over 4 levels, 300 learned
    queries, 6 + 6 layers, no NMS. Sizes: the plain variant and iterative box refinement (no two stage).

    Seam (SPEC G-9), as the other DETRs: prediction = backbone+encoder, then decoder+heads (both
    capturable: fixed shapes, no host sync); training = backbone+encoder (capturable), then
    decoder+criterion (eager). Flags stay ``False`` until GPU parity rows exist.
    """

    FAMILY: ClassVar[str] = "deformable_detr"
    NAME_TOKEN: ClassVar[str] = "DeformableDETR"
    SIZES: ClassVar[tuple[str, ...]] = ("r50", "r50refine", "r50twostage")
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("focal", "l1", "giou")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    # The paper's recipe: AdamW, lr 2e-4, weight decay 1e-4 (applied by the trainer under the
    # user's own keys). Not modelled: the backbone's 0.1x learning rate, and the gradient-norm clip
    # of 0.1 (the trainer's own ``clip_grad`` applies, as for the other DETRs).
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 2e-4, "momentum": 0.9, "weight_decay": 1e-4, "mosaic": 0.0,
        "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_deformable_detr

        return build_deformable_detr(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .loss import build_deformable_detr_loss

        return build_deformable_detr_loss(self.net)

    def train_stages(self) -> list[Stage]:
        net: Any = self.net
        return [Stage(name="backbone+encoder", fn=net.trunk(), capturable=True),
                Stage(name="decoder+criterion", fn=net.decoder, capturable=False, reason=DECODER_EAGER_REASON)]
