"""EfficientNetV2-B0 / EfficientNetV2-S (Tan & Le, 2021) on torchvision's EfficientNet class.

Stages as (block, expand, kernel, stride, c_in, c_out, repeats); Fused = FusedMBConv, MB = MBConv
with squeeze-excitation (ratio 0.25 of the block input), SiLU, BatchNorm eps 1e-3:

* B0 (stem 32, head 1280, 7.14 M params @1000, published 7.1 M):
  Fused 1 3 1 32 16 x1 / Fused 4 3 2 16 32 x2 / Fused 4 3 2 32 48 x2 / MB 4 3 2 48 96 x3 /
  MB 6 3 1 96 112 x5 / MB 6 3 2 112 192 x8
* S (torchvision ``efficientnet_v2_s``, 21.46 M params @1000, published 21.5 M).

Contract: Tensor[B, 3, H, W] in [0, 1] -> logits Tensor[B, nc].
"""

from __future__ import annotations

from functools import partial

from torch import nn

from ...layers.classify import ImageClassifier


def build_efficientnetv2(*, size: str, nc: int) -> nn.Module:
    from torchvision.models import efficientnet_v2_s
    from torchvision.models.efficientnet import EfficientNet, FusedMBConvConfig, MBConvConfig

    if size == "s":
        body: nn.Module = efficientnet_v2_s(weights=None, num_classes=nc)
    elif size == "b0":
        f, m = FusedMBConvConfig, MBConvConfig
        stages = [f(1, 3, 1, 32, 16, 1), f(4, 3, 2, 16, 32, 2), f(4, 3, 2, 32, 48, 2),
                  m(4, 3, 2, 48, 96, 3), m(6, 3, 1, 96, 112, 5), m(6, 3, 2, 112, 192, 8)]
        body = EfficientNet(stages, dropout=0.2, stochastic_depth_prob=0.0, num_classes=nc, last_channel=1280,
                            norm_layer=partial(nn.BatchNorm2d, eps=1e-3))
    else:
        raise ValueError(f"unknown EfficientNetV2 size {size!r}")
    return ImageClassifier(body)
