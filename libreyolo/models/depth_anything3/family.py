"""Depth Anything 3 depth family: sizes s / b (the any-view DA3-Small / DA3-Base on one image:
depth + confidence), mono_l / metric_l (DA3Mono-Large / DA3Metric-Large: depth + sky)
(``LibreDepthAnything3<size>-depth.pt``).

Seam (SPEC G-9): :meth:`forward_stages` = the network (capturable) and, for the sizes with a sky
head, the sky step (eager: :func:`~.postprocess.sky_step`). The maps are **depth** (larger =
farther), not the disparity of Depth Anything V2: the loss and the validation ask ``PREDICTS``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from ...graphs.seam import Stage
from .._base.depth import DepthFamily, SSILoss
from .._base.fused_attn import FusedAttentionOption
from .nn import SPECS
from .postprocess import sky_step

SKY_EAGER_REASON = ("data-dependent: a boolean sky mask, a quantile over its complement and a branch on pixel "
                    "counts, so the sky step runs eager on the replayed network outputs")


class _OutputNames:
    """``("depth", "conf")`` on the class and for s / b; ``("depth", "sky")`` on an L instance."""

    def __get__(self, obj: Any, cls: type | None = None) -> tuple[str, ...]:
        if obj is None or "net" not in getattr(obj, "__dict__", {}):
            return ("depth", "conf")
        return ("depth", str(obj.net.aux_name))


class DepthAnything3(FusedAttentionOption, DepthFamily):
    FAMILY: ClassVar[str] = "depth_anything3"
    NAME_TOKEN: ClassVar[str] = "DepthAnything3"  # LibreDepthAnything3<size>-depth.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    DEFAULT_IMGSZ: ClassVar[int] = 518  # the position embedding's grid (37 x 37 patches)
    STRIDE: ClassVar[int] = 14  # the patch size
    PREDICTS: ClassVar[str] = "depth"  # larger = farther (Depth Anything V2: disparity)
    METRIC_SIZES: ClassVar[tuple[str, ...]] = ("metric_l",)  # metres = focal_px * value / 300 (.metric)
    OUTPUT_NAMES = _OutputNames()  # type: ignore[assignment]
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (6ceda2f; seam: network captured, sky step eager)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no training-capture parity run recorded yet"
    # SPEC K-9: the explicit attention equation until a byte-exact SDPA parity run; the flag flips it
    FUSED_ATTN_DEFAULT: ClassVar[bool] = False
    # Depth Anything's fine-tuning recipe (AdamW, weight decay 0.01); one rate, the decoder's
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 5e-5, "momentum": 0.9, "weight_decay": 0.01, "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, fused_attn: bool | None = None) -> nn.Module:
        from .nn import build_depth_anything3

        on = cls.FUSED_ATTN_DEFAULT if fused_attn is None else bool(fused_attn)
        return build_depth_anything3(size=size, fused_attn=on)

    @property
    def has_sky(self) -> bool:
        return getattr(self.net, "aux_name", "") == "sky"

    @property
    def depth_kind(self) -> str:
        """``"metric"`` for metric_l (:func:`~.metric.to_metres` gives metres), else ``"depth"``."""
        return "metric" if self.size in self.METRIC_SIZES else self.PREDICTS

    def _sky(self, raw: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        depth, sky = raw
        return sky_step(depth, sky), sky

    def forward_stages(self) -> list[Stage]:
        net = Stage(name="net", fn=self.net, capturable=True)
        if not self.has_sky:
            return [net]
        return [net, Stage(name="sky", fn=self._sky, capturable=False, reason=SKY_EAGER_REASON)]

    def postprocess(self, raw: Any, *, conf: float = 0.0, iou: float = 0.0, classes: list[int] | None = None,
                    max_det: int = 0, agnostic: bool = False) -> list[Tensor]:
        """(depth, aux) -> per image depth Tensor[h, w] float32; with a sky head the sky step is
        applied (idempotent: a second application changes nothing)."""
        if self.has_sky and isinstance(raw, (list, tuple)) and len(raw) > 1:
            raw = (sky_step(raw[0], raw[1]), raw[1])
        return super().postprocess(raw)

    def build_criterion(self) -> SSILoss:
        return SSILoss(target="depth")
