"""Quantization kernels: ``simulate/`` (fake quant with straight-through backward, used by QAT
and simulated PTQ) and ``execute/`` (finalized models only: FP8 GEMM, its fused prologue and
epilogue, packed-weight unpack); the providers are imported only when the registry needs them.

Above the providers and below ``layers``: ``dispatch`` (``fake_quant``, ``unpack_weight``
through the registry), ``modules`` (the quantized ``Conv2d``/``Linear`` layers) and ``model``
(``quantize_model``, ``dequantize_model``, ``quant_info``, checkpoint metadata). Importing this
package imports none of them."""
