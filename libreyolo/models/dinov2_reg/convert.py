"""DINOv2-with-registers weights from timm (``vit_{small,base,large}_patch14_reg4_dinov2``, any
pretrained tag), the official ``dinov2_vit*14_reg4_pretrain.pth`` files and transformers
(``Dinov2WithRegistersModel`` / ``...ForImageClassification``, ``model_type``
``"dinov2_with_registers"``).

- timm keeps the registers in ``reg_token`` and builds these models with ``no_embed_class``: its
  ``pos_embed`` has no row for the class token (the official checkpoint's class-token position was
  added into ``cls_token`` when timm converted it). Ours has that row, so it becomes zeros: the
  class token then enters the blocks exactly as in timm.
- The official checkpoint names the registers ``register_tokens`` and keeps the class-token row;
  transformers names them ``embeddings.register_tokens`` (the other names as plain DINOv2,
  :func:`libreyolo.models._vit.dinov2.hf_to_timm`). Both map straight onto ours.
- Heads as in the plain DINOv2 converter (:func:`~libreyolo.models._vit.dinov2.fit_head`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from .._vit.convert import convert_state_dict as convert_timm_names
from .._vit.dinov2 import fit_head, hf_to_timm, match_dinov2
from .nn import SPECS

SOURCES = ("timm", "transformers")
ARCHS = {"vit_small_patch14_reg4_dinov2": "s14", "vit_base_patch14_reg4_dinov2": "b14",
         "vit_large_patch14_reg4_dinov2": "l14"}
HF_ARCH = "dinov2_with_registers"
WIDTHS = {spec.dim: size for size, spec in SPECS.items()}
_HF_REG = ("embeddings.register_tokens", "dinov2_with_registers.embeddings.register_tokens")
__all__ = ["SOURCES", "ARCHS", "HF_ARCH", "match", "convert_state_dict"]


def match(fw: Any) -> tuple[str, int] | None:
    """(size, nc) of a timm DINOv2-with-registers architecture or a transformers
    ``dinov2_with_registers`` checkpoint, else None (nc: :data:`BACKBONE_NC` without a head)."""
    return match_dinov2(fw, timm_archs=ARCHS, hf_model_type=HF_ARCH, widths=WIDTHS)


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """timm, official or transformers DINOv2-with-registers state dict -> ours (module docstring)."""
    if any(k.endswith("embeddings.cls_token") for k in src):  # transformers
        rest = {k.removeprefix("dinov2_with_registers."): v for k, v in src.items() if k not in _HF_REG}
        regs = [v for k, v in src.items() if k in _HF_REG]
        sd = hf_to_timm({k: v for k, v in rest.items() if k != "embeddings.mask_token"})
        if regs:
            sd["reg_token"] = regs[0]
    else:
        sd = {("reg_token" if k == "register_tokens" else k): v for k, v in src.items() if k != "mask_token"}
        pos, ours = sd.get("pos_embed"), own.get("body.pos_embed")
        if pos is not None and ours is not None and pos.shape[1] + 1 == ours.shape[1]:  # timm's no_embed_class
            sd["pos_embed"] = torch.cat([torch.zeros_like(pos[:, :1]), pos], dim=1)
    return convert_timm_names(fit_head(sd, own), own)
