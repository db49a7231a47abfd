"""CLIP ViT-B/16 image tower (Radford et al., 2021) with a zero-shot class head.

=====  =====  =====  =====  =========  =====  ==========  =================================
size   width  depth  heads  MLP ratio  patch  embedding   tower params (transformers)
=====  =====  =====  =====  =========  =====  ==========  =================================
b16    768    12     12     4          16     512         86.19 M (86.19 M)
=====  =====  =====  =====  =========  =====  ==========  =================================

Class token and learned positions (trained grid 14 x 14 at 224 px, resampled bicubically for
other sizes), ``ln_pre``, QuickGELU MLPs, LayerNorm eps 1e-5, ``ln_post`` on the class token and
a bias-free projection to 512. Input statistics: CLIP's mean/std. Head: logits = 100 *
cos(image embedding, class embedding). Contract: Tensor[B, 3, H, W] float in [0, 1] -> logits
Tensor[B, nc].
"""

from __future__ import annotations

from .._vit.towers import TowerSpec

SPECS: dict[str, TowerSpec] = {
    "b16": TowerSpec(dim=768, depth=12, heads=12, patch=16, pool="cls", embed_dim=512, act="quick_gelu",
                     ln_eps=1e-5, scale=100.0, bias=0.0),
}
