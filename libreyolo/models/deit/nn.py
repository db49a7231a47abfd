"""DeiT-Tiny and DeiT-Small (Touvron et al., 2021): the ViT network trained data-efficiently.

=====  =====  =====  =====  =========  ======  ===================================
size   width  depth  heads  MLP ratio  patch   params @1000 (published)
=====  =====  =====  =====  =========  ======  ===================================
t      192    12     3      4          16      5.72 M (5.7 M)
s      384    12     6      4          16      22.05 M (22.1 M)
=====  =====  =====  =====  =========  ======  ===================================

The non-distilled models (no distillation token). Trained grid 14 x 14 (224 px). Contract:
Tensor[B, 3, H, W] float in [0, 1] -> logits Tensor[B, nc].
"""

from __future__ import annotations

from .._vit.net import ViTSpec

SPECS: dict[str, ViTSpec] = {
    "t": ViTSpec(dim=192, depth=12, heads=3),
    "s": ViTSpec(dim=384, depth=12, heads=6),
}
