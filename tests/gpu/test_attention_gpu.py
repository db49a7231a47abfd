"""GPU proofs of the attention kernels: Triton (and Hub, when loadable) vs the portable path on
RT-DETR-like shapes, and CUDA-graph capture of the MSDA layer replaying bit-identically."""

from __future__ import annotations

import pytest
import torch

from libreyolo.kernels import registry
from libreyolo.layers.msda import MSDeformAttn, level_layout, ms_deform_attn_portable

pytestmark = pytest.mark.cuda
OP = "ms_deform_attn"
SHAPES = [(80, 80), (40, 40), (20, 20)]  # RT-DETR at 640 px, strides 8/16/32
TOL = {torch.float32: 2e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}


def _inputs(dtype, *, batch=2, queries=300, heads=8, ch=32, points=4, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    s = sum(h * w for h, w in SHAPES)
    kw = {"device": "cuda", "generator": g}
    value = torch.randn(batch, s, heads, ch, **kw).to(dtype)
    loc = (torch.rand(batch, queries, heads, len(SHAPES), points, 2, **kw) * 1.1 - 0.05).to(dtype)
    if dtype == torch.float32:
        loc = _away_from_pixel_edges(loc)
    w = torch.rand(batch, queries, heads, len(SHAPES), points, **kw).softmax(-1).to(dtype)
    return value.requires_grad_(), loc.requires_grad_(), w.requires_grad_()


def _away_from_pixel_edges(loc):
    """Bilinear sampling is not differentiable where ``loc * size - 0.5`` is an integer; an fp32
    product that rounds across such an edge gives a different (equally valid) one-sided location
    gradient than the float64 reference. Keep fp32 test points >= 0.01 px away from edges.
    (fp16/bf16 locations times these sizes are exact in fp32, so they need no nudge.)"""
    size = torch.tensor([[w, h] for h, w in SHAPES], device=loc.device, dtype=torch.float64)
    px = loc.double() * size[:, None, :] - 0.5  # (B, Q, H, L, P, 2) in pixels
    frac = (px - px.floor()).clamp(0.01, 0.99)
    return ((px.floor() + frac + 0.5) / size[:, None, :]).to(loc.dtype)


def _check(fn, dtype):
    layout = level_layout(SHAPES, device="cuda")
    value, loc, w = _inputs(dtype)
    out = fn(value, layout.spatial_shapes, layout.level_start_index, loc, w)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (value, loc, w), grad)
    ref_in = [t.detach().double().requires_grad_() for t in (value, loc, w)]
    ref = ms_deform_attn_portable(ref_in[0], SHAPES, ref_in[1], ref_in[2])
    ref_g = torch.autograd.grad(ref, ref_in, grad.double())
    tol = TOL[dtype]
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)
    for name, a, b, scale in zip(("value", "loc", "weight"), got, ref_g, (1, 80, 1), strict=True):
        err = (a.double() - b).abs().max().item()
        bound = tol * scale * max(1.0, b.abs().max().item() / scale)
        assert err <= bound, f"{name} grad max err {err} > {bound}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_triton_matches_portable(dtype):
    from libreyolo.kernels.attention.msda_triton import ms_deform_attn_triton

    _check(ms_deform_attn_triton, dtype)


def test_hub_matches_portable():
    from libreyolo.kernels.attention import msda_hub

    if msda_hub.revision() is None:
        pytest.skip("no audited Hub revision pinned (msda_hub.HUB_REVISION is None)")
    pytest.importorskip("kernels")
    layout = level_layout(SHAPES, device="cuda")
    value, loc, w = _inputs(torch.float32)
    if not msda_hub.applies(value, layout.spatial_shapes, layout.level_start_index, loc, w):
        pytest.skip("Hub kernel could not be loaded here (no network / no cache)")
    _check(msda_hub.ms_deform_attn_hub, torch.float32)


@pytest.mark.parametrize("kernels", ["auto", "off"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_msda_layer_graph_replays_bit_identically(dtype, kernels, monkeypatch):
    if kernels == "off":
        monkeypatch.setenv("LIBREYOLO_KERNELS", "off")  # the portable path under capture
    registry.clear_cache()
    torch.manual_seed(0)
    layer = (
        MSDeformAttn(embed_dim=256, num_heads=8, num_levels=3, num_points=4).cuda().to(dtype).eval()
    )
    s = sum(h * w for h, w in SHAPES)
    static = [
        torch.zeros(2, 300, 256, device="cuda", dtype=dtype),
        torch.zeros(2, 300, 3, 4, device="cuda", dtype=dtype),
        torch.zeros(2, s, 256, device="cuda", dtype=dtype),
    ]

    def feed(seed, kind):
        g = torch.Generator(device="cuda").manual_seed(seed)
        q = torch.randn(2, 300, 256, device="cuda", generator=g)
        r = torch.rand(2, 300, 3, 4, device="cuda", generator=g) * (0.5 if kind else 1.0) + (
            0.25 if kind else 0
        )
        v = torch.randn(2, s, 256, device="cuda", generator=g) * (3.0 if kind else 1.0)
        return [t.to(dtype) for t in (q, r, v)]

    args = feed(1, 0)
    name = registry.resolve_name(
        OP,
        args[2].view(2, s, 8, 32),
        level_layout(SHAPES, device="cuda").spatial_shapes,
        level_layout(SHAPES, device="cuda").level_start_index,
        torch.zeros(2, 300, 8, 3, 4, 2, device="cuda", dtype=dtype),
        torch.zeros(2, 300, 8, 3, 4, device="cuda", dtype=dtype),
    )
    if kernels == "off":
        assert name == "unavailable", name
    else:
        assert name in ("triton", "hub"), f"expected an accelerated provider, got {name}"
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        for t, a in zip(static, args, strict=True):
            t.copy_(a)
        for _ in range(3):  # warm-up: compiles kernels and fills the layout cache
            layer(static[0], static[1], static[2], SHAPES)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = layer(static[0], static[1], static[2], SHAPES)
    for seed, kind in ((2, 0), (3, 1)):  # two probes from different distributions
        probe = feed(seed, kind)
        for t, a in zip(static, probe, strict=True):
            t.copy_(a)
        graph.replay()
        replayed = out.clone()
        with torch.no_grad():
            eager = layer(*probe, SHAPES)
        assert torch.equal(replayed, eager), f"graph replay differs from eager ({name}, {dtype})"
