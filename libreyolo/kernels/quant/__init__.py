"""Quantization kernels: ``simulate/`` (fake quant with straight-through backward, used by QAT
and simulated PTQ) and ``execute/`` (finalized models only: FP8 GEMM, its fused prologue and
epilogue, packed-weight unpack). Nothing here is imported until the registry needs it."""
