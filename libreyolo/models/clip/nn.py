"""CLIP ViT-B/16 image tower (Radford et al., 2021) with a zero-shot class head, and t16, a small
size without published weights (tests, contract runs, experiments).

=====  =====  =====  =====  =========  =====  ==========  =================================
size   width  depth  heads  MLP ratio  patch  embedding   tower params (transformers)
=====  =====  =====  =====  =========  =====  ==========  =================================
t16    192    12     3      4          16     512         5.62 M (no reference)
b16    768    12     12     4          16     512         86.19 M (86.19 M)
=====  =====  =====  =====  =========  =====  ==========  =================================

Class token and learned positions (trained grid 14 x 14 at 224 px, resampled bicubically for
other sizes), ``ln_pre``, QuickGELU MLPs, LayerNorm eps 1e-5, ``ln_post`` on the class token and
a bias-free projection to 512. Input statistics: CLIP's mean/std. Head: logits = 100 *
cos(image embedding, class embedding). Contract: Tensor[B, 3, H, W] float in [0, 1] -> logits
Tensor[B, nc].
"""

from __future__ import annotations

from dataclasses import replace

from .._vit.towers import TowerSpec

_B16 = TowerSpec(dim=768, depth=12, heads=12, patch=16, pool="cls", embed_dim=512, act="quick_gelu",
                 ln_eps=1e-5, scale=100.0, bias=0.0)

SPECS: dict[str, TowerSpec] = {
    # t16: a small size without published weights (tests, contract runs, experiments)
    "t16": replace(_B16, dim=192, heads=3, embed_dim=512),
    "b16": _B16,
}
