"""SigLIP 2 base/16 image tower at 224 px (Tschannen et al., 2025) with a zero-shot class head, and
t16, a small size without published weights (tests, contract runs, experiments).

=====  =====  =====  =====  =========  =====  ==========  =================================
size   width  depth  heads  MLP ratio  patch  embedding   tower params (transformers)
=====  =====  =====  =====  =========  =====  ==========  =================================
t16    192    12     3      4          16     192         5.97 M (no reference)
b16    768    12     12     4          16     768         92.88 M (92.88 M)
=====  =====  =====  =====  =========  =====  ==========  =================================

No class token: learned positions (grid 14 x 14 at 224 px, resampled bicubically for other
sizes), tanh-GELU MLPs, LayerNorm eps 1e-6, a final LayerNorm over all tokens and a multi-head
attention-pooling head (one probe token) giving the 768-wide embedding, no projection. Input
statistics: mean 0.5, std 0.5. Head: logits = scale * cos + bias (the learned SigLIP scale and
bias; initial values 10 and -10). Contract: Tensor[B, 3, H, W] float in [0, 1] -> logits
Tensor[B, nc].
"""

from __future__ import annotations

from dataclasses import replace

from .._vit.towers import TowerSpec

_B16 = TowerSpec(dim=768, depth=12, heads=12, patch=16, pool="map", embed_dim=768, act="gelu_tanh",
                 ln_eps=1e-6, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), scale=10.0, bias=-10.0)

SPECS: dict[str, TowerSpec] = {
    # t16: a small size without published weights (tests, contract runs, experiments)
    "t16": replace(_B16, dim=192, heads=3, embed_dim=192),
    "b16": _B16,
}
