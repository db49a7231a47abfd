"""Shared glue of encoder-decoder (DETR-style) detection families.

The network classes live in ``libreyolo/models/_detr/net.py``; this base class holds what the
families built on them share: the seam (SPEC G-9), the top-k postprocess (no NMS) and the class
declarations. Capability flags stay ``False`` here: each family sets its own from its parity rows.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from ...errors import ConfigError
from ...graphs.seam import Stage
from .._base.family import Family
from .dfine_variants import VARIANTS

DECODER_EAGER_REASON = ("in training the decoder's token count follows the largest ground-truth count of the "
                        "batch (denoising queries) and the Hungarian criterion syncs with the host")


class EncoderDecoderFamily(Family):
    """Backbone + hybrid encoder + deformable decoder; one-to-one matching, so no NMS.

    Seam (SPEC G-9): :meth:`forward_stages` = backbone + encoder, then decoder + heads; both
    capturable at inference (denoising is off, top-k has a fixed k). :meth:`train_stages` =
    backbone + encoder (capturable: it is exactly the train-mode ``net(x)``), then decoder +
    criterion (eager).

    ``iou`` and ``agnostic`` of :meth:`postprocess` are ignored: there is no NMS.
    """

    TASKS: ClassVar[tuple[str, ...]] = ("detect",)
    DEFAULT_IMGSZ: ClassVar[int] = 640
    STRIDE: ClassVar[int] = 32
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("vfl", "l1", "giou")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("logits", "boxes")  # [B, 300, nc], [B, 300, 4] xyxy px
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch",)
    # Captured decode: the top 300 (query, class) pairs, then only the conf threshold (no NMS).
    DECODE_TOPK: ClassVar[int] = 300
    DECODE_NMS: ClassVar[bool] = False

    # The reference training recipe as TrainConfig keys (AdamW, lr 1e-4, weight decay 1e-4); the
    # reference also clips the gradient norm at 0.1 of its per-box-normalised loss, i.e. about
    # 0.1 * nbs here (the loss is scaled by the batch size and accumulated to nbs images).
    # Applied by the trainer under the user's own keys.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 1e-4, "momentum": 0.9, "weight_decay": 1e-4, "mosaic": 0.0,
        "warmup_bias_lr": 0.0,  # the reference warms every group up from 0 (no separate bias lr)
    }

    def postprocess(self, raw: Any, *, conf: float, iou: float, classes: list[int] | None,
                    max_det: int, agnostic: bool) -> list[Tensor]:
        """raw = (logits Tensor[B, Q, nc], boxes Tensor[B, Q, 4] xyxy input pixels) -> per image
        Tensor[n, 6] (x1, y1, x2, y2, score, cls) float32 by decreasing score: the top
        ``min(max_det, Q)`` (query, class) pairs by sigmoid score, then ``conf``."""
        from .net import topk_detections

        nc = self.nc
        if not isinstance(raw, (tuple, list)) or len(raw) != 2 or raw[0].dim() != 3 or raw[0].shape[-1] != nc:
            shapes = [tuple(t.shape) for t in raw] if isinstance(raw, (tuple, list)) else type(raw).__name__
            raise ConfigError(f"expected the eval-mode network output (logits [B, Q, {nc}], boxes [B, Q, 4]), "
                              f"got {shapes}; was the network in train mode or built with another class count?")
        logits, boxes = raw
        return topk_detections(logits, boxes, conf=conf, classes=classes, max_det=max_det)

    def decode(self, raw: Any) -> Tensor:
        """(logits [B, Q, nc], boxes [B, Q, 4]) -> Tensor[B, min(300, Q * nc), 6] candidates: the
        top (query, class) pairs by sigmoid score, as :meth:`postprocess` takes them before ``conf``."""
        from ...ops.candidates import pack_candidates, topk_candidates

        logits, boxes = raw
        b, q, nc = logits.shape
        top, idx = topk_candidates(logits.float().sigmoid().flatten(1), self.DECODE_TOPK)
        qi, lab = idx // nc, idx % nc
        picked = boxes.float().gather(1, qi[..., None].expand(b, qi.shape[1], 4))
        return pack_candidates(picked, top, lab)

    def forward_stages(self) -> list[Stage]:
        net: Any = self.net
        return [Stage(name="backbone+encoder", fn=net.encode, capturable=True),
                Stage(name="decoder", fn=net.decode, capturable=True)]

    def train_stages(self) -> list[Stage]:
        """The training step as stages (SPEC G-9).

        Stage 0, capturable: an ``nn.Module`` holding only the backbone and encoder (its output
        equals the train-mode ``net(x)``: the three encoder maps), so a training graph of it lists
        exactly the parameters it uses. Stage 1, eager: the decoder with denoising queries, then
        the Hungarian criterion (``build_criterion()(maps, batch)`` runs both).
        """
        net: Any = self.net
        return [Stage(name="backbone+encoder", fn=net.trunk(), capturable=True),
                Stage(name="decoder+criterion", fn=net.decoder, capturable=False, reason=DECODER_EAGER_REASON)]


class FDRFamily(EncoderDecoderFamily):
    """The D-FINE network (HGNetv2, GELAN hybrid encoder, FDR decoder) as D-FINE and DEIM share it:
    its sizes (:data:`~libreyolo.models._detr.dfine_variants.VARIANTS`) and its precision limit.
    Each family keeps its own name, losses, recipe and capability flags."""

    SIZES: ClassVar[tuple[str, ...]] = tuple(VARIANTS)
    HALF_CAST: ClassVar[bool] = False
    HALF_CAST_REASON: ClassVar[str] = ("its weights cast to float16 or bfloat16 give non-finite outputs (NaN on a CPU "
                                       "check, a failing fp16 decode row on the H200); half=True runs fp32 weights "
                                       "under autocast")
