"""Shared glue of the promptable-segmentation families (task ``prompt``, ``-prompt`` weights).

A SAM-lineage family supplies only :meth:`Family.build_net` (a :class:`~.net.SamNet`); this
base holds the seam, the postprocess, the criterion and the declarations.

Seam (SPEC G-9): :meth:`forward_stages` = the image encoder (capturable: one graph per input
shape) then the prompt encoder + mask decoder (eager: the number and kind of prompts change per
call). Prompts reach the eager stage through :meth:`prompting`, a context the prompt task
opens around the network step; without one the stage answers the default prompt (one
foreground point at the input's centre), which is also what ``net(x)``, an ONNX export and the
eager contract compute. The image embedding is computed once per image (replayed under a CUDA
graph) and every prompt of the call reuses it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from ...graphs.seam import Stage
from .._base.family import Family
from .._base.fused_attn import FusedAttentionOption
from .loss import PromptLoss
from .prompt import Prompts

NAMES = {0: "object"}
DECODER_EAGER_REASON = ("per-prompt: the prompt count and kind change per call, so the prompt encoder + mask "
                        "decoder run eager on the replayed image embedding")


class SamFamily(FusedAttentionOption, Family):
    TASKS: ClassVar[tuple[str, ...]] = ("prompt",)
    OUTPUT_KIND: ClassVar[str] = "prompt"
    DEFAULT_IMGSZ: ClassVar[int] = 1024
    STRIDE: ClassVar[int] = 16
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("focal", "dice", "iou")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("masks", "iou", "embeddings")
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch",)
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = ("no bitwise parity run of the seam (captured image encoder + eager prompt "
                                        "decoder) recorded yet: tests/gpu/test_sam_gpu.py")
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no training-capture parity run recorded; the decoder fine-tunes eager"
    FUSED_ATTN_DEFAULT: ClassVar[bool] = False
    # SAM's fine-tuning recipe as the reference repositories describe it: AdamW, frozen image encoder
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 1e-4, "weight_decay": 0.01, "warmup_bias_lr": 0.0, "freeze": "image_encoder",
        "mosaic": 0.0,
    }

    def __init__(self, *, size: str, task: str | None = None, nc: int = 1,
                 names: dict[int, str] | list[str] | None = None, imgsz: int | None = None) -> None:
        """A promptable model has no classes: ``nc`` is always 1, the one name ``"object"``."""
        one = names if names is not None and len(names) == 1 else NAMES
        super().__init__(size=size, task=task, nc=1, names=one, imgsz=imgsz or self.size_imgsz(size))
        self._prompts: Prompts | None = None

    @classmethod
    def size_imgsz(cls, size: str) -> int:
        return cls.DEFAULT_IMGSZ

    # ------------------------------------------------------------------ the seam
    @contextmanager
    def prompting(self, prompts: Prompts | None) -> Iterator[None]:
        """Within the block the eager prompt stage answers ``prompts`` (network-input pixels)."""
        old, self._prompts = self._prompts, prompts
        try:
            yield
        finally:
            self._prompts = old

    def _encode(self, x: Tensor) -> Tensor:
        return self.net.encode(x)

    def _decode(self, emb: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.net.decode(emb, self._prompts)

    def forward_stages(self) -> list[Stage]:
        return [Stage(name="image_encoder", fn=self._encode, capturable=True),
                Stage(name="prompt_decoder", fn=self._decode, capturable=False, reason=DECODER_EAGER_REASON)]

    # ------------------------------------------------------------------ outputs
    def postprocess(self, raw: Any, *, conf: float = 0.0, iou: float = 0.0, classes: list[int] | None = None,
                    max_det: int = 0, agnostic: bool = False) -> list[dict[str, Tensor]]:
        """(mask logits Tensor[B, P, M, h, w], IoU Tensor[B, P, M], embeddings) -> per image
        ``{"masks": Tensor[P*M, H, W] float32 logits at the network input's size, "scores":
        Tensor[P*M] float32 predicted IoU}``. The detection options do not apply."""
        masks, ious = raw[0], raw[1]
        b, p, m, h, w = masks.shape
        hw = (h * 4, w * 4)
        up = F.interpolate(masks.float().reshape(b, p * m, h, w), size=hw, mode="bilinear", align_corners=False)
        return [{"masks": up[i], "scores": ious[i].float().reshape(-1)} for i in range(b)]

    def build_criterion(self) -> PromptLoss:
        return PromptLoss(self)

    def decode_prompts(self, emb: Tensor, prompts: Prompts) -> tuple[Tensor, Tensor]:
        """The prompt path alone on given embeddings: (mask logits, IoU predictions)."""
        masks, iou, _ = self.net.decode(emb, prompts)
        return masks, iou


def box_prompts(bboxes: Tensor, size: int) -> Tensor:
    """Normalised cx cy w h Tensor[N, 4] -> x1 y1 x2 y2 Tensor[N, 4] in pixels of a ``size`` input."""
    cx, cy, w, h = (bboxes.float() * size).unbind(-1)
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)
