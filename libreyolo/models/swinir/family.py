"""SwinIR lightweight super-resolution family: sizes light_x2, light_x4
(``LibreSwinIR<size>-restore.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._base.fused_attn import FusedAttentionOption
from .._base.restore import RestoreFamily
from .nn import SPECS


class SwinIR(FusedAttentionOption, RestoreFamily):
    """``SCALE`` is the size's (2 for light_x2, 4 for light_x4; the class value is the first size's).
    ``fused_attn`` is off by default (SPEC K-9: the manual attention equation until a byte-exact SDPA
    parity run); ``model.arch`` is ``{"fused_attn": True}`` with it on in every layer."""

    FAMILY: ClassVar[str] = "swinir"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (58331d9: every row bitwise)
    NAME_TOKEN: ClassVar[str] = "SwinIR"  # LibreSwinIR<size>-restore.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    STRIDE: ClassVar[int] = 1  # the network pads to its window (8) itself and crops back: any size
    SCALE: ClassVar[int] = SPECS["light_x2"].scale
    DEFAULT_IMGSZ: ClassVar[int] = 64  # the reference's LQ training patch (HQ 128 / 256)
    FUSED_ATTN_DEFAULT: ClassVar[bool] = False
    # The lightweight SR recipe of the paper: Adam (AdamW without decay), lr 2e-4, L1 loss.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 2e-4, "momentum": 0.9, "weight_decay": 0.0, "warmup_bias_lr": 0.0,
    }

    def __init__(self, *, size: str, task: str | None = None, nc: int = 1, names: Any = None,
                 imgsz: int | None = None) -> None:
        super().__init__(size=size, task=task, nc=nc, names=names, imgsz=imgsz)
        self.SCALE = SPECS[size].scale  # the size's scale (instance value over the class default)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, fused_attn: bool = False) -> nn.Module:
        from .nn import build_swinir

        return build_swinir(size=size, fused_attn=fused_attn)
