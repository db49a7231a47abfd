"""NAFNet and RRDBNet: output shapes, published parameter counts, the registered families and the
BasicSR-layout converters (a synthetic state dict with the reference key names, run through a
functional forward written from the papers, must give what our network gives after conversion)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from libreyolo import LibreYOLO
from libreyolo.errors import CheckpointError
from libreyolo.models.esrgan import convert as esrgan_convert
from libreyolo.models.esrgan.nn import RRDBNet, RRDBSpec, build_rrdbnet
from libreyolo.models.nafnet import convert as nafnet_convert
from libreyolo.models.nafnet.nn import SPECS, NAFNet, build_nafnet
from libreyolo.registry import families, parse_weights_name


def n_params(net: torch.nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def test_parameter_counts_match_the_published_models() -> None:
    # NAFNet-SIDD-width32: 29.1 M (NAFNet model zoo); Real-ESRGAN x4plus RRDBNet: 16.7 M
    assert n_params(build_nafnet(size="w32")) == 29_159_715
    assert n_params(build_rrdbnet(size="x4")) == 16_697_987
    assert n_params(build_rrdbnet(size="x4b6")) == 4_467_779  # RealESRGAN_x4plus_anime_6B


def test_shapes_and_residual_form() -> None:
    torch.manual_seed(0)
    net = build_nafnet(size="t").eval()
    x = torch.rand(2, 3, 32, 48)
    with torch.no_grad():
        y = net(x)
        assert y.shape == x.shape
        net.head.weight.zero_(), net.head.bias.zero_()
        assert torch.equal(net(x), x)  # output = input + residual (the residual's last conv is zero)
    sr = RRDBNet(RRDBSpec(blocks=1, feat=8, grow=4))
    assert sr(torch.rand(1, 3, 5, 7)).shape == (1, 3, 20, 28)


def test_families_registered() -> None:
    fams = families()
    for name, token, size in (("nafnet", "NAFNet", "w32"), ("esrgan", "RealESRGAN", "x4")):
        fam = fams[name]
        assert fam.TASKS == ("restore",) and fam.OUTPUT_KIND == "restore"
        assert parse_weights_name(f"Libre{token}{size}-restore.pt").family == name
    assert (fams["nafnet"].STRIDE, fams["nafnet"].SCALE, fams["esrgan"].SCALE) == (16, 1, 4)
    assert fams["nafnet"](size="t", nc=5).nc == 1  # no classes, whatever nc is asked for


# ------------------------------------------------------------------ reference layouts
def _ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mu = x.mean(1, keepdim=True)
    var = (x - mu).pow(2).mean(1, keepdim=True)
    return (x - mu) / (var + 1e-6).sqrt() * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1)


def _ref_nafblock(sd: dict, p: str, x: torch.Tensor) -> torch.Tensor:
    """The paper's NAFBlock on reference key names (conv1..conv5, sca.1, norm1/2, beta, gamma)."""
    def conv(name: str, t: torch.Tensor, **kw: int) -> torch.Tensor:
        return F.conv2d(t, sd[f"{p}.{name}.weight"], sd[f"{p}.{name}.bias"], **kw)

    y = conv("conv1", _ln(x, sd[f"{p}.norm1.weight"], sd[f"{p}.norm1.bias"]))
    y = conv("conv2", y, padding=1, groups=y.shape[1])
    a, b = y.chunk(2, 1)
    y = a * b
    y = y * conv("sca.1", y.mean((2, 3), keepdim=True))
    x = x + conv("conv3", y) * sd[f"{p}.beta"]
    a, b = conv("conv4", _ln(x, sd[f"{p}.norm2.weight"], sd[f"{p}.norm2.bias"])).chunk(2, 1)
    return x + conv("conv5", a * b) * sd[f"{p}.gamma"]


def _ref_nafnet(sd: dict, x: torch.Tensor, spec) -> torch.Tensor:
    h = F.conv2d(x, sd["intro.weight"], sd["intro.bias"], padding=1)
    skips = []
    for i, n in enumerate(spec.enc):
        for j in range(n):
            h = _ref_nafblock(sd, f"encoders.{i}.{j}", h)
        skips.append(h)
        h = F.conv2d(h, sd[f"downs.{i}.weight"], sd[f"downs.{i}.bias"], stride=2)
    for j in range(spec.middle):
        h = _ref_nafblock(sd, f"middle_blks.{j}", h)
    for i, n in enumerate(spec.dec):
        h = F.pixel_shuffle(F.conv2d(h, sd[f"ups.{i}.0.weight"]), 2) + skips[-1 - i]
        for j in range(n):
            h = _ref_nafblock(sd, f"decoders.{i}.{j}", h)
    return x + F.conv2d(h, sd["ending.weight"], sd["ending.bias"], padding=1)


def _reference_nafnet_sd(spec, gen: torch.Generator | None) -> dict:
    """Tensors under the reference key names (random, or zeros without ``gen``), shapes from the
    paper's architecture."""
    sd: dict[str, torch.Tensor] = {}

    def put(k: str, *shape: int) -> None:
        sd[k] = torch.randn(*shape, generator=gen) * 0.2 if gen is not None else torch.zeros(shape)

    def block(p: str, c: int) -> None:
        for k, shape in (("norm1.weight", (c,)), ("norm1.bias", (c,)), ("conv1.weight", (2 * c, c, 1, 1)),
                         ("conv1.bias", (2 * c,)), ("conv2.weight", (2 * c, 1, 3, 3)), ("conv2.bias", (2 * c,)),
                         ("sca.1.weight", (c, c, 1, 1)), ("sca.1.bias", (c,)), ("conv3.weight", (c, c, 1, 1)),
                         ("conv3.bias", (c,)), ("norm2.weight", (c,)), ("norm2.bias", (c,)),
                         ("conv4.weight", (2 * c, c, 1, 1)), ("conv4.bias", (2 * c,)),
                         ("conv5.weight", (c, c, 1, 1)), ("conv5.bias", (c,)), ("beta", (1, c, 1, 1)),
                         ("gamma", (1, c, 1, 1))):
            put(f"{p}.{k}", *shape)

    c = spec.width
    put("intro.weight", c, 3, 3, 3), put("intro.bias", c)
    for i, n in enumerate(spec.enc):
        for j in range(n):
            block(f"encoders.{i}.{j}", c)
        put(f"downs.{i}.weight", 2 * c, c, 2, 2), put(f"downs.{i}.bias", 2 * c)
        c *= 2
    for j in range(spec.middle):
        block(f"middle_blks.{j}", c)
    for i, n in enumerate(spec.dec):
        put(f"ups.{i}.0.weight", 2 * c, c, 1, 1)
        c //= 2
        for j in range(n):
            block(f"decoders.{i}.{j}", c)
    put("ending.weight", 3, c, 3, 3), put("ending.bias", 3)
    return sd


def test_nafnet_converter_matches_the_reference_forward() -> None:
    gen = torch.Generator().manual_seed(0)
    spec = SPECS["t"]
    sd = _reference_nafnet_sd(spec, gen)
    assert nafnet_convert.size_of(sd) == "t"
    net = NAFNet(spec).eval()
    net.load_state_dict(nafnet_convert.convert_state_dict(sd, net.state_dict()), strict=True)
    x = torch.rand(1, 3, 32, 32, generator=gen)
    with torch.no_grad():
        ours, ref = net(x), _ref_nafnet(sd, x, spec)
        assert float((ours - ref).abs().max() / ref.abs().max()) < 1e-5  # same function, float32 rounding
    w32 = _reference_nafnet_sd(SPECS["w32"], None)
    assert nafnet_convert.size_of(w32) == "w32"
    del w32["middle_blks.11.beta"], w32["middle_blks.11.gamma"]  # still 12 blocks: the misfit is named
    with pytest.raises(CheckpointError, match="middle_blks.11.beta|has no place|nothing"):
        nafnet_convert.convert_state_dict(w32, build_nafnet(size="w32").state_dict())
    with pytest.raises(CheckpointError, match="not part of a NAFNet"):
        nafnet_convert.rename_key("encoders.0.0.conv9.weight")


def _reference_rrdb_sd(blocks: int, gen: torch.Generator, *, old: bool = False) -> dict:
    f, g = 64, 32
    sd: dict[str, torch.Tensor] = {}
    names = (("conv_first", "trunk_conv", "upconv1", "upconv2", "HRconv", "conv_last") if old else
             ("conv_first", "conv_body", "conv_up1", "conv_up2", "conv_hr", "conv_last"))
    for name, (o, i) in zip(names, ((f, 3), (f, f), (f, f), (f, f), (f, f), (3, f)), strict=True):
        sd[f"{name}.weight"], sd[f"{name}.bias"] = torch.randn(o, i, 3, 3, generator=gen) * 0.02, torch.randn(o, generator=gen) * 0.02
    for b in range(blocks):
        for r in range(1, 4):
            for c in range(1, 6):
                p = f"RRDB_trunk.{b}.RDB{r}.conv{c}" if old else f"body.{b}.rdb{r}.conv{c}"
                sd[f"{p}.weight"] = torch.randn(g if c < 5 else f, f + (c - 1) * g, 3, 3, generator=gen) * 0.02
                sd[f"{p}.bias"] = torch.randn(g if c < 5 else f, generator=gen) * 0.02
    return sd


def _ref_rrdbnet(sd: dict, x: torch.Tensor, blocks: int) -> torch.Tensor:
    def conv(k: str, t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(t, sd[f"{k}.weight"], sd[f"{k}.bias"], padding=1)

    lrelu = lambda t: F.leaky_relu(t, 0.2)  # noqa: E731
    feat = conv("conv_first", x)
    h = feat
    for b in range(blocks):
        inner = h
        for r in range(1, 4):
            xs = [inner]
            for c in range(1, 5):
                xs.append(lrelu(conv(f"body.{b}.rdb{r}.conv{c}", torch.cat(xs, 1))))
            inner = inner + 0.2 * conv(f"body.{b}.rdb{r}.conv5", torch.cat(xs, 1))
        h = h + 0.2 * inner
    h = feat + conv("conv_body", h)
    h = lrelu(conv("conv_up1", F.interpolate(h, scale_factor=2, mode="nearest")))
    h = lrelu(conv("conv_up2", F.interpolate(h, scale_factor=2, mode="nearest")))
    return conv("conv_last", lrelu(conv("conv_hr", h)))


def test_rrdbnet_converter_matches_the_reference_forward_both_spellings() -> None:
    gen = torch.Generator().manual_seed(0)
    sd = _reference_rrdb_sd(6, gen)
    assert esrgan_convert.size_of(sd) == "x4b6"
    net = build_rrdbnet(size="x4b6").eval()
    net.load_state_dict(esrgan_convert.convert_state_dict(sd, net.state_dict()), strict=True)
    x = torch.rand(1, 3, 6, 5, generator=gen)
    with torch.no_grad():
        ref = _ref_rrdbnet(sd, x, 6)
        assert torch.allclose(net(x), ref, atol=1e-5, rtol=1e-4)
        old = _reference_rrdb_sd(6, torch.Generator().manual_seed(0), old=True)  # same values, ESRGAN names
        net.load_state_dict(esrgan_convert.convert_state_dict(old, net.state_dict()), strict=True)
        assert torch.allclose(net(x), ref, atol=1e-5, rtol=1e-4)
    with pytest.raises(CheckpointError, match="none of the sizes"):
        esrgan_convert.size_of(_reference_rrdb_sd(2, gen))


def test_basicsr_checkpoint_loads_through_libreyolo(tmp_path: Path) -> None:
    sd = _reference_nafnet_sd(SPECS["t"], torch.Generator().manual_seed(1))
    file = tmp_path / "nafnet_t.pth"
    torch.save({"params": {k: v * 0 for k, v in sd.items()}, "params_ema": sd}, file)  # params_ema wins
    model = LibreYOLO(str(file))
    assert (model.FAMILY, model.size, model.task) == ("nafnet", "t", "restore")
    assert torch.equal(model.net.state_dict()["enc.0.0.pw1.weight"], sd["encoders.0.0.conv1.weight"])
    file = tmp_path / "rrdb.pth"
    torch.save({"params_ema": _reference_rrdb_sd(6, torch.Generator().manual_seed(2))}, file)
    assert LibreYOLO(str(file)).FAMILY == "esrgan"
