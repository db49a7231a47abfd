"""The Triton provider of ``ms_deform_attn`` under the CPU interpreter (TRITON_INTERPRET=1)."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from libreyolo.kernels import registry  # noqa: E402
from libreyolo.layers.msda import ms_deform_attn, ms_deform_attn_portable  # noqa: E402

OP = "ms_deform_attn"


@pytest.fixture
def triton_cpu(monkeypatch):
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(triton.language.zeros, InterpretedFunction):
        pytest.skip("CPU Triton tests need TRITON_INTERPRET=1 set before triton is imported")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("LIBREYOLO_HUB_KERNELS", "0")
    monkeypatch.setenv("LIBREYOLO_KERNELS", "triton")  # on CPU the interpreter is used only when asked for
    registry.clear_cache()
    from libreyolo.kernels.attention import msda_triton

    return msda_triton


def _grads(fn, inputs, grad):
    out = fn(*inputs)
    return (out, *torch.autograd.grad(out, inputs, grad))


@pytest.mark.parametrize(
    ("dtype", "atol"), [(torch.float32, 1e-5), (torch.float16, 4e-3), (torch.bfloat16, 3e-2)]
)
def test_forward_backward_match_portable(triton_cpu, make_inputs, dtype, atol):
    shapes, layout, value, loc, weights = make_inputs(dtype=dtype, grad=True)
    out = triton_cpu.ms_deform_attn_triton(
        value, layout.spatial_shapes, layout.level_start_index, loc, weights
    )
    assert out.dtype == dtype and out.shape == (2, 5, 6)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    got = torch.autograd.grad(out, (value, loc, weights), grad)
    ref64 = [t.detach().double().requires_grad_() for t in (value, loc, weights)]
    ref = _grads(lambda v, sl, w: ms_deform_attn_portable(v, shapes, sl, w), ref64, grad.double())
    torch.testing.assert_close(out.double(), ref[0], atol=atol, rtol=atol)
    for g, r, scale in zip(got, ref[1:], (1, 8, 1), strict=True):  # loc grads scale with W
        torch.testing.assert_close(g.double(), r, atol=atol * scale * 4, rtol=atol * 4)


def test_gradcheck_float64(triton_cpu, make_inputs):
    _, layout, value, loc, weights = make_inputs(dtype=torch.float64, grad=True)
    # keep sampling points away from pixel edges where bilinear is not differentiable
    with torch.no_grad():
        loc.copy_(torch.rand(loc.shape, generator=torch.Generator().manual_seed(3)) * 0.6 + 0.2)

    def fn(v, sl, w):
        return triton_cpu.ms_deform_attn_triton(
            v, layout.spatial_shapes, layout.level_start_index, sl, w
        )

    assert torch.autograd.gradcheck(
        fn, (value, loc, weights), eps=1e-6, atol=1e-6, rtol=1e-5, fast_mode=True
    )


def test_selected_by_registry_and_used_by_layer(triton_cpu, make_inputs, monkeypatch):
    shapes, layout, value, loc, weights = make_inputs()
    args = (value, layout.spatial_shapes, layout.level_start_index, loc, weights)
    assert registry.resolve_name(OP, *args) == "triton"
    calls = []
    real = triton_cpu._forward
    monkeypatch.setattr(triton_cpu, "_forward", lambda *a: calls.append(1) or real(*a))
    out = ms_deform_attn(value, layout, loc, weights)
    assert calls, "the layer did not run the Triton provider"
    torch.testing.assert_close(
        out, ms_deform_attn_portable(value, shapes, loc, weights), atol=1e-5, rtol=1e-5
    )


def test_interpreter_alone_does_not_pick_triton_for_cpu_tensors(triton_cpu, make_inputs, monkeypatch):
    """Without ``LIBREYOLO_KERNELS=triton`` the (slow) interpreter is never the automatic choice."""
    _, layout, value, loc, weights = make_inputs()
    args = (value, layout.spatial_shapes, layout.level_start_index, loc, weights)
    monkeypatch.delenv("LIBREYOLO_KERNELS")
    registry.clear_cache()
    assert not triton_cpu.applies(*args)
    assert registry.resolve_name(OP, *args) != "triton"


def test_declines_outside_eager_and_for_special_layouts(triton_cpu, make_inputs, monkeypatch):
    _, layout, value, loc, weights = make_inputs()
    args = (value, layout.spatial_shapes, layout.level_start_index, loc, weights)
    assert triton_cpu.applies(*args)
    for probe in ("is_tracing", "is_compiling", "is_exporting", "is_onnx_exporting"):
        with monkeypatch.context() as m:
            m.setattr(f"libreyolo.kernels.context.{probe}", lambda: True)
            assert not triton_cpu.applies(*args), probe
    b, q, h, lv, p, _ = loc.shape
    mixed = (
        value,
        args[1],
        args[2],
        loc.reshape(b, q, h, lv * p, 2),
        weights.reshape(b, q, h, lv * p),
    )
    assert not triton_cpu.applies(*mixed)
    discrete = (value, args[1], args[2], (loc * 4).long(), weights)
    assert not triton_cpu.applies(*discrete)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not triton_cpu.applies(*args)  # CPU without the interpreter


def test_jit_trace_keeps_portable_math(triton_cpu, make_inputs, monkeypatch):
    shapes, layout, value, loc, weights = make_inputs()
    monkeypatch.setattr(
        triton_cpu, "_forward", lambda *a: (_ for _ in ()).throw(AssertionError("triton in trace"))
    )
    traced = torch.jit.trace(
        lambda v, sl, w: ms_deform_attn(v, layout, sl, w), (value, loc, weights), check_trace=False
    )
    torch.testing.assert_close(
        traced(value, loc, weights), ms_deform_attn_portable(value, shapes, loc, weights)
    )


def test_kernels_off_never_uses_triton(triton_cpu, make_inputs, monkeypatch):
    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    _, layout, value, loc, weights = make_inputs()
    assert (
        registry.resolve(OP, value, layout.spatial_shapes, layout.level_start_index, loc, weights)
        is None
    )
