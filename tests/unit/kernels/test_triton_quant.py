"""The Triton quantization kernels against the reference, bit for bit (SPEC K-11).

Runs on CPU tensors under ``TRITON_INTERPRET=1`` (set by conftest.py on machines without CUDA;
``test_interpret_subprocess.py`` re-runs this file in a fresh interpreter process otherwise).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from libreyolo import kernels  # noqa: E402
from libreyolo.kernels.quant.dispatch import fake_quant  # noqa: E402
from libreyolo.kernels.quant.interpret import kernels_interpreted  # noqa: E402
from libreyolo.quant import (  # noqa: E402
    compute_scale,
    fake_quant_fp8_reference,
    fake_quant_fp8_ste,
    fake_quant_int8_reference,
    fake_quant_int8_ste,
    pack_weight,
    unpack_weight_reference,
)

pytestmark = pytest.mark.skipif(
    not kernels_interpreted(),
    reason="Triton interpreter not active in this process (triton imported before TRITON_INTERPRET=1, "
    "or a CUDA machine); test_interpret_subprocess.py runs this file in a fresh process",
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[t.dtype])


def _assert_bits_equal(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype
    nan = torch.isnan(b)
    assert torch.equal(torch.isnan(a), nan)
    diff = (_bits(a) != _bits(b)) & ~nan
    assert not diff.any(), f"{int(diff.sum())} mismatches, e.g. {a[diff][:4]} vs {b[diff][:4]}"


def e4m3_edge_values() -> torch.Tensor:
    """Every finite E4M3 value, the fp32 midpoints between neighbours (ties), one fp32 ulp on
    either side of each, both signs, plus zeros, saturation, infinities, NaN, fp32 denormals."""
    grid = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # 0 .. 448
    mids = (grid[:-1] + grid[1:]) / 2  # exact in fp32
    pts = torch.cat([grid, mids, torch.tensor([464.0, 480.0, 1e4, 2.0**-10, 2.0**-11, 1e-40, 1e-45])])
    up = torch.nextafter(pts, torch.full_like(pts, float("inf")))
    down = torch.nextafter(pts, torch.zeros_like(pts))
    v = torch.cat([pts, up, down])
    return torch.cat([v, -v, torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0])])


def test_providers_selected():
    x = torch.zeros(4)
    assert kernels.registry.resolve_name("fake_quant_fp8", x, torch.tensor(1.0), axis=None) == "triton"
    assert kernels.registry.resolve_name("unpack_weights", torch.zeros(2, 2, dtype=torch.int8),
                                         torch.ones(2), dtype=torch.float32) == "triton"


def test_fp8_exhaustive_grid_ties_and_neighbours():
    from libreyolo.kernels.quant.simulate.triton_fake_quant import fake_quant_fp8_triton

    x = e4m3_edge_values()
    one = torch.tensor(1.0)
    _assert_bits_equal(fake_quant_fp8_triton(x, one), fake_quant_fp8_reference(x, one))
    for s in (0.37, 3.0e-3, 17.0):  # non-power-of-two scales move the ties around
        _assert_bits_equal(fake_quant_fp8_triton(x * s, torch.tensor(s)),
                           fake_quant_fp8_reference(x * s, torch.tensor(s)))


def test_int8_ties():
    from libreyolo.kernels.quant.simulate.triton_fake_quant import fake_quant_int8_triton

    k = torch.arange(-130, 131, dtype=torch.float32)
    x = torch.cat([k, k + 0.5, torch.nextafter(k + 0.5, k), torch.nextafter(k + 0.5, k + 1),
                   torch.tensor([-0.0, -0.3, float("nan"), float("inf"), -float("inf")])])
    one = torch.tensor(1.0)
    _assert_bits_equal(fake_quant_int8_triton(x, one), fake_quant_int8_reference(x, one))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["fp8", "int8"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_forward_bit_identical_and_ste_gradient(dtype, fmt, axis):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 6, 3, 3, generator=g) * 20).to(dtype)
    scale = compute_scale(x, fmt=fmt, axis=axis) * 0.8  # some values saturate
    ref = fake_quant_fp8_ste if fmt == "fp8" else fake_quant_int8_ste
    xa = x.clone().requires_grad_()
    xb = x.clone().requires_grad_()
    out = fake_quant(xa, scale, fmt=fmt, axis=axis)  # through the registry: Triton
    want = ref(xb, scale, axis=axis)
    _assert_bits_equal(out.detach(), want.detach())
    grad = torch.randn(x.shape, generator=g).to(dtype)
    (ga,) = torch.autograd.grad(out, xa, grad)
    (gb,) = torch.autograd.grad(want, xb, grad)
    assert ga.dtype == dtype
    assert (ga.float() - gb.float()).abs().max() <= 1e-6
    assert (ga == 0).any() and (ga != 0).any()  # both sides of the clip are exercised


def test_non_contiguous_and_empty():
    from libreyolo.kernels.quant.simulate.triton_fake_quant import fake_quant_fp8_triton

    x = torch.randn(8, 6).t()  # non-contiguous
    s = torch.tensor(0.01)
    _assert_bits_equal(fake_quant_fp8_triton(x, s), fake_quant_fp8_reference(x, s))
    assert fake_quant_fp8_triton(torch.zeros(0, 3), s).shape == (0, 3)


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_unpack_kernel_bit_identical(fmt, dtype):
    from libreyolo.kernels.quant.execute.triton_fused import unpack

    p = pack_weight(torch.randn(16, 3, 3, 3, generator=torch.Generator().manual_seed(1)) * 4, fmt=fmt)
    _assert_bits_equal(unpack(p.data, p.scale, dtype=dtype), unpack_weight_reference(p.data, p.scale, dtype=dtype))


def test_unpack_decodes_every_fp8_byte():
    from libreyolo.kernels.quant.execute.triton_fused import unpack

    data = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).reshape(256, 1)
    scale = torch.ones(256)
    _assert_bits_equal(unpack(data, scale), unpack_weight_reference(data, scale))


def test_prologue_quantize_bytes_match_torch_cast():
    from libreyolo.kernels.quant.execute.triton_fused import quantize_fp8

    x = e4m3_edge_values()
    x = x[~torch.isnan(x)].reshape(1, -1)
    for s in (1.0, 0.37):
        got = quantize_fp8(x * s, torch.tensor(s))
        want = (x * s * torch.tensor(s).reciprocal()).clamp(-448, 448).to(torch.float8_e4m3fn)
        assert got.dtype == torch.float8_e4m3fn
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


@pytest.mark.parametrize("activation", ["none", "relu", "silu"])
def test_epilogue(activation):
    from libreyolo.kernels.quant.execute.triton_fused import epilogue

    g = torch.Generator().manual_seed(2)
    acc, ws, bias = torch.randn(7, 32, generator=g) * 50, torch.rand(32, generator=g), torch.randn(32, generator=g)
    xs = torch.tensor(0.03)
    out = epilogue(acc, x_scale=xs, w_scale=ws, bias=bias, activation=activation, out_dtype=torch.float32)
    ref = acc * (xs * ws) + bias
    ref = {"none": ref, "relu": torch.relu(ref), "silu": torch.nn.functional.silu(ref)}[activation]
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    out16 = epilogue(acc, x_scale=xs, w_scale=ws, bias=bias, activation=activation, out_dtype=torch.bfloat16)
    torch.testing.assert_close(out16, ref.to(torch.bfloat16), atol=2e-2, rtol=1e-2)


def test_unsupported_dtype_falls_to_reference():
    x = torch.arange(6, dtype=torch.float64)
    assert kernels.registry.resolve_name("fake_quant_fp8", x, torch.tensor(1.0), axis=None) == "reference"


@pytest.mark.parametrize("mode", ["tensorwise", "rowwise"])
def test_fp8_gemm_plumbing_on_cpu(mode):
    """Operand layout, scales and epilogue of ``fp8_gemm``, with torch's CPU ``_scaled_mm``."""
    import torch.nn.functional as F

    from libreyolo.kernels.quant.execute.gemm import fp8_gemm
    from libreyolo.quant import unpack_weight_reference

    g = torch.Generator().manual_seed(0)
    x = torch.randn(33, 48, generator=g) * 2
    p = pack_weight(torch.randn(32, 48, generator=g) * 0.1, fmt="fp8")
    bias = torch.randn(32, generator=g)
    xs = compute_scale(x, fmt="fp8")
    try:
        out = fp8_gemm(x, p.data, xs, p.scale, bias, activation="silu", mode=mode)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"this torch has no CPU _scaled_mm for {mode} scales: {e}")
    ref = F.silu(F.linear(fake_quant_fp8_reference(x, xs), unpack_weight_reference(p.data, p.scale), bias))
    assert out.shape == (33, 32) and out.dtype == torch.float32
    tol = (1e-5 if mode == "tensorwise" else 1e-2) * ref.abs().max().item()
    assert (out - ref).abs().max().item() <= tol
