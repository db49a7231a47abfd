"""GPU checks of the quantization kernels (SPEC K-10, K-11). Skipped without CUDA.

* Triton fake quant (simulate) == reference on CUDA, bit for bit, over shapes x dtypes x axes,
  with the straight-through gradient within 1e-6; the E4M3 grid / ties sweep on the GPU.
* Triton unpack and the GEMM prologue bit for bit; FP8 ``_scaled_mm`` GEMM against the
  portable float32 math on the same quantized operands (tolerance below), sm_89+ only.
* A simulated-quantized model replays from a CUDA graph bit-identically to eager.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.kernels import registry
from libreyolo.kernels.quant.dispatch import fake_quant
from libreyolo.quant import (
    compute_scale,
    fake_quant_fp8_reference,
    fake_quant_fp8_ste,
    fake_quant_int8_ste,
    pack_weight,
    unpack_weight_reference,
)

pytestmark = pytest.mark.cuda
pytest.importorskip("triton")

DEV = torch.device("cuda", 0)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(1,), (1000,), (64, 3, 3, 3), (2, 16, 40, 40), (3, 7, 33)]
# FP8 GEMM vs float32 math on the *same* quantized operands, as a fraction of max |reference|:
# only accumulation differs (FP8 tensor cores accumulate with reduced precision between fp32
# promotions); the rowwise mode also rounds its output to bfloat16.
GEMM_RTOL = {"tensorwise": 2e-3, "rowwise": 1e-2}


def _fp8_capable(minimum: tuple[int, int] = (8, 9)) -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) >= minimum


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[t.dtype])


def _assert_bits_equal(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype
    nan = torch.isnan(b)
    assert torch.equal(torch.isnan(a), nan)
    diff = (_bits(a) != _bits(b)) & ~nan
    assert not diff.any(), f"{int(diff.sum())} mismatches, e.g. {a[diff][:4]} vs {b[diff][:4]}"


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv("LIBREYOLO_KERNELS", raising=False)
    monkeypatch.delenv("LIBREYOLO_QUANT_KERNELS", raising=False)
    registry.clear_cache()


def test_triton_providers_engage_on_cuda():
    x = torch.zeros(16, device=DEV)
    s = torch.ones((), device=DEV)
    assert registry.resolve_name("fake_quant_fp8", x, s, axis=None) == "triton"
    assert registry.resolve_name("fake_quant_int8", x, s, axis=None) == "triton"
    assert registry.resolve_name("fake_quant_fp8", x.cpu(), s.cpu(), axis=None) == "reference"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["fp8", "int8"])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_fake_quant_parity_cuda(shape, dtype, fmt, axis):
    g = torch.Generator(device=DEV).manual_seed(0)
    x = (torch.randn(shape, device=DEV, generator=g) * 30).to(dtype)
    scale = compute_scale(x, fmt=fmt, axis=axis) * 0.7  # some values saturate
    ref = fake_quant_fp8_ste if fmt == "fp8" else fake_quant_int8_ste
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = fake_quant(xa, scale, fmt=fmt, axis=axis)
    want = ref(xb, scale, axis=axis)
    _assert_bits_equal(out.detach(), want.detach())
    _assert_bits_equal(out.detach().cpu(), ref(x.cpu(), scale.cpu(), axis=axis))  # == CPU reference too
    grad = torch.randn(shape, device=DEV, generator=g).to(dtype)
    (ga,) = torch.autograd.grad(out, xa, grad)
    (gb,) = torch.autograd.grad(want, xb, grad)
    assert (ga.float() - gb.float()).abs().max().item() <= 1e-6


def test_e4m3_grid_ties_and_neighbours_cuda():
    from libreyolo.kernels.quant.simulate.triton_fake_quant import fake_quant_fp8_triton

    grid = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (grid[:-1] + grid[1:]) / 2
    pts = torch.cat([grid, mids, torch.tensor([464.0, 480.0, 1e4, 2.0**-10, 1e-40])])
    v = torch.cat([pts, torch.nextafter(pts, torch.full_like(pts, float("inf"))),
                   torch.nextafter(pts, torch.zeros_like(pts))])
    v = torch.cat([v, -v, torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0])])
    for s in (1.0, 0.37, 3.0e-3):
        x = (v * s).to(DEV)
        scale = torch.tensor(s, device=DEV)
        got = fake_quant_fp8_triton(x, scale)
        _assert_bits_equal(got, fake_quant_fp8_reference(x, scale))
        _assert_bits_equal(got.cpu(), fake_quant_fp8_reference(x.cpu(), scale.cpu()))


def test_large_tensor_parity_cuda():
    x = torch.randn(16 * 2**20, device=DEV) * 5
    s = compute_scale(x, fmt="fp8")
    _assert_bits_equal(fake_quant(x, s, fmt="fp8"), fake_quant_fp8_reference(x, s))


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_unpack_parity_cuda(fmt, dtype):
    from libreyolo.kernels.quant.execute.triton_fused import unpack

    p = pack_weight(torch.randn(64, 32, 3, 3, device=DEV) * 3, fmt=fmt)
    _assert_bits_equal(unpack(p.data, p.scale, dtype=dtype), unpack_weight_reference(p.data, p.scale, dtype=dtype))
    all_bytes = torch.arange(256, dtype=torch.uint8, device=DEV).view(torch.float8_e4m3fn).reshape(256, 1)
    ones = torch.ones(256, device=DEV)
    _assert_bits_equal(unpack(all_bytes, ones), unpack_weight_reference(all_bytes, ones))


def test_prologue_bytes_cuda():
    from libreyolo.kernels.quant.execute.triton_fused import quantize_fp8

    x = torch.randn(257, 96, device=DEV, dtype=torch.bfloat16) * 40
    s = torch.tensor(0.05, device=DEV)
    want = (x.float() * s.reciprocal()).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(quantize_fp8(x, s).view(torch.uint8), want.view(torch.uint8))


@pytest.mark.skipif(not _fp8_capable(), reason="FP8 tensor cores need compute capability >= 8.9")
@pytest.mark.parametrize("mode", ["tensorwise", "rowwise"])
@pytest.mark.parametrize(("m", "k", "n"), [(64, 256, 128), (1000, 64, 32), (4096, 512, 256), (33, 48, 16)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fp8_gemm_matches_portable_math(mode, m, k, n, dtype):
    from libreyolo.kernels.quant.execute.gemm import fp8_gemm

    if mode == "rowwise" and not _fp8_capable((9, 0)):
        pytest.skip("rowwise-scaled _scaled_mm needs sm_90+")
    g = torch.Generator(device=DEV).manual_seed(0)
    x = (torch.randn(m, k, device=DEV, generator=g) * 2).to(dtype)
    w = torch.randn(n, k, device=DEV, generator=g) * 0.1
    bias = torch.randn(n, device=DEV, generator=g)
    xs = compute_scale(x, fmt="fp8")
    p = pack_weight(w, fmt="fp8")
    out = fp8_gemm(x, p.data, xs, p.scale, bias, activation="silu", mode=mode)
    assert out.shape == (m, n) and out.dtype == dtype
    ref = F.silu(F.linear(fake_quant_fp8_reference(x.float(), xs), unpack_weight_reference(p.data, p.scale), bias))
    tol = GEMM_RTOL[mode] * ref.abs().max().item()
    if dtype != torch.float32:
        tol = max(tol, 1e-2 * ref.abs().max().item())  # output rounding to 16 bits
    assert (out.float() - ref).abs().max().item() <= tol


@pytest.mark.skipif(not _fp8_capable(), reason="FP8 tensor cores need compute capability >= 8.9")
def test_finalized_model_uses_fp8_gemm():
    import copy

    from libreyolo.kernels.quant.model import quantize_model

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(32, 64, 1), nn.SiLU(), nn.Conv2d(64, 32, 3, padding=1),
                        nn.Conv2d(32, 48, 1)).to(DEV).eval()
    x = torch.rand(2, 32, 20, 20, device=DEV)
    with torch.no_grad():
        unquantized = net(x)
    quantize_model(net, {"recipe": "fp8", "calibrate": x})
    sim = copy.deepcopy(net)
    with torch.no_grad():
        simulated = sim(x)
    holder = type("M", (), {})()
    holder.net, holder.quant = net, net.quant
    quantize_model(holder, {"recipe": "fp8", "finalize": True})
    assert registry.active()["fp8_gemm"] == "scaled_mm"
    calls = []
    registry.register("fp8_gemm", _counting(calls), name="counting_probe")
    try:
        # layer by layer, the same input into the simulated and the finalized layer: only the
        # accumulation differs (FP8 tensor cores vs a float32 / TF32 convolution)
        h = x
        with torch.no_grad():
            for f_layer, s_layer in zip(net, sim, strict=True):
                got, want = f_layer(h), s_layer(h)
                scale = want.abs().max().item()
                assert (got - want).abs().max().item() <= GEMM_RTOL["tensorwise"] * scale + 1e-6, f_layer
                h = want
            out = net(x)
    finally:
        registry.unregister("fp8_gemm", "counting_probe")
    assert len(calls) >= 2, "the two 1x1 convolutions did not go through the fp8_gemm slot"
    assert not registry._disabled, registry._disabled
    # End to end, each later layer quantizes its input to FP8: an input next to a rounding boundary
    # may go to the neighbouring E4M3 value (a step of 6-12 %) on one path and not the other, and
    # a 3x3 convolution sums 576 such inputs, so elements differ by a few FP8 steps' worth while
    # the tensors agree as a whole (measured on an H200: about 20 % of elements beyond the
    # per-layer tolerance). Bound the relative L2 distance instead: well below the quantization
    # error itself (simulated FP8 vs the unquantized network).
    rel = ((out - simulated).norm() / simulated.norm()).item()
    qerr = ((simulated - unquantized).norm() / unquantized.norm()).item()
    assert rel < 0.5 * qerr, (rel, qerr)


def _counting(calls):
    """An fp8_gemm implementation that records the call and defers to the scaled_mm provider."""
    from libreyolo.kernels.quant.execute.gemm import fp8_gemm

    def impl(*args, **kwargs):
        calls.append(tuple(args[0].shape))
        return fp8_gemm(*args, **kwargs)

    return impl


def test_simulated_model_cuda_graph_replay_is_bit_identical():
    from libreyolo.kernels.quant.model import quantize_model

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.SiLU(), nn.Conv2d(16, 16, 1),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 8)).to(DEV).eval()
    quantize_model(net, {"recipe": "fp8", "calibrate": torch.rand(2, 3, 32, 32, device=DEV)})
    static = torch.zeros(2, 3, 32, 32, device=DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            net(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out_static = net(static)
    for seed in (1, 2):  # two different inputs: catches a stale capture
        x = torch.rand(2, 3, 32, 32, device=DEV, generator=torch.Generator(device=DEV).manual_seed(seed)) * seed
        static.copy_(x)
        graph.replay()
        with torch.no_grad():
            eager = net(x)
        assert torch.equal(out_static, eager)
