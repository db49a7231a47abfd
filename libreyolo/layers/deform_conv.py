"""Modulated deformable convolution (DCNv2, Zhu et al. 2019) on ``torchvision.ops.deform_conv2d``.

:class:`DeformableConv2d` predicts, from its input, a 2-D offset per kernel tap and output pixel
(``offset_conv``) and a modulation weight per tap (``modulator_conv``, ``2 * sigmoid``: 1 at
initialisation), then samples the input bilinearly at the shifted taps and applies the weights of
``regular_conv``. Both predictors start at zero, so a fresh layer is exactly ``regular_conv``.
This is the layer BiRefNet's ASPP-deformable blocks are made of (same parameter names).

The sampling is torchvision's compiled operator, in eager mode and in training, never a
pure-PyTorch re-implementation: that would shift the eager numbers. Under CUDA-graph capture the
operator replays wrongly (``tests/gpu/test_deform_conv_capture_gpu.py``), so a family that uses it
keeps it in an eager stage (SPEC G-9).

ONNX: exported as the standard ``DeformConv`` operator, which exists from opset 19 on (ONNX
Runtime runs it on the CPU provider); at a lower opset the export raises
:class:`~libreyolo.errors.ExportError` saying so.

Example:
    >>> import torch
    >>> m = DeformableConv2d(4, 6, kernel_size=3, padding=1)
    >>> x = torch.rand(1, 4, 8, 8)
    >>> torch.allclose(m(x), m.regular_conv(x), atol=1e-6)  # zero offsets, unit modulation
    True
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torchvision.ops import deform_conv2d

from ..errors import ExportError

ONNX_MIN_OPSET = 19  # DeformConv entered the standard ONNX operator set in opset 19


class DeformableConv2d(nn.Module):
    """``deform_conv2d(x, offset_conv(x), regular_conv.weight, mask=2 * sigmoid(modulator_conv(x)))``:
    Tensor[B, Cin, H, W] -> Tensor[B, Cout, H', W'] (H' as ``regular_conv``'s)."""

    def __init__(self, cin: int, cout: int, *, kernel_size: int = 3, stride: int = 1, padding: int = 1,
                 bias: bool = False) -> None:
        super().__init__()
        k = int(kernel_size)
        self.stride, self.padding = (int(stride), int(stride)), (int(padding), int(padding))
        self.offset_conv = nn.Conv2d(cin, 2 * k * k, k, stride=stride, padding=padding, bias=True)
        self.modulator_conv = nn.Conv2d(cin, k * k, k, stride=stride, padding=padding, bias=True)
        self.regular_conv = nn.Conv2d(cin, cout, k, stride=stride, padding=padding, bias=bias)
        for conv in (self.offset_conv, self.modulator_conv):
            nn.init.zeros_(conv.weight)
            nn.init.zeros_(conv.bias)

    def forward(self, x: Tensor) -> Tensor:
        offset = self.offset_conv(x)  # (B, 2*k*k, H', W'): (dy, dx) per tap
        mask = 2.0 * torch.sigmoid(self.modulator_conv(x))  # (B, k*k, H', W')
        w, b = self.regular_conv.weight, self.regular_conv.bias
        if torch.onnx.is_in_onnx_export():
            bias = b if b is not None else w.new_zeros(w.shape[0])
            return _OnnxDeformConv.apply(x, w, offset, bias, mask, self.stride, self.padding)
        return deform_conv2d(x, offset, w, b, stride=self.stride, padding=self.padding, mask=mask)


class _OnnxDeformConv(torch.autograd.Function):
    """Traced as one ONNX ``DeformConv`` node (opset >= 19); computes torchvision's operator."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor, offset: Tensor, b: Tensor, mask: Tensor, stride: tuple[int, int],
                padding: tuple[int, int]) -> Tensor:
        return deform_conv2d(x, offset, w, b, stride=stride, padding=padding, mask=mask)

    @staticmethod
    def symbolic(g: Any, x: Any, w: Any, offset: Any, b: Any, mask: Any, stride: tuple[int, int],
                 padding: tuple[int, int]) -> Any:
        opset = int(g.opset)  # the export's opset (torch's symbolic GraphContext)
        if opset < ONNX_MIN_OPSET:
            raise ExportError(f"deformable convolution exports as the ONNX DeformConv operator, which needs opset "
                              f">= {ONNX_MIN_OPSET}; this export asked for opset {opset} (export with opset="
                              f"{ONNX_MIN_OPSET} or higher)")
        k = w.type().sizes()[2:] if w.type().sizes() else None
        kw: dict[str, Any] = {"kernel_shape_i": list(k)} if k else {}
        return g.op("DeformConv", x, w, offset, b, mask, strides_i=list(stride),
                    pads_i=[padding[0], padding[1], padding[0], padding[1]], dilations_i=[1, 1], group_i=1,
                    offset_group_i=1, **kw)
