"""DINOv2 weights from timm (``vit_{small,base,large}_patch14_dinov2``, any pretrained tag; the
official ``dinov2_vit*14_pretrain.pth`` files use the same tensor names) and from transformers
(``Dinov2Model`` / ``Dinov2ForImageClassification``, ``model_type`` ``"dinov2"``).

- timm names are the lineage's (:mod:`libreyolo.models._vit.convert`). The published backbones
  have no head: ours is then freshly initialised for :data:`BACKBONE_NC` classes (train it, the
  linear probe, with ``model.train``). A timm head reads the class token only (``global_pool=
  "token"``): it becomes ours with zero weights on the patch-mean half, the same logits.
- transformers names (either prefix, the Hub files' ``attention.attention.{query,key,value}`` /
  ``attention.output.dense`` or the newer ``attention.{q,k,v,o}_proj``) are renamed to timm's,
  query/key/value concatenated into one ``qkv`` projection. ``classifier`` reads the class token
  and the patch-token mean, as our head: copied as is.
- The mask token (used only by DINOv2's masked-image pretraining) is dropped; the SwiGLU MLP
  (ViT-g/14) has no place here and is named in the error. Register-token checkpoints are the
  ``dinov2_reg`` family's (:mod:`libreyolo.models.dinov2_reg.convert`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from .._vit.convert import convert_state_dict as convert_timm_names
from .._vit.dinov2 import BACKBONE_NC, fit_head, hf_to_timm, is_hf, match_dinov2
from .nn import SPECS

SOURCES = ("timm", "transformers")
ARCHS = {"vit_small_patch14_dinov2": "s14", "vit_base_patch14_dinov2": "b14", "vit_large_patch14_dinov2": "l14"}
WIDTHS = {spec.dim: size for size, spec in SPECS.items()}  # transformers configs: hidden_size -> size
__all__ = ["SOURCES", "ARCHS", "BACKBONE_NC", "match", "convert_state_dict", "fit_head", "hf_to_timm"]


def match(fw: Any) -> tuple[str, int] | None:
    """(size, nc) of a timm DINOv2 architecture or a transformers ``dinov2`` checkpoint, else None;
    nc is the head's row count, :data:`BACKBONE_NC` for a backbone without one."""
    return match_dinov2(fw, timm_archs=ARCHS, hf_model_type="dinov2", widths=WIDTHS)


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """timm or transformers DINOv2 state dict -> ours (first misfit named; module docstring)."""
    sd = hf_to_timm(src) if is_hf(src) else {k: v for k, v in src.items() if k != "mask_token"}
    return convert_timm_names(fit_head(sd, own), own)
