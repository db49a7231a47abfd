"""DINOv2 ViT-S/14, ViT-B/14 and ViT-L/14 (Oquab et al., 2024) with a linear classification head.

=====  =====  =====  =====  =========  ======  ==========================================
size   width  depth  heads  MLP ratio  patch   backbone params (published) + head @1000
=====  =====  =====  =====  =========  ======  ==========================================
s14    384    12     6      4          14      22.06 M (timm 22.1 M; paper 21 M) + 0.77 M
b14    768    12     12     4          14      86.58 M (timm 86.6 M; paper 86 M) + 1.54 M
l14    1024   24     16     4          14      304.37 M (timm 304.4 M; paper 300 M) + 2.05 M
=====  =====  =====  =====  =========  ======  ==========================================

The backbone: a ViT with 14 px patches, LayerScale (initial 1e-5) on every residual branch, and
a position embedding trained for 518 px (37 x 37 patches + the class token), resampled for other
sizes. The head is DINOv2's linear evaluation on the last block: the class token concatenated
with the mean of the patch tokens (both after the final LayerNorm), 2 x width -> nc. ViT-g/14
(SwiGLU MLP) and the register-token variants are not built. Contract: Tensor[B, 3, H, W] float
in [0, 1] -> logits Tensor[B, nc].
"""

from __future__ import annotations

from .._vit.dinov2 import DINOV2_SPECS
from .._vit.net import ViTSpec

SPECS: dict[str, ViTSpec] = dict(DINOV2_SPECS)  # the sizes live in the lineage (models/_vit/dinov2.py)
