"""The Vision Transformer lineage: code the plain-ViT classify families (``vit``, ``deit``) share.

``net`` holds the network (patch embedding, class token, learned position embedding resampled for
other input sizes, pre-norm transformer blocks on :class:`libreyolo.layers.attention.Attention`,
final LayerNorm, linear head), ``family`` the family glue (:class:`VisionTransformerFamily`: the
``fused_attn`` architecture option and the training recipe) and ``convert`` the timm tensor names.
It imports ``layers/``, ``kernels/`` and ``models/_base``; no family folder imports back into it
from another family, and nothing here names a family.
"""
