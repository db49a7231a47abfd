"""Shared checks of the classifier fidelity tests (imported by name: pytest puts this folder on
``sys.path``): ImageNet standardisation of the references' inputs, the relative error, and the
random draws that keep a fresh ViT-lineage reference from hiding a swapped or dropped tensor."""

from __future__ import annotations

import torch
from torch import nn

from libreyolo.layers.classify import IMAGENET_MEAN, IMAGENET_STD


def standardise(x: torch.Tensor) -> torch.Tensor:
    return (x - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-12))


@torch.no_grad()
def randomise_vit(ref: nn.Module) -> nn.Module:
    """Norm and layer-scale tensors near 1 (biases near 0), the class and register tokens and the
    head at random: a fresh init (gamma 1, beta 0, layer scales 1e-5, ~0 tokens) would hide a
    swapped or dropped tensor; with a random head the logits are far from zero."""
    g = torch.Generator().manual_seed(1)
    for name, p in ref.named_parameters():
        parts = name.split(".")
        if parts[-1] in ("gamma", "lambda1") or (len(parts) > 1 and "norm" in parts[-2]):  # LayerScale, LayerNorm
            p.copy_(0.1 * torch.randn(p.shape, generator=g) if parts[-1] == "bias"
                    else 0.75 + 0.5 * torch.rand(p.shape, generator=g))
        elif name.endswith(("cls_token", "reg_token", "register_tokens")) or name.startswith(("head.", "classifier.")):
            p.copy_(torch.randn(p.shape, generator=g))
    return ref
