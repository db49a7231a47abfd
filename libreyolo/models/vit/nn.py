"""ViT-S/16 and ViT-B/16 (Dosovitskiy et al., 2021; the S width from Steiner et al., 2022).

=====  =====  =====  =====  =========  ======  ===================================
size   width  depth  heads  MLP ratio  patch   params @1000 (published)
=====  =====  =====  =====  =========  ======  ===================================
s16    384    12     6      4          16      22.05 M (22.1 M)
b16    768    12     12     4          16      86.57 M (86.6 M)
=====  =====  =====  =====  =========  ======  ===================================

Trained grid 14 x 14 (224 px); other input sizes resample the position embedding. Contract:
Tensor[B, 3, H, W] float in [0, 1] -> logits Tensor[B, nc].
"""

from __future__ import annotations

from .._vit.net import ViTSpec

SPECS: dict[str, ViTSpec] = {
    "s16": ViTSpec(dim=384, depth=12, heads=6),
    "b16": ViTSpec(dim=768, depth=12, heads=12),
}
