"""SwinIR fidelity against a reference implementation: spandrel (MIT; the ``ref`` extra) ships the
SwinIR network definition of JingyunLiang/SwinIR with the official module names. Built with the
lightweight SR configuration and a fixed seed (LayerNorms, biases and bias tables randomised), its
state dict converts onto ours and the outputs agree (fp32, eval) within 1e-5 relative at input
sizes that need padding and at the 64 px size the reference's stored masks were built for; with
fused attention on as well. spandrel's own loader recognises the official file layout and our
converter reads the same file through ``LibreYOLO``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from libreyolo import LibreYOLO
from libreyolo.kernels.attention import set_fused_attention
from libreyolo.models.swinir import convert
from libreyolo.models.swinir.nn import SPECS, build_swinir

spandrel = pytest.importorskip("spandrel", reason="spandrel (the `ref` extra) ships the reference SwinIR")


@torch.no_grad()
def _reference(size: str) -> nn.Module:
    from spandrel.architectures.SwinIR import SwinIR as RefSwinIR

    spec = SPECS[size]
    torch.manual_seed(0)
    ref = RefSwinIR(upscale=spec.scale, in_chans=3, img_size=64, window_size=spec.window, img_range=spec.img_range,
                    depths=list(spec.depths), embed_dim=spec.dim, num_heads=list(spec.heads), mlp_ratio=spec.mlp_ratio,
                    upsampler="pixelshuffledirect", resi_connection="1conv")
    g = torch.Generator().manual_seed(1)
    for name, p in ref.named_parameters():  # a fresh init (LN 1 / 0, zero biases, ~0 tables) would hide a swap
        if "relative_position_bias_table" in name:
            p.copy_(torch.randn(p.shape, generator=g))
        elif name.endswith("bias"):
            p.copy_(0.1 * torch.randn(p.shape, generator=g))
        elif p.ndim == 1:
            p.copy_(0.75 + 0.5 * torch.rand(p.shape, generator=g))
    return ref.eval()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


@pytest.mark.parametrize("size", ["light_x2", "light_x4"])
@pytest.mark.parametrize("fused", [False, True], ids=["equation", "sdpa"])
def test_outputs_equal_the_reference_after_conversion(size: str, fused: bool) -> None:
    ref = _reference(size)
    sd = ref.state_dict()
    assert convert.size_of(sd) == size
    net = build_swinir(size=size).eval()
    net.load_state_dict(convert.convert_state_dict(sd, net.state_dict()), strict=True)
    assert set_fused_attention(net, enabled=fused) == 24
    assert sum(p.numel() for p in net.parameters()) == sum(p.numel() for p in ref.parameters())
    g = torch.Generator().manual_seed(2)
    for hw in ((13, 21), (64, 64), (40, 27)):
        x = torch.rand(1, 3, *hw, generator=g)
        with torch.no_grad():
            want, got = ref(x), net(x)
        assert got.shape == want.shape == (1, 3, hw[0] * SPECS[size].scale, hw[1] * SPECS[size].scale)
        assert float(want.std()) > 0.05, "a degenerate reference output would prove little"
        assert _rel(got, want) <= 1e-5, (hw, _rel(got, want))


def test_the_official_layout_loads_in_both(tmp_path: Path) -> None:
    ref = _reference("light_x4")
    desc = spandrel.ModelLoader().load_from_state_dict(ref.state_dict())
    assert desc.architecture.id == "SwinIR" and desc.scale == 4
    file = tmp_path / "002_lightweightSR_DIV2K_s64w8_SwinIR-S_x4.pth"
    torch.save({"params": ref.state_dict()}, file)
    model = LibreYOLO(str(file))
    assert (model.FAMILY, model.size, model.SCALE) == ("swinir", "light_x4", 4)
    x = torch.rand(1, 3, 19, 30, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert _rel(model.net.eval()(x), ref(x)) <= 1e-5
