"""ResNet-18 / ResNet-50 (He et al., 2016) from the torchvision builders (``weights=None``).

The torchvision definitions follow the paper (basic blocks for 18, bottlenecks with the stride
on the 3x3 conv for 50, the "v1.5" placement). Parameters at 1000 classes: 11.69 M / 25.56 M
(published 11.7 M / 25.6 M). Contract: Tensor[B, 3, H, W] in [0, 1] -> logits Tensor[B, nc].
"""

from __future__ import annotations

from torch import nn

from ...layers.classify import ImageClassifier


def build_resnet(*, size: str, nc: int) -> nn.Module:
    from torchvision.models import resnet18, resnet50

    builders = {"18": resnet18, "50": resnet50}
    if size not in builders:
        raise ValueError(f"unknown ResNet size {size!r}")
    return ImageClassifier(builders[size](weights=None, num_classes=nc))
