"""Quantized layers that replace ``nn.Conv2d`` / ``nn.Linear`` in a quantized network.

* :class:`QuantConv2d`, :class:`QuantLinear` — *simulated* quantization (PTQ and QAT): the
  weight is fake-quantized per output channel with a min-max scale recomputed every forward
  (so it follows QAT updates), the input per tensor with a calibrated scale. The fake-quant ops
  have straight-through backward, so training such a model is quantization-aware training.
  They keep the float layer's ``weight``/``bias`` parameters (same state-dict keys) and add the
  buffers ``input_amax`` and ``input_scale``.
* :class:`PackedConv2d`, :class:`PackedLinear` — *finalized*: the weight is stored packed
  (``weight_packed`` + ``weight_scale``, the checkpoint contract of :mod:`libreyolo.quant.packing`),
  inference only. FP8 layers whose shape is a plain GEMM run through the ``fp8_gemm`` kernel
  slot when it resolves (FP8 tensor cores); otherwise the weight is unpacked and the portable
  float convolution/matmul runs on the fake-quantized input.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...quant.formats import FP8_E4M3, get_format
from ...quant.packing import pack_weight
from ...quant.scales import amax, compute_scale, scale_from_amax
from .. import registry
from .dispatch import fake_quant, unpack_weight


class _QuantMixin:
    """Shared state of the simulated layers: format, observer and input scale."""

    fmt: str
    observing: bool
    quant_input: bool

    def _init_quant(self, fmt: str, device: torch.device) -> None:
        self.fmt = get_format(fmt).name
        self.observing = False
        self.quant_input = False
        self.register_buffer("input_amax", torch.zeros((), device=device))  # type: ignore[attr-defined]
        self.register_buffer("input_scale", torch.ones((), device=device))  # type: ignore[attr-defined]

    def _quant_input(self, x: Tensor) -> Tensor:
        if self.observing:
            with torch.no_grad():
                self.input_amax.copy_(torch.maximum(self.input_amax, amax(x)))  # type: ignore[attr-defined]
            return x
        if self.quant_input:
            return fake_quant(x, self.input_scale, fmt=self.fmt)  # type: ignore[attr-defined]
        return x

    def set_input_scale_from_observer(self) -> None:
        """Freeze the min-max input scale from the observed amax and enable input quantization."""
        with torch.no_grad():
            self.input_scale.copy_(scale_from_amax(self.input_amax, fmt=self.fmt))  # type: ignore[attr-defined]
        self.quant_input = True

    def _quant_weight(self, w: Tensor) -> Tensor:
        return fake_quant(w, compute_scale(w, fmt=self.fmt, axis=0), fmt=self.fmt, axis=0)

    def extra_repr(self) -> str:  # pragma: no cover - cosmetic
        return f"{super().extra_repr()}, fmt={self.fmt}, quant_input={self.quant_input}"  # type: ignore[misc]


class QuantConv2d(_QuantMixin, nn.Conv2d):
    """``nn.Conv2d`` with fake-quantized weight (per output channel) and input (per tensor).

    Input Tensor[B, Cin, H, W] (float32/float16/bfloat16) -> Tensor[B, Cout, H', W'].
    """

    @classmethod
    def from_float(cls, conv: nn.Conv2d, *, fmt: str) -> QuantConv2d:
        q = cls(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                padding=conv.padding, dilation=conv.dilation, groups=conv.groups,
                bias=conv.bias is not None, padding_mode=conv.padding_mode, device="meta")
        q.weight, q.bias = conv.weight, conv.bias
        q._init_quant(fmt, conv.weight.device)
        q.train(conv.training)
        return q

    def to_float(self) -> nn.Conv2d:
        conv = nn.Conv2d(self.in_channels, self.out_channels, self.kernel_size, stride=self.stride,
                         padding=self.padding, dilation=self.dilation, groups=self.groups,
                         bias=self.bias is not None, padding_mode=self.padding_mode, device="meta")
        conv.weight, conv.bias = self.weight, self.bias
        conv.train(self.training)
        return conv

    def forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(self._quant_input(x), self._quant_weight(self.weight), self.bias)


class QuantLinear(_QuantMixin, nn.Linear):
    """``nn.Linear`` with fake-quantized weight (per output feature) and input (per tensor).

    Input Tensor[..., K] -> Tensor[..., N].
    """

    @classmethod
    def from_float(cls, lin: nn.Linear, *, fmt: str) -> QuantLinear:
        q = cls(lin.in_features, lin.out_features, bias=lin.bias is not None, device="meta")
        q.weight, q.bias = lin.weight, lin.bias
        q._init_quant(fmt, lin.weight.device)
        q.train(lin.training)
        return q

    def to_float(self) -> nn.Linear:
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        lin.weight, lin.bias = self.weight, self.bias
        lin.train(self.training)
        return lin

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(self._quant_input(x), self._quant_weight(self.weight), self.bias)


class _PackedMixin(nn.Module):
    """Packed (finalized) weight + input scale; inference only."""

    fmt: str
    quant_input: bool

    def _init_packed(self, src: QuantConv2d | QuantLinear) -> None:
        w = src.weight.detach()
        packed = pack_weight(w, fmt=src.fmt)
        self.fmt = src.fmt
        self.quant_input = bool(src.quant_input)
        self.weight_dtype = w.dtype
        self.register_buffer("weight_packed", packed.data)
        self.register_buffer("weight_scale", packed.scale)
        self.register_buffer("input_scale", src.input_scale.detach().clone())
        self.register_buffer("bias", None if src.bias is None else src.bias.detach().clone())

    def unpacked_weight(self, dtype: torch.dtype) -> Tensor:
        return unpack_weight(self.weight_packed, self.weight_scale, dtype=dtype)

    def _gemm(self, x2d: Tensor) -> Tensor | None:
        """FP8 tensor-core GEMM of Tensor[M, K] with the packed Tensor[N, K], or None if unavailable."""
        if self.fmt != FP8_E4M3.name or not self.quant_input:
            return None
        w2d = self.weight_packed.reshape(self.weight_packed.shape[0], -1)
        args = (x2d, w2d, self.input_scale, self.weight_scale, self.bias)
        fn = registry.resolve("fp8_gemm", *args)
        if fn is None:
            return None  # K-6: no reference; the caller keeps its portable path
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - K-7: a failing kernel falls back to the portable path
            registry.disable("fp8_gemm", registry.resolve_name("fp8_gemm", *args), f"raised {e!r}")
            return None

    def _portable_input(self, x: Tensor) -> Tensor:
        return fake_quant(x, self.input_scale, fmt=self.fmt) if self.quant_input else x


class PackedConv2d(_PackedMixin):
    """Finalized convolution: Tensor[B, Cin, H, W] -> Tensor[B, Cout, H', W'] (no backward)."""

    def __init__(self, src: QuantConv2d) -> None:
        super().__init__()
        self.in_channels, self.out_channels = src.in_channels, src.out_channels
        self.kernel_size, self.stride, self.padding = src.kernel_size, src.stride, src.padding
        self.dilation, self.groups, self.padding_mode = src.dilation, src.groups, src.padding_mode
        self._init_packed(src)

    def _is_gemm(self) -> bool:
        return (self.kernel_size == (1, 1) and self.stride == (1, 1) and self.groups == 1
                and self.padding in ((0, 0), "valid") and self.dilation == (1, 1))

    def forward(self, x: Tensor) -> Tensor:
        if self._is_gemm() and x.dim() == 4:
            b, c, h, w = x.shape
            y = self._gemm(x.permute(0, 2, 3, 1).reshape(b * h * w, c))  # (B*H*W, Cin)
            if y is not None:
                return y.reshape(b, h, w, -1).permute(0, 3, 1, 2).to(x.dtype)  # (B, Cout, H, W)
        weight = self.unpacked_weight(x.dtype)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if self.padding_mode != "zeros":
            raise NotImplementedError(f"packed conv with padding_mode={self.padding_mode!r}")
        return F.conv2d(self._portable_input(x), weight, bias, self.stride, self.padding,
                        self.dilation, self.groups)

    def to_float(self) -> nn.Conv2d:
        conv = nn.Conv2d(self.in_channels, self.out_channels, self.kernel_size, stride=self.stride,
                         padding=self.padding, dilation=self.dilation, groups=self.groups,
                         bias=self.bias is not None, padding_mode=self.padding_mode,
                         device=self.weight_packed.device, dtype=self.weight_dtype)
        with torch.no_grad():
            conv.weight.copy_(self.unpacked_weight(self.weight_dtype))
            if self.bias is not None:
                conv.bias.copy_(self.bias)
        return conv


class PackedLinear(_PackedMixin):
    """Finalized linear layer: Tensor[..., K] -> Tensor[..., N] (no backward)."""

    def __init__(self, src: QuantLinear) -> None:
        super().__init__()
        self.in_features, self.out_features = src.in_features, src.out_features
        self._init_packed(src)

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        y = self._gemm(x.reshape(-1, self.in_features))
        if y is not None:
            return y.reshape(*lead, self.out_features).to(x.dtype)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(self._portable_input(x), self.unpacked_weight(x.dtype), bias)

    def to_float(self) -> nn.Linear:
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                        device=self.weight_packed.device, dtype=self.weight_dtype)
        with torch.no_grad():
            lin.weight.copy_(self.unpacked_weight(self.weight_dtype))
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        return lin


QUANT_TYPES = (QuantConv2d, QuantLinear)
PACKED_TYPES = (PackedConv2d, PackedLinear)
