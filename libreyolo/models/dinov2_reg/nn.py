"""DINOv2 with registers (Darcet et al., 2024): ViT-S/14, ViT-B/14, ViT-L/14 with four register
tokens and the DINOv2 linear classification head.

=====  =====  =====  =====  =========  =========  ==========================================
size   width  depth  heads  patch      registers  backbone params (published) + head @1000
=====  =====  =====  =====  =========  =========  ==========================================
s14    384    12     6      14         4          22.06 M (timm card 22.1 M) + 0.77 M
b14    768    12     12     14         4          86.58 M (timm card 86.6 M) + 1.54 M
l14    1024   24     16     14         4          304.37 M (timm card 304.4 M) + 2.05 M
=====  =====  =====  =====  =========  =========  ==========================================

The network is the DINOv2 backbone of the lineage (:mod:`libreyolo.models._vit.dinov2`) with ``ViTSpec.registers = 4``: four learned
tokens inserted after the class token once the position embedding has been added (they have no
position of their own), carried through every block and dropped before the head, whose input is
the class token and the mean of the patch tokens (the registers are not patches). For inputs other
than 518 px the position embedding is resampled bicubically *with antialiasing* (as the reference
for these models; plain DINOv2 resamples without). Contract:
Tensor[B, 3, H, W] float in [0, 1] -> logits Tensor[B, nc].
"""

from __future__ import annotations

import dataclasses

from .._vit.dinov2 import DINOV2_SPECS
from .._vit.net import ViTSpec

REGISTERS = 4  # every published DINOv2-with-registers checkpoint (``*_reg4_dinov2``, ``dinov2_vit*14_reg``)

# the reference (facebookresearch/dinov2's hub entries for these models, transformers' port) resamples
# the position embedding with antialiasing, by output size; the plain DINOv2 models do not
SPECS: dict[str, ViTSpec] = {size: dataclasses.replace(spec, registers=REGISTERS, pos_antialias=True)
                             for size, spec in DINOV2_SPECS.items()}
