"""ConvNeXt-Atto / ConvNeXt-Tiny (Liu et al., 2022) on torchvision's ConvNeXt class (no weights).

============  =====================  ==============  =============================
size          widths                 depths          params @1000 (published)
============  =====================  ==============  =============================
atto          40, 80, 160, 320       2, 2, 6, 2      3.70 M (3.7 M)
tiny          96, 192, 384, 768      3, 3, 9, 3      28.59 M (28.6 M)
============  =====================  ==============  =============================

Blocks: 7x7 depthwise conv, LayerNorm, 4x MLP with GELU, layer scale 1e-6; 4x4 patchify stem and
2x2 strided downsampling. Stochastic depth 0.1 for tiny, 0 for atto. Contract: Tensor[B, 3, H, W] in
[0, 1] -> logits Tensor[B, nc].
"""

from __future__ import annotations

from torch import nn

from ...layers.classify import ImageClassifier

_SPECS = {"atto": ((40, 80, 160, 320), (2, 2, 6, 2), 0.0), "tiny": ((96, 192, 384, 768), (3, 3, 9, 3), 0.1)}


def build_convnext(*, size: str, nc: int) -> nn.Module:
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    if size not in _SPECS:
        raise ValueError(f"unknown ConvNeXt size {size!r}")
    widths, depths, drop_path = _SPECS[size]
    cfg = [CNBlockConfig(widths[i], widths[i + 1] if i + 1 < len(widths) else None, depths[i])
           for i in range(len(widths))]
    return ImageClassifier(ConvNeXt(cfg, stochastic_depth_prob=drop_path, num_classes=nc))
