"""SAM sizes (Kirillov et al., 2023, "Segment Anything", Table / appendix A; the released
checkpoints): ViT image encoders at 1024 px, patch 16, windows of 14 with four global-attention
blocks, a 256-channel neck; one prompt encoder + mask decoder for all sizes.

``tiny`` is libreyolo's own test size (no published weights): the same architecture at 64 px
with a 32-channel embedding, for CPU tests in seconds.
"""

from __future__ import annotations

# size: (img_size, dim, depth, heads, global-attention blocks, window, embedding / decoder width,
#        decoder heads, decoder MLP width, IoU-head width)
VARIANTS: dict[str, tuple[int, int, int, int, tuple[int, ...], int, int, int, int, int]] = {
    "tiny": (64, 32, 2, 2, (1,), 2, 32, 2, 64, 32),
    "vit_b": (1024, 768, 12, 12, (2, 5, 8, 11), 14, 256, 8, 2048, 256),
    "vit_l": (1024, 1024, 24, 16, (5, 11, 17, 23), 14, 256, 8, 2048, 256),
    "vit_h": (1024, 1280, 32, 16, (7, 15, 23, 31), 14, 256, 8, 2048, 256),
}

# published parameter counts (millions): the segment-anything checkpoints' state-dict sizes
# (ViT-B 93.7 M = 89.7 M image encoder + 4.06 M prompt encoder / mask decoder; ViT-L 312.3 M;
# ViT-H 641.1 M), as the SAM model card and the MobileSAM paper (Table 1) report them
PARAMS_M: dict[str, tuple[float, float]] = {  # size: (total, image encoder)
    "vit_b": (93.7, 89.7),
    "vit_l": (312.3, 308.3),
    "vit_h": (641.1, 637.0),
}
