"""The portable multi-scale deformable attention path and the shared layer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libreyolo.errors import ConfigError
from libreyolo.layers.msda import (
    MSDeformAttn,
    level_layout,
    ms_deform_attn,
    ms_deform_attn_portable,
)


def test_hand_computed_tiny_case():
    # one level 2x2, values 1..4 (row-major), one head, one channel
    value = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 4, 1, 1)
    # pixel centre of (x=0, y=0) -> 1; centre of the map -> mean 2.5;
    # x=0.5/2-... : loc (0.5, 0.25) -> pixel (0.5, 0.0): halfway between 1 and 2 -> 1.5
    # loc (0.0, 0.25) -> pixel (-0.5, 0): half of pixel (0,0) with zero padding -> 0.5
    loc = torch.tensor([[0.25, 0.25], [0.5, 0.5], [0.5, 0.25], [0.0, 0.25]]).view(1, 4, 1, 1, 1, 2)
    w = torch.ones(1, 4, 1, 1, 1)
    out = ms_deform_attn_portable(value, [(2, 2)], loc, w)
    assert out.shape == (1, 4, 1)
    torch.testing.assert_close(out.flatten(), torch.tensor([1.0, 2.5, 1.5, 0.5]))
    # weights scale linearly and levels/points sum
    w2 = torch.full((1, 4, 1, 1, 1), 0.5)
    torch.testing.assert_close(ms_deform_attn_portable(value, [(2, 2)], loc, w2), out * 0.5)


def test_matches_naive_loop_float64(make_inputs):
    shapes, _, value, loc, weights = make_inputs(dtype=torch.float64)
    out = ms_deform_attn_portable(value, shapes, loc, weights)
    b, s, h, c = value.shape
    q, p = loc.shape[1], loc.shape[4]
    ref = torch.zeros(b, q, h, c, dtype=torch.float64)
    starts = [0, 12]
    for bi in range(b):
        for qi in range(q):
            for hi in range(h):
                for li, (hh, ww) in enumerate(shapes):
                    for pi in range(p):
                        x = float(loc[bi, qi, hi, li, pi, 0]) * ww - 0.5
                        y = float(loc[bi, qi, hi, li, pi, 1]) * hh - 0.5
                        x0, y0 = (
                            int(torch.floor(torch.tensor(x))),
                            int(torch.floor(torch.tensor(y))),
                        )
                        fx, fy = x - x0, y - y0
                        for yy, xx, cw in (
                            (y0, x0, (1 - fx) * (1 - fy)),
                            (y0, x0 + 1, fx * (1 - fy)),
                            (y0 + 1, x0, (1 - fx) * fy),
                            (y0 + 1, x0 + 1, fx * fy),
                        ):
                            if 0 <= xx < ww and 0 <= yy < hh:
                                ref[bi, qi, hi] += (
                                    weights[bi, qi, hi, li, pi]
                                    * cw
                                    * value[bi, starts[li] + yy * ww + xx, hi]
                                )
    torch.testing.assert_close(out, ref.view(b, q, h * c), rtol=1e-12, atol=1e-12)


def test_mixed_points_equals_uniform_when_counts_are_equal(make_inputs):
    shapes, _, value, loc, weights = make_inputs(dtype=torch.float64)
    b, q, h, lv, p, _ = loc.shape
    uniform = ms_deform_attn_portable(value, shapes, loc, weights)
    mixed = ms_deform_attn_portable(
        value,
        shapes,
        loc.reshape(b, q, h, lv * p, 2),
        weights.reshape(b, q, h, lv * p),
        num_points=(p, p),
    )
    torch.testing.assert_close(mixed, uniform)
    # a truly mixed layout: dropping level-1 points equals zeroing their weights
    w0 = weights.clone()
    w0[:, :, :, 1, 1:] = 0
    keep = torch.tensor([0, 1, 2, 3])  # 3 points on level 0, 1 on level 1
    mixed = ms_deform_attn_portable(
        value,
        shapes,
        loc.reshape(b, q, h, lv * p, 2)[:, :, :, keep],
        weights.reshape(b, q, h, lv * p)[:, :, :, keep],
        num_points=(3, 1),
    )
    torch.testing.assert_close(mixed, ms_deform_attn_portable(value, shapes, loc, w0))


def test_discrete_sampling_gathers_pixels():
    value = torch.arange(6.0).view(1, 6, 1, 1)  # one level 2x3
    idx = torch.tensor([[0, 0], [2, 1], [5, 7], [-3, 0]]).view(1, 4, 1, 1, 1, 2)  # (x, y), clamped
    out = ms_deform_attn_portable(value, [(2, 3)], idx, torch.ones(1, 4, 1, 1, 1))
    assert out.flatten().tolist() == [0.0, 5.0, 5.0, 0.0]


def test_level_layout_device_tensors_and_cache():
    layout = level_layout([(8, 6), (4, 3)])
    assert layout.spatial_shapes.tolist() == [[8, 6], [4, 3]]
    assert layout.level_start_index.tolist() == [0, 48]
    assert layout.normalizer.tolist() == [[6, 8], [3, 4]]
    assert layout.total == 60 and layout.num_levels == 2
    assert level_layout(((8, 6), (4, 3))) is layout  # memoised: same tensors, same addresses
    with pytest.raises(ConfigError):
        level_layout([])


def test_forward_never_reads_device_values(monkeypatch):
    m = MSDeformAttn(embed_dim=16, num_heads=2, num_levels=2, num_points=(2, 3))
    u = MSDeformAttn(embed_dim=16, num_heads=2, num_levels=2, num_points=2, method="discrete")
    shapes = [(3, 4), (2, 2)]
    level_layout(shapes)  # built once, outside the "graph"

    def boom(*a, **k):
        raise AssertionError("host read of a device value in forward")

    monkeypatch.setattr(torch.Tensor, "item", boom)
    monkeypatch.setattr(torch.Tensor, "tolist", boom)
    x, v = torch.rand(2, 5, 16), torch.rand(2, 16, 16)
    assert m(x, torch.rand(2, 5, 2, 4), v, shapes).shape == (2, 5, 16)
    assert u(x, torch.rand(2, 5, 2, 2), v, shapes).shape == (2, 5, 16)


def test_layer_uses_op_and_gradients_flow():
    torch.manual_seed(0)
    m = MSDeformAttn(embed_dim=16, num_heads=2, num_levels=2, num_points=2)
    shapes = [(3, 4), (2, 2)]
    q, ref, v = (
        torch.rand(2, 5, 16),
        torch.rand(2, 5, 2, 2),
        torch.rand(2, 16, 16, requires_grad=True),
    )
    out = m(q, ref, v, shapes)
    out.sum().backward()
    assert v.grad is not None and v.grad.abs().sum() > 0
    assert m.sampling_offsets.weight.grad is not None
    # zero attention logits -> uniform weights over the L*P samples
    assert torch.allclose(
        m.attention_weights(q).view(2, 5, 2, 4).softmax(-1), torch.full((2, 5, 2, 4), 0.25)
    )
    with pytest.raises(ConfigError):
        m(q, ref, v, [(3, 4)])
    with pytest.raises(ConfigError):
        MSDeformAttn(embed_dim=10, num_heads=3)


def test_slot_without_provider_runs_portable(monkeypatch, make_inputs):
    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    shapes, layout, value, loc, weights = make_inputs()
    torch.testing.assert_close(
        ms_deform_attn(value, layout, loc, weights),
        ms_deform_attn_portable(value, shapes, loc, weights),
    )


def test_export_keeps_portable_math_and_eager_still_works():
    class Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = MSDeformAttn(embed_dim=16, num_heads=2, num_levels=2, num_points=2)

        def forward(self, q, r, v):
            return self.attn(q, r, v, [(5, 3), (2, 2)])

    torch.manual_seed(0)
    model = Wrap().eval()
    args = (torch.rand(1, 4, 16), torch.rand(1, 4, 2, 2), torch.rand(1, 19, 16))
    exported = torch.export.export(model, args)
    assert "grid_sampler" in str(exported.graph)
    # the export's (fake) layout tensors must not leak into later eager calls
    eager = model(*args)
    assert type(level_layout([(5, 3), (2, 2)]).spatial_shapes) is torch.Tensor
    torch.testing.assert_close(exported.module()(*args), eager)
