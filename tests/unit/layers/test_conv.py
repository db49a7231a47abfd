"""Conv building blocks: BatchNorm folding, RepConvN branch merging, GELAN block shapes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.layers.conv import ConvBNAct, RepConvN, fuse_conv_bn, fuse_modules
from libreyolo.models.yolo9.elan import ELAN1, SPPELAN, AConv, ADown, RepNCSPELAN4


def test_fuse_conv_bn_matches_bn_of_conv() -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(6, 8, 3, 2, 1, groups=2, bias=False)
    bn = nn.BatchNorm2d(8, eps=1e-3)
    randomise_norm_stats(bn, seed=0)
    bn.eval()
    x = torch.randn(2, 6, 9, 11)
    fused = fuse_conv_bn(conv, bn)
    assert fused.bias is not None and fused.groups == 2 and fused.stride == (2, 2)
    torch.testing.assert_close(fused(x), bn(conv(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k,s,g", [(1, 1, 1), (3, 2, 1), (3, 1, 4)])
def test_convbnact_fuse_is_equivalent_and_idempotent(k: int, s: int, g: int) -> None:
    torch.manual_seed(1)
    m = ConvBNAct(8, 16, k, s, g=g)
    randomise_norm_stats(m, seed=0)
    m.eval()
    x = torch.randn(2, 8, 10, 10)
    ref = m(x).clone()
    m.fuse()
    assert m.bn is None and m.conv.bias is not None
    torch.testing.assert_close(m(x), ref, rtol=1e-5, atol=1e-5)
    w = m.conv.weight
    m.fuse()  # second call is a no-op
    assert m.conv.weight is w


@pytest.mark.parametrize("s", [1, 2])
def test_repconvn_merges_branches_into_one_conv(s: int) -> None:
    torch.manual_seed(2)
    m = RepConvN(8, 12, s=s)
    randomise_norm_stats(m, seed=0)
    m.eval()
    x = torch.randn(2, 8, 12, 12)
    ref = m(x).clone()
    n_before = sum(p.numel() for p in m.parameters())
    m.fuse()
    assert m.conv1 is None and m.conv2 is None
    assert isinstance(m.conv, nn.Conv2d)
    assert m.conv.kernel_size == (3, 3) and m.conv.stride == (s, s)
    # two kernels + two BatchNorms -> one 3x3 kernel with bias
    assert sum(p.numel() for p in m.parameters()) == 12 * 8 * 9 + 12 < n_before
    torch.testing.assert_close(m(x), ref, rtol=1e-5, atol=1e-5)


def test_fuse_modules_fuses_nested_blocks_and_keeps_outputs() -> None:
    torch.manual_seed(3)
    block = RepNCSPELAN4(16, 32, 32, 16, 2)
    randomise_norm_stats(block, seed=0)
    block.eval()
    x = torch.randn(1, 16, 8, 8)
    ref = block(x).clone()
    n = fuse_modules(block)
    assert n > 0
    assert not any(isinstance(m, nn.BatchNorm2d) for m in block.modules())
    assert all(m.conv is not None for m in block.modules() if isinstance(m, RepConvN))
    torch.testing.assert_close(block(x), ref, rtol=1e-4, atol=1e-5)
    assert fuse_modules(block) == 0  # nothing left to fuse


def test_inplace_activation_is_autograd_safe() -> None:
    torch.manual_seed(4)
    block = nn.Sequential(ConvBNAct(4, 8, 3), RepConvN(8, 8), ConvBNAct(8, 4, 1)).train()
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    block(x).square().mean().backward()
    grads = [p.grad for p in block.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "block,c_in,c_out,down",
    [
        (AConv(8, 16), 8, 16, True),
        (ADown(8, 16), 8, 16, True),
        (ELAN1(8, 24, 16, 8), 8, 24, False),
        (RepNCSPELAN4(8, 24, 16, 8, 1), 8, 24, False),
        (SPPELAN(8, 24, 4), 8, 24, False),
    ],
)
def test_gelan_block_shapes(block: nn.Module, c_in: int, c_out: int, down: bool) -> None:
    y = block.eval()(torch.randn(2, c_in, 16, 12))
    assert y.shape == (2, c_out, 8 if down else 16, 6 if down else 12)


# ------------------------------------------------------------------ the fused fast path
def _fused(block):
    block.eval()
    block.fuse()
    return block


@pytest.mark.parametrize("act", [True, False])
def test_fused_block_skips_its_child_module_calls_with_the_same_bits(act):
    """A fused ConvBNAct / RepConvN computes act(conv(x)) through the two functional calls the
    child modules' forwards make: same bits as calling the children, and the children's
    ``__call__`` is not entered (that is what saves host time)."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 12, 12)
    for block in (_fused(ConvBNAct(8, 16, k=3, s=2, act=act)), _fused(RepConvN(8, 16, act=act))):
        with torch.no_grad():
            fast = block(x)
            slow = block.act(block.conv(x))
        assert torch.equal(fast, slow)
        calls = []
        block.conv.register_forward_pre_hook(lambda m, a, calls=calls: calls.append(m))
        with torch.no_grad():
            hooked = block(x)
        assert calls == [block.conv], "with a hook on the conv the module path must run (and call it)"
        assert torch.equal(hooked, fast)


def test_fused_block_takes_the_module_path_for_what_it_cannot_reproduce():
    class Scaled(nn.Conv2d):  # a subclass (e.g. a quantized or instrumented conv) keeps its forward
        def forward(self, x):
            return 2 * super().forward(x)

    block = _fused(ConvBNAct(4, 4, k=1))
    x = torch.randn(1, 4, 3, 3)
    scaled = Scaled(4, 4, 1, bias=True)
    scaled.load_state_dict(block.conv.state_dict())
    plain = block(x)
    block.conv = scaled
    with torch.no_grad():
        assert torch.equal(block(x), torch.nn.functional.silu(scaled(x)))  # the subclass's forward ran
        assert not torch.allclose(block(x), plain)
    block2 = _fused(ConvBNAct(4, 4, k=1, act=nn.ReLU()))
    seen = []
    block2.act.register_forward_hook(lambda m, a, o: seen.append(1))
    block2(torch.randn(1, 4, 3, 3))
    assert seen == [1]  # ReLU is not on the fast path: the module ran


def test_fuse_keeps_the_training_flag_of_the_replaced_conv():
    block = ConvBNAct(4, 4, k=3).eval()
    block.fuse()
    assert block.conv.training is False
    rep = RepConvN(4, 4).eval()
    rep.fuse()
    assert rep.conv.training is False
