"""benchmarks/kernel_census.py off the GPU: kernel names fall into the kinds its table reports."""

from __future__ import annotations

from benchmarks import kernel_census


def test_kernel_names_are_grouped_by_kind():
    k = kernel_census.kind_of
    assert k("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64") == "conv"
    assert k("cudnn::engines_precompiled::nchwToNhwcKernel") == "layout"
    assert k("triton_poi_fused_add_silu_0") == "triton"
    assert k("triton_per_fused_cat_convolution_max_pool2d_with_indices_silu_28") == "triton"
    assert k("_bias_silu") == "triton"
    assert k("void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>") == "concat"
    assert k("void at::native::upsample_nearest2d_out_frame<c10::Half>") == "resample"
    assert k("Memcpy DtoD (Device -> Device)") == "copy"
    assert k("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel>") == "elementwise"
    assert k("void at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::Half, int>") == "pool"
    assert k("some_unknown_kernel") == "other"
