"""The ``bias_act`` slot (libreyolo.kernels.conv_act): the reference is the two ATen calls of a
fused conv's bias add + SiLU; the Triton provider runs under the CPU interpreter here (its bits
against ATen's are checked on a GPU, tests/gpu/test_bias_act_gpu.py); the layer hook
(layers.conv.graph_bias_act) only changes anything for CUDA inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from libreyolo import kernels
from libreyolo.kernels import registry
from libreyolo.kernels.conv_act import bias_act_reference
from libreyolo.layers.conv import ConvBNAct, graph_bias_act

triton = pytest.importorskip("triton")


def _ulp(dtype: torch.dtype) -> float:
    return {torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]


def test_reference_is_the_conv_bias_then_silu():
    """The reference is the bias add then SiLU, bit for bit; against a conv that adds its own bias
    it agrees to rounding. (Bit for bit there only on the GPU, where cuDNN's conv adds the bias as a
    separate in-place add: tests/gpu/test_bias_act_gpu.py. A CPU conv may accumulate the bias
    inside its GEMM, in another order, depending on the CPU's oneDNN kernels.)"""
    x, conv = torch.randn(2, 3, 9, 11), torch.nn.Conv2d(3, 5, 3, padding=1)
    with torch.no_grad():
        y = F.conv2d(x, conv.weight, None, padding=1)
        plain = F.silu(y + conv.bias.view(1, -1, 1, 1))
        got = bias_act_reference(y, conv.bias)  # in place, into y
        assert torch.equal(got, plain)
        want = F.silu(conv(x))
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6), float((got - want).abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("shape", [(2, 24, 7, 13), (1, 200, 3, 5), (1, 3, 40, 41), (2, 1, 5, 5)],
                         ids=["partial-block", "many-channels", "long-maps", "one-channel"])
def test_triton_kernel_matches_the_reference_under_the_interpreter(dtype, layout, shape, monkeypatch):
    from libreyolo.kernels.attention.msda_triton import interpreting

    if not interpreting():
        pytest.skip("a GPU machine compiles the kernel: tests/gpu/test_bias_act_gpu.py checks its bits")
    monkeypatch.setenv("LIBREYOLO_KERNELS", "triton")
    registry.clear_cache()
    g = torch.Generator().manual_seed(0)
    # channel indexing every way: a partial last block, 200 channels (a block spans channel
    # boundaries in NCHW), maps longer than a block (40*41 > 512), a single channel
    y = (torch.randn(*shape, generator=g) * 4).to(dtype)
    if layout == "channels_last":
        y = y.contiguous(memory_format=torch.channels_last)
    b = torch.randn(shape[1], generator=g).to(dtype)
    ref = bias_act_reference(y.clone(), b)
    got = kernels.dispatch("bias_act", y.clone(), b)
    assert kernels.active()["bias_act"] == "triton"
    assert got.dtype == dtype and got.stride() == y.stride()
    # the interpreter has numpy's exp instead of libdevice's (and its own float -> half rounding):
    # a few units in the last place; a wrong channel index would be off by whole units
    torch.testing.assert_close(got.float(), ref.float(), rtol=4 * _ulp(dtype), atol=4 * _ulp(dtype))


def test_strided_or_mismatched_inputs_take_the_portable_path(monkeypatch):
    import libreyolo.kernels.conv_act.bias_act_triton as provider

    base, b = torch.randn(1, 8, 6, 6), torch.randn(4)
    strided = base.clone()[:, ::2]  # neither NCHW- nor channels-last-contiguous
    assert not strided.is_contiguous() and not strided.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(provider.bias_act_triton(strided, b), bias_act_reference(base.clone()[:, ::2], b))
    assert not provider.applies(torch.randn(1, 4, 2, 2, requires_grad=True), b)
    assert not provider.applies(torch.randn(4, 2), b)  # not 4-D


def test_cpu_tensors_keep_the_reference_unless_the_provider_is_asked_for():
    y, b = torch.randn(1, 4, 3, 3), torch.randn(4)
    assert registry.resolve("bias_act", y, b) is bias_act_reference


def test_graph_bias_act_nests_and_leaves_cpu_layers_unchanged():
    from libreyolo.layers import conv as conv_mod

    m = ConvBNAct(3, 6, 3).eval()
    m.fuse()
    x = torch.randn(1, 3, 10, 10)
    with torch.no_grad():
        eager = m(x)
        with graph_bias_act():
            assert conv_mod._GRAPH_BIAS_ACT.on
            with graph_bias_act(False):
                assert not conv_mod._GRAPH_BIAS_ACT.on
            assert conv_mod._GRAPH_BIAS_ACT.on
            inside = m(x)  # CPU input: ATen's kernels as outside
        assert not getattr(conv_mod._GRAPH_BIAS_ACT, "on", False)
    assert torch.equal(inside, eager)
