"""The Vision Transformer lineage: code the ViT classify families (``vit``, ``deit``, ``dinov2``) share.

``net`` holds the network (patch embedding, class token, learned position embedding resampled for
other input sizes, pre-norm transformer blocks on :class:`libreyolo.layers.attention.Attention`
with optional LayerScale, final LayerNorm, a linear head on the class token or on the class token
and the patch-token mean), ``family`` the family glue (:class:`VisionTransformerFamily`: the
``fused_attn`` architecture option with a per-family default, and the training recipe) and
``convert`` the timm tensor names, ``dinov2`` the DINOv2 backbone the ``dinov2`` and
``dinov2_reg`` families share (sizes, family base, transformers names). The contrastive image towers (``clip``, ``siglip2``) reuse the
blocks: ``towers`` (CLIP's ``ln_pre`` / class token / projection, SigLIP's attention-pooling head,
the zero-shot head over stored class text embeddings), ``zero_shot`` (their family glue,
``set_class_embeddings``), ``tower_convert`` (transformers CLIP/SigLIP vision names) and
``text_embeddings`` (optional: class embeddings from a local transformers text tower).
It imports ``layers/``, ``kernels/`` and ``models/_base``; no family folder imports back into it
from another family, and no code here branches on a family name.
"""
