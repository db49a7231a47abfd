"""Reference checkpoints onto the SAM lineage's network (:class:`~.net.SamNet`).

* ``segment-anything`` / MobileSAM checkpoints (``sam_vit_b_01ec64.pth``, ``mobile_sam.pt``):
  the same key names as ours; the classification head MobileSAM's TinyViT carries
  (``image_encoder.head`` / ``norm_head``) is unused and dropped.
* transformers ``SamModel`` (``model_type`` ``sam``): renamed key by key (:func:`rename_hf`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._base.convert_rules import fit, rename_all

_HF_SUBS: list[tuple[str, str]] = [
    (r"^vision_encoder\.patch_embed\.projection\.", "image_encoder.patch_embed.proj."),
    (r"^vision_encoder\.pos_embed$", "image_encoder.pos_embed"),
    (r"^vision_encoder\.layers\.(\d+)\.layer_norm([12])\.", r"image_encoder.blocks.\1.norm\2."),
    (r"^vision_encoder\.layers\.(\d+)\.", r"image_encoder.blocks.\1."),
    (r"^vision_encoder\.neck\.conv1\.", "image_encoder.neck.0."),
    (r"^vision_encoder\.neck\.layer_norm1\.", "image_encoder.neck.1."),
    (r"^vision_encoder\.neck\.conv2\.", "image_encoder.neck.2."),
    (r"^vision_encoder\.neck\.layer_norm2\.", "image_encoder.neck.3."),
    (r"^shared_image_embedding\.positional_embedding$", "prompt_encoder.pe_layer.positional_encoding_gaussian_matrix"),
    (r"^prompt_encoder\.mask_embed\.conv1\.", "prompt_encoder.mask_downscaling.0."),
    (r"^prompt_encoder\.mask_embed\.layer_norm1\.", "prompt_encoder.mask_downscaling.1."),
    (r"^prompt_encoder\.mask_embed\.conv2\.", "prompt_encoder.mask_downscaling.3."),
    (r"^prompt_encoder\.mask_embed\.layer_norm2\.", "prompt_encoder.mask_downscaling.4."),
    (r"^prompt_encoder\.mask_embed\.conv3\.", "prompt_encoder.mask_downscaling.6."),
    (r"^prompt_encoder\.point_embed\.", "prompt_encoder.point_embeddings."),
    (r"^(mask_decoder\.transformer\.layers\.\d+)\.layer_norm([1-4])\.", r"\1.norm\2."),
    (r"^mask_decoder\.transformer\.layer_norm_final_attn\.", "mask_decoder.transformer.norm_final_attn."),
    (r"^mask_decoder\.upscale_conv1\.", "mask_decoder.output_upscaling.0."),
    (r"^mask_decoder\.upscale_layer_norm\.", "mask_decoder.output_upscaling.1."),
    (r"^mask_decoder\.upscale_conv2\.", "mask_decoder.output_upscaling.3."),
    (r"^(mask_decoder\.(?:output_hypernetworks_mlps\.\d+|iou_prediction_head))\.proj_in\.", r"\1.layers.0."),
    (r"^(mask_decoder\.(?:output_hypernetworks_mlps\.\d+|iou_prediction_head))\.layers\.0\.", r"\1.layers.1."),
    (r"^(mask_decoder\.(?:output_hypernetworks_mlps\.\d+|iou_prediction_head))\.proj_out\.", r"\1.layers.2."),
]
_HF_KEEP = (r"^prompt_encoder\.(no_mask_embed|not_a_point_embed)\.", r"^mask_decoder\.(iou_token|mask_tokens)\.",
            r"^mask_decoder\.transformer\.(layers\.\d+\.(self_attn|cross_attn_\w+|mlp)|final_attn_token_to_image)\.")


def rename_hf(key: str) -> str | None:
    """A transformers ``SamModel`` key -> ours (``None``: a tied duplicate, dropped)."""
    if key == "prompt_encoder.shared_embedding.positional_embedding":
        return None  # tied to shared_image_embedding
    for pat, rep in _HF_SUBS:
        if re.search(pat, key):
            return re.sub(pat, rep, key)
    if any(re.search(p, key) for p in _HF_KEEP):
        return key
    raise CheckpointError(f"transformers SAM key {key!r} is not known to the converter")


def convert_hf(src: Mapping[str, Tensor], own: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """transformers ``SamModel`` state dict -> ours (the first misfit is named)."""
    return fit(rename_all(src, rename_hf), own)


def convert_official(src: Mapping[str, Tensor], own: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """segment-anything / MobileSAM state dict -> ours (same names; TinyViT's unused head dropped)."""
    def rename(k: str) -> str | None:
        return None if re.match(r"^image_encoder\.(head|norm_head)\.", k) or "attention_bias_idxs" in k else k
    return fit(rename_all(src, rename), own)
