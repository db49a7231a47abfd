"""DINOv2 semantic-segmentation family (task ``semantic``): the DINOv2 trunk with the paper's
linear heads; sizes s14, b14, l14 (last block) and s14ms, b14ms, l14ms (last four blocks).
Weights names: ``LibreDINOv2seg<size>-sem.pt``."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from ...errors import ConfigError
from .._base.fused_attn import FusedAttentionOption
from .._base.semantic import SemanticFamily
from .nn import SPECS


class DINOv2Seg(FusedAttentionOption, SemanticFamily):
    FAMILY: ClassVar[str] = "dinov2_seg"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    NAME_TOKEN: ClassVar[str] = "DINOv2seg"  # LibreDINOv2seg<size>-sem.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    DEFAULT_IMGSZ: ClassVar[int] = 518  # 37 x 37 patches: the trunk's own grid, no resampling
    STRIDE: ClassVar[int] = 14  # the patch size: inputs are letterboxed to multiples of it
    # the position embedding is resampled for the traced token grid: an export has a fixed input size
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch",)
    # SPEC K-9: the explicit attention equation until a byte-exact SDPA parity run (as dinov2)
    FUSED_ATTN_DEFAULT: ClassVar[bool] = False
    # The paper trains the linear head on a frozen trunk (40k iterations, ADE20K 512 px crops);
    # here the whole network trains unless frozen (``freeze="backbone"``). AdamW, lr 1e-4, weight
    # decay 0.05: libreyolo's choice for fine-tuning a pretrained ViT trunk, not a published recipe.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 1e-4, "momentum": 0.9, "weight_decay": 0.05, "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, fused_attn: bool | None = None) -> nn.Module:
        from .nn import build_dinov2_seg

        if size not in SPECS:
            raise ConfigError(f"{cls.FAMILY} has no size {size!r}; sizes: {', '.join(SPECS)}")
        on = cls.FUSED_ATTN_DEFAULT if fused_attn is None else bool(fused_attn)
        return build_dinov2_seg(size=size, nc=nc, fused_attn=on)
