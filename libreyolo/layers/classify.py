"""Shared pieces of the classification networks.

:class:`ImageClassifier` wraps a classification body so that every classify family has the same
contract: Tensor[B, 3, H, W] float in [0, 1] (RGB) -> logits Tensor[B, nc], in train and eval mode.
The input is standardised with the ImageNet channel statistics first (a fixed buffer), as the
published models expect; the forward has no data-dependent control flow (capture-safe).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ImageClassifier(nn.Module):
    """``body(standardise(x))``; ``body`` maps a standardised batch to logits Tensor[B, nc]."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.body((x - self.mean.to(x.dtype)) / self.std.to(x.dtype))

    def classifier(self) -> nn.Linear:
        """The final linear layer (the head that a new class count replaces)."""
        last = [m for m in self.body.modules() if isinstance(m, nn.Linear)]
        return last[-1]
