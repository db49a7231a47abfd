"""Weight initialisation shared by the transformer families.

The ViT / Swin family of networks starts from the same recipe: every linear layer's weight drawn
from a truncated normal (std 0.02) and its bias set to zero. Converted weights replace all of it;
the recipe matters for untrained builds (``pretrained=False``) and for the layers a fine-tune adds.
"""

from __future__ import annotations

from torch import nn


def trunc_normal_linears(module: nn.Module, *, std: float = 0.02, layernorm: bool = False) -> None:
    """Initialise every ``nn.Linear`` under ``module`` (itself included): weight from a truncated
    normal with standard deviation ``std`` (cut at +-2, absolute), bias zero. With ``layernorm``
    every ``nn.LayerNorm`` gets weight 1 and bias 0 too. Other modules are left as they are.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from libreyolo.layers.init import trunc_normal_linears
        >>> net = nn.Sequential(nn.Linear(8, 4), nn.Conv2d(3, 3, 1), nn.Linear(4, 2, bias=False))
        >>> trunc_normal_linears(net)
        >>> bool(net[0].bias.abs().sum() == 0), bool(net[0].weight.abs().max() <= 2.0)
        (True, True)
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif layernorm and isinstance(m, nn.LayerNorm) and m.elementwise_affine:
            nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
