"""Reference quantization against hand-computed values (SPEC K-5, K-11)."""

from __future__ import annotations

import io

import pytest
import torch

from libreyolo.errors import ConfigError
from libreyolo.quant import (
    amax,
    compute_scale,
    fake_quant_fp8_reference,
    fake_quant_fp8_ste,
    fake_quant_int8_reference,
    fake_quant_int8_ste,
    get_format,
    pack_weight,
    scale_from_amax,
    unpack_weight_reference,
)

ONE = torch.tensor(1.0)


def test_fp8_rounding_by_hand():
    # spacing 1/8 in [1, 2): 1.0625 is a tie -> even mantissa (1.0); 1.1875 tie -> 1.25
    x = torch.tensor([1.06, 1.0625, 1.1875, 1.07, 300.0, 304.0, 305.0, 0.0, -1.06])
    # spacing 32 in [256, 512): 304 is a tie between 288 (mantissa 001) and 320 (010) -> 320
    want = torch.tensor([1.0, 1.0, 1.25, 1.125, 288.0, 320.0, 320.0, 0.0, -1.0])
    assert torch.equal(fake_quant_fp8_reference(x, ONE), want)


def test_fp8_subnormals_by_hand():
    # subnormal spacing 2**-9; 2**-10 is a tie between 0 and 2**-9 -> 0 (even)
    x = torch.tensor([2.0**-10, 1.5 * 2.0**-10, 2.0**-9, 3 * 2.0**-10, 2.0**-6 - 2.0**-12])
    want = torch.tensor([0.0, 2.0**-9, 2.0**-9, 2 * 2.0**-9, 2.0**-6])
    assert torch.equal(fake_quant_fp8_reference(x, ONE), want)


def test_fp8_saturates_at_448_times_scale():
    x = torch.tensor([448.0, 449.0, 500.0, 1e30, float("inf"), -float("inf"), -1e9])
    assert torch.equal(fake_quant_fp8_reference(x, ONE),
                       torch.tensor([448.0, 448.0, 448.0, 448.0, 448.0, -448.0, -448.0]))
    assert torch.equal(fake_quant_fp8_reference(torch.tensor([2000.0, 600.0]), torch.tensor(2.0)),
                       torch.tensor([896.0, 576.0]))  # 600/2 = 300 -> 288 -> 576
    assert torch.isnan(fake_quant_fp8_reference(torch.tensor([float("nan")]), ONE)).all()


def test_fp8_per_channel_by_hand():
    x = torch.tensor([[1.06, 300.0], [1.06, 300.0]])
    out = fake_quant_fp8_reference(x, torch.tensor([1.0, 4.0]), axis=0)
    # row 1: 1.06/4 = 0.265 -> spacing 1/32 in [0.25, 0.5): 0.25 -> 1.0; 300/4 = 75 -> spacing 8: 72 -> 288
    assert torch.equal(out, torch.tensor([[1.0, 288.0], [1.0, 288.0]]))
    out = fake_quant_fp8_reference(x, torch.tensor([1.0, 0.5]), axis=1)
    # column 1: 300/0.5 = 600 -> saturates at 448 -> 224
    assert torch.equal(out, torch.tensor([[1.0, 224.0], [1.0, 224.0]]))


def test_int8_by_hand():
    x = torch.tensor([0.25, 0.75, 1.0, 100.0, -100.0, -0.25, 1.25])
    # x / 0.5 = 0.5, 1.5, 2, 200, -200, -0.5, 2.5 -> half to even: 0, 2, 2, 127, -127, -0, 2
    out = fake_quant_int8_reference(x, torch.tensor(0.5))
    assert torch.equal(out, torch.tensor([0.0, 1.0, 1.0, 63.5, -63.5, -0.0, 1.0]))
    pc = fake_quant_int8_reference(torch.tensor([[3.0, 3.0], [3.0, 3.0]]), torch.tensor([1.0, 2.0]), axis=0)
    assert torch.equal(pc, torch.tensor([[3.0, 3.0], [4.0, 4.0]]))  # 3/2 = 1.5 -> 2 -> 4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_compute_in_fp32(dtype):
    x = torch.tensor([1.06, 300.0, 1000.0]).to(dtype)
    out = fake_quant_fp8_reference(x, ONE)
    assert out.dtype == dtype
    assert torch.equal(out.float(), torch.tensor([1.0, 288.0, 448.0]))


@pytest.mark.parametrize("fn,qmax", [(fake_quant_fp8_ste, 448.0), (fake_quant_int8_ste, 127.0)])
def test_ste_gradient_is_clipped_identity(fn, qmax):
    x = torch.tensor([1.0, qmax, qmax + 1, -qmax - 1, -3.0, float("nan")], requires_grad=True)
    out = fn(x, ONE)
    grad = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    (g,) = torch.autograd.grad(out, x, grad)
    assert torch.equal(g, torch.tensor([1.0, 2.0, 0.0, 0.0, 5.0, 0.0]))


def test_ste_per_channel_mask():
    x = torch.tensor([[100.0, 500.0], [100.0, 500.0]], requires_grad=True)
    out = fake_quant_fp8_ste(x, torch.tensor([1.0, 0.1]), axis=0)
    (g,) = torch.autograd.grad(out.sum(), x)
    assert torch.equal(g, torch.tensor([[1.0, 0.0], [0.0, 0.0]]))  # 100/0.1 = 1000 saturates


def test_scales():
    x = torch.tensor([[1.0, -4.0], [0.0, 0.0], [2.0, 0.5]])
    assert amax(x).item() == 4.0
    assert torch.equal(amax(x, axis=0), torch.tensor([4.0, 0.0, 2.0]))
    assert torch.equal(amax(x, axis=-1), torch.tensor([2.0, 4.0]))
    s = compute_scale(x, fmt="fp8", axis=0)
    assert torch.equal(s, torch.tensor([4.0 / 448, 1.0, 2.0 / 448]))  # zero channel -> scale 1
    assert scale_from_amax(torch.tensor(float("inf")), fmt="int8").item() == 1.0
    assert compute_scale(x, fmt="int8").item() == pytest.approx(4.0 / 127)
    assert get_format("fp8").qmax == 448.0 and get_format("int8").qmax == 127.0


def test_amax_scale_keeps_channel_max_on_grid():
    w = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    s = compute_scale(w, fmt="fp8", axis=0)
    out = fake_quant_fp8_reference(w, s, axis=0)
    idx = w.abs().argmax(dim=1)
    assert torch.allclose(out.gather(1, idx[:, None]), w.gather(1, idx[:, None]), rtol=1e-6)


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
def test_packing_round_trip(fmt):
    w = torch.randn(8, 4, 3, 3, generator=torch.Generator().manual_seed(3)) * 3
    p = pack_weight(w, fmt=fmt)
    assert p.data.dtype == get_format(fmt).storage and p.scale.shape == (8,)
    ref = fake_quant_fp8_reference if fmt == "fp8" else fake_quant_int8_reference
    unpacked = unpack_weight_reference(p.data, p.scale)
    assert torch.equal(unpacked, ref(w, p.scale, axis=0))
    again = pack_weight(unpacked, fmt=fmt, scale=p.scale)
    assert torch.equal(again.data.view(torch.uint8), p.data.view(torch.uint8))
    buf = io.BytesIO()  # the checkpoint contract survives torch.save / weights_only load
    torch.save({"weight_packed": p.data, "weight_scale": p.scale}, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)
    assert torch.equal(unpack_weight_reference(back["weight_packed"], back["weight_scale"]), unpacked)


def test_packing_safetensors_round_trip(tmp_path):
    from safetensors.torch import load_file, save_file

    p = pack_weight(torch.randn(4, 16), fmt="fp8")
    save_file({"w.weight_packed": p.data, "w.weight_scale": p.scale}, str(tmp_path / "q.safetensors"))
    back = load_file(str(tmp_path / "q.safetensors"))
    assert torch.equal(back["w.weight_packed"].view(torch.uint8), p.data.view(torch.uint8))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: fake_quant_fp8_reference(torch.arange(3), ONE), "float32/float16/bfloat16"),
        (lambda: fake_quant_fp8_reference(torch.zeros(2, 3), torch.ones(3), axis=0), "does not match"),
        (lambda: fake_quant_fp8_reference(torch.zeros(2, 3), torch.ones(2)), "per-tensor scale"),
        (lambda: fake_quant_fp8_reference(torch.zeros(2, 3), ONE, axis=2), "out of range"),
        (lambda: fake_quant_fp8_reference(torch.zeros(2), 1.0), "scale"),
        (lambda: get_format("fp4"), "unknown quantization format"),
        (lambda: unpack_weight_reference(torch.zeros(2, 2), torch.ones(2)), "float8_e4m3fn or int8"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ConfigError, match=match):
        call()
