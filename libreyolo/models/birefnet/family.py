"""BiRefNet matte family: sizes tiny (test size), lite (Swin-T), l (Swin-L)
(``LibreBiRefNet<size>-matte.pt``).

Seam (SPEC G-9): :meth:`BiRefNet.forward_stages` = the encoder (standardisation + the Swin backbone
at two scales: capturable, one graph per input shape) then the squeeze block and the decoder
(eager: its ASPP blocks call ``torchvision.ops.deform_conv2d``, which replays wrongly from a CUDA
graph; ``tests/gpu/test_deform_conv_capture_gpu.py`` reproduces that outside any model). Swapping
in a pure-PyTorch deformable convolution would make the decoder capturable but would move the
eager numbers, which are the contract, so the seam stays.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from ...graphs.seam import Stage
from .._base.fused_attn import FusedAttentionOption
from .._base.matte import MatteFamily
from .nn import SPECS

PARAMS_M = {"lite": 44.3, "l": 220.2}  # published: BiRefNet_lite (Swin-T) 44.3 M, BiRefNet (Swin-L) 220 M
DECODER_EAGER_REASON = ("torchvision.ops.deform_conv2d (the ASPP-deformable blocks) replays wrongly under CUDA-graph "
                        "capture: tests/gpu/test_deform_conv_capture_gpu.py")


class BiRefNet(FusedAttentionOption, MatteFamily):
    FAMILY: ClassVar[str] = "birefnet"
    NAME_TOKEN: ClassVar[str] = "BiRefNet"  # LibreBiRefNet<size>-matte.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)  # tiny first: the contract tests' smallest size
    DEFAULT_IMGSZ: ClassVar[int] = 1024  # the published models' input
    STRIDE: ClassVar[int] = 32  # patch 4 and three 2x merges
    ONNX_MIN_OPSET: ClassVar[int] = 19  # the decoder's deformable convolutions are ONNX DeformConv (opset 19)
    # formats whose converter cannot hold the decoder's deformable convolutions (export raises this reason)
    EXPORT_REFUSALS: ClassVar[dict[str, str]] = {
        "openvino": ("OpenVINO's ONNX front end has no conversion rule for DeformConv (opset 19), the operator the "
                     "decoder's deformable convolutions export as; export format='onnx' (ONNX Runtime runs it) or "
                     "'torchscript'"),
    }
    FUSED_ATTN_DEFAULT: ClassVar[bool] = False  # SPEC K-9: the explicit equation until a byte-exact SDPA run
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True
    CUDA_GRAPH_REASON: ClassVar[str] = ("the seam (captured encoder + eager deformable decoder) is bitwise for tiny, lite "
                                        "and l, fp32 and fp16 (docs/cuda-graph-parity.json: tiny 0aa3be7, lite and l "
                                        "e1c602a; tests/gpu/test_deform_conv_capture_gpu.py passed)")
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = ("no training-capture parity run recorded; the decoder's "
                                              "deform_conv2d cannot be captured, so training runs eager")
    # BiRefNet's recipe: AdamW, lr 1e-4 x sqrt(batch / 4) for DIS (1e-5 for the general sets), no decay
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 1e-4, "momentum": 0.9, "weight_decay": 0.0, "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, fused_attn: bool | None = None) -> nn.Module:
        from .nn import build_birefnet

        on = cls.FUSED_ATTN_DEFAULT if fused_attn is None else bool(fused_attn)
        return build_birefnet(size=size, fused_attn=on)

    def _encode(self, x: Tensor) -> tuple[Tensor, ...]:
        return self.net.encode(x)

    def _decode(self, feats: Any) -> Any:
        return self.net.decode(feats)

    def forward_stages(self) -> list[Stage]:
        return [Stage(name="encoder", fn=self._encode, capturable=True),
                Stage(name="decoder", fn=self._decode, capturable=False, reason=DECODER_EAGER_REASON)]
