"""RT-DETR raw outputs -> detections (eager). No NMS: one-to-one matching makes duplicates rare,
so the top ``min(max_det, 300)`` (query, class) pairs by sigmoid score are kept, then ``conf``."""

from __future__ import annotations

from torch import Tensor

from ...errors import ConfigError
from ...layers.detr_net import topk_detections


def postprocess(raw: tuple[Tensor, Tensor], *, nc: int, conf: float, classes: list[int] | None,
                max_det: int) -> list[Tensor]:
    """raw = (logits Tensor[B, Q, nc], boxes Tensor[B, Q, 4] xyxy input pixels) -> per image
    Tensor[n, 6] (x1, y1, x2, y2, score, cls) float32, by decreasing score."""
    if not isinstance(raw, (tuple, list)) or len(raw) != 2 or raw[0].dim() != 3 or raw[0].shape[-1] != nc:
        shapes = [tuple(t.shape) for t in raw] if isinstance(raw, (tuple, list)) else type(raw).__name__
        raise ConfigError(f"expected the eval-mode network output (logits [B, Q, {nc}], boxes [B, Q, 4]), got "
                          f"{shapes}; was the network in train mode or built with another class count?")
    logits, boxes = raw
    return topk_detections(logits, boxes, conf=conf, classes=classes, max_det=max_det)
