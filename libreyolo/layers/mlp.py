"""The transformer feed-forward block: ``fc2(gelu(fc1(x)))`` over the last axis.

Shared by the transformer families (ViT/DeiT in ``models/_vit``, Swin); the module names
``fc1`` / ``fc2`` are the ones reference checkpoints use, so converters map them one to one.
"""

from __future__ import annotations

from torch import Tensor, nn


class Mlp(nn.Module):
    """``fc2(gelu(fc1(x)))``: Tensor[..., D] -> Tensor[..., D] through ``hidden`` channels (exact GELU).

    Example:
        >>> import torch
        >>> tuple(Mlp(8, 32)(torch.rand(2, 5, 8)).shape)
        (2, 5, 8)
    """

    def __init__(self, dim: int, hidden: int, act: nn.Module | None = None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU() if act is None else act  # exact GELU unless a family passes its own
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))
