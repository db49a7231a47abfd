"""Whole-model quantization: model.quantize / dequantize / quant_info (SPEC K-5, G-8)."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.errors import ConfigError
from libreyolo.kernels.quant.model import dequantize_model, quant_info, quantize_model
from libreyolo.kernels.quant.modules import PackedConv2d, PackedLinear, QuantConv2d, QuantLinear
from libreyolo.model import Model
from libreyolo.models._base.family import Family
from libreyolo.quant import compute_scale, fake_quant_fp8_reference, fake_quant_int8_reference


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.SiLU(),
        nn.Conv2d(8, 16, 1), nn.SiLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4),
    )


class Tiny(Family):
    FAMILY: ClassVar[str] = "tinyq"
    SIZES: ClassVar[tuple[str, ...]] = ("n",)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        return _net()


class _Graphs:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def invalidate(self, reason: str) -> None:
        self.reasons.append(reason)


def _batches(n: int = 3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.rand(2, 3, 8, 8, generator=g) for _ in range(n)]


def test_family_quantize_invalidates_graphs_and_replaces_layers():
    model = Model(Tiny(size="n", nc=4))
    model.backend._graphs = _Graphs()
    assert model.quantize(recipe="fp8", calibrate=_batches()) is model
    assert model.backend._graphs.reasons == ["model quantized"]
    kinds = [type(m) for m in model.net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert kinds == [QuantConv2d, QuantConv2d, QuantLinear]
    info = model.quant_info()
    assert info["quantized"] and info["recipe"] == "fp8" and info["format"] == "fp8_e4m3"
    assert info["modules"] == 3 and info["calibration_batches"] == 3 and info["activations"]
    assert set(info["kernels"]) == {"fake_quant_fp8", "fake_quant_int8", "fp8_gemm", "unpack_weights"}
    model.dequantize()
    assert model.backend._graphs.reasons == ["model quantized", "model dequantized"]
    assert model.quant_info() == {"quantized": False, "kernels": info["kernels"]}


def test_min_max_calibration_sets_input_scale():
    net = _net()
    batches = _batches(3)
    quantize_model(net, {"recipe": "fp8", "calibrate": iter(batches), "batches": 2})
    first = net[0]
    want = torch.stack([b.abs().amax() for b in batches[:2]]).amax() / 448.0
    assert torch.equal(first.input_scale, want) and first.quant_input


def test_simulated_forward_is_the_reference_composition():
    net = _net().eval()
    x = _batches(1)[0]
    quantize_model(net, {"recipe": "int8", "calibrate": x})
    conv = net[0]
    s_in = conv.input_scale
    w = conv.weight
    want = F.conv2d(fake_quant_int8_reference(x, s_in), fake_quant_int8_reference(w, compute_scale(w, fmt="int8", axis=0), axis=0),
                    conv.bias, padding=1)
    with torch.no_grad():
        got = conv(x)
    assert torch.equal(got, want)


@pytest.mark.parametrize("recipe", ["fp8", "int8"])
def test_quantized_output_close_but_not_equal(recipe):
    net = _net().eval()
    x = _batches(1)[0]
    with torch.no_grad():
        ref = net(x)
        quantize_model(net, {"recipe": recipe, "calibrate": x})
        out = net(x)
    assert not torch.equal(out, ref)
    assert (out - ref).abs().max() <= 0.1 * ref.abs().max() + 1e-3


def test_weight_only_without_calibration():
    net = _net()
    state = quantize_model(net, {"recipe": "fp8"})
    assert state.calibration_batches == 0 and not net[0].quant_input
    assert quant_info(net)["activations"] is False


def test_qat_gradients_flow_and_weights_train():
    net = _net().train()
    quantize_model(net, {"recipe": "fp8", "calibrate": _batches(2)})
    assert net.training  # calibration restores the mode
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = _batches(1)[0]
    before = net[0].weight.detach().clone()
    loss = net(x).square().mean()
    loss.backward()
    assert net[0].weight.grad is not None and net[0].weight.grad.abs().sum() > 0
    assert net[7].weight.grad.abs().sum() > 0
    opt.step()
    assert not torch.equal(net[0].weight, before)


def test_finalize_packs_weights_and_matches_simulation():
    net = _net().eval()
    x = _batches(1)[0]
    quantize_model(net, {"recipe": "fp8", "calibrate": x})
    with torch.no_grad():
        simulated = net(x)
    model = type("M", (), {})()
    model.net, model.quant = net, net.quant
    quantize_model(model, {"recipe": "fp8", "finalize": True})
    assert isinstance(net[0], PackedConv2d) and isinstance(net[7], PackedLinear)
    sd = net.state_dict()
    assert sd["0.weight_packed"].dtype == torch.float8_e4m3fn and sd["0.weight_scale"].shape == (8,)
    assert "0.weight" not in sd
    with torch.no_grad():
        assert torch.equal(net(x), simulated)  # portable execute path == simulated numbers
    assert quant_info(model)["finalized"]


def test_finalize_in_one_call_int8_and_dequantize():
    net = _net().eval()
    x = _batches(1)[0]
    quantize_model(net, {"recipe": "int8", "calibrate": x, "finalize": True})
    assert net.state_dict()["3.weight_packed"].dtype == torch.int8
    w_q = fake_quant_int8_reference(net[3].unpacked_weight(torch.float32), net[3].weight_scale, axis=0)
    dequantize_model(net)
    assert type(net[3]) is nn.Conv2d and torch.equal(net[3].weight, w_q)
    assert net.quant is None


def test_dequantize_restores_original_parameters():
    net = _net().eval()
    x = _batches(1)[0]
    params = [id(p) for p in net.parameters()]
    with torch.no_grad():
        ref = net(x)
    quantize_model(net, {"recipe": "fp8", "calibrate": x})
    dequantize_model(net)
    assert [id(p) for p in net.parameters()] == params
    with torch.no_grad():
        assert torch.equal(net(x), ref)


def test_exclude_patterns():
    net = _net()
    state = quantize_model(net, {"recipe": "fp8", "exclude": ["0", "7"]})
    assert state.modules == ["3"] and state.excluded == ["0", "7"]
    assert type(net[0]) is nn.Conv2d and type(net[7]) is nn.Linear


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"recipe": "fp4"}, "unknown quantization recipe"),
        ({"recipie": "fp8"}, "Did you mean 'recipe'"),
        ({"batches": 0}, "positive int"),
        ({"calibrate": "images/"}, "iterable of batches"),
        ({"calibrate": [torch.zeros(3, 8, 8)]}, r"Tensor\[B, 3, H, W\]"),
        ({"calibrate": []}, "no batches"),
        ({"exclude": "*"}, "nothing to quantize"),
    ],
)
def test_bad_arguments(overrides, match):
    with pytest.raises(ConfigError, match=match):
        quantize_model(_net(), overrides)


def test_quantize_twice_is_an_error():
    model = Model(Tiny(size="n", nc=4))
    model.quantize(recipe="fp8")
    with pytest.raises(ConfigError, match="already quantized"):
        model.quantize(recipe="int8")


def test_fp8_weights_land_on_grid():
    net = _net()
    quantize_model(net, {"recipe": "fp8", "finalize": True})
    w = net[0].unpacked_weight(torch.float32)
    s = net[0].weight_scale
    assert torch.equal(fake_quant_fp8_reference(w, s, axis=0), w)


def _gemm_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(16, 32, 1), nn.SiLU(), nn.Conv2d(32, 16, 1), nn.Flatten(2),
                         nn.Linear(16, 32))


@pytest.fixture
def cpu_gemm():
    """A CPU stand-in for the ``fp8_gemm`` slot (the real one needs sm_89+), computing the same
    dequantized product in float32, so the packed layers' GEMM plumbing runs here."""
    from libreyolo.kernels import registry
    from libreyolo.quant import fake_quant_fp8_reference, unpack_weight_reference

    calls: list[tuple[int, ...]] = []

    def impl(x, w, xs, ws, bias=None):
        calls.append(tuple(x.shape))
        return F.linear(fake_quant_fp8_reference(x, xs), unpack_weight_reference(w, ws), bias)

    registry.register("fp8_gemm", impl, name="cpu_test_gemm")
    yield calls
    registry.unregister("fp8_gemm", "cpu_test_gemm")


def test_packed_layers_use_gemm_slot_when_it_resolves(cpu_gemm):
    net = _gemm_net().eval()
    x = torch.rand(2, 16, 4, 4, generator=torch.Generator().manual_seed(0))
    quantize_model(net, {"recipe": "fp8", "calibrate": x})
    with torch.no_grad():
        simulated = net(x)
    model = type("M", (), {})()
    model.net, model.quant = net, net.quant
    quantize_model(model, {"recipe": "fp8", "finalize": True})
    with torch.no_grad():
        out = net(x)
    assert cpu_gemm == [(32, 16), (32, 32), (32, 16)]  # two 1x1 convs (B*H*W rows), one linear
    torch.testing.assert_close(out, simulated, atol=1e-5, rtol=1e-5)


def test_failing_gemm_falls_back_with_one_warning():
    from libreyolo.kernels import registry

    def broken(*args):
        raise RuntimeError("cublasLt: not supported")

    registry.register("fp8_gemm", broken, name="broken_gemm")
    try:
        net = _gemm_net().eval()
        x = torch.rand(1, 16, 4, 4)
        quantize_model(net, {"recipe": "fp8", "calibrate": x})
        with torch.no_grad():
            simulated = net(x)
        model = type("M", (), {})()
        model.net, model.quant = net, net.quant
        quantize_model(model, {"recipe": "fp8", "finalize": True})
        with pytest.warns(RuntimeWarning, match="broken_gemm"), torch.no_grad():
            out = net(x)
        assert torch.equal(out, simulated)
        assert registry.resolve("fp8_gemm", torch.zeros(4, 16), torch.zeros(16, 16, dtype=torch.float8_e4m3fn)) is None
    finally:
        registry.unregister("fp8_gemm", "broken_gemm")


@pytest.mark.parametrize("finalize", [False, True])
def test_checkpoint_round_trip_through_quant_metadata(finalize):
    from libreyolo.kernels.quant.model import quant_metadata, restore_quant_structure

    net = _net().eval()
    x = _batches(1)[0]
    quantize_model(net, {"recipe": "fp8", "calibrate": x, "finalize": finalize, "exclude": ["7"]})
    with torch.no_grad():
        want = net(x)
    meta, sd = quant_metadata(net), net.state_dict()
    fresh = _net().eval()
    torch.manual_seed(5)
    for p in fresh.parameters():  # different float weights: everything must come from sd
        p.data.normal_()
    assert quant_metadata(fresh) is None
    restore_quant_structure(fresh, meta)
    fresh.load_state_dict(sd, strict=True)
    with torch.no_grad():
        assert torch.equal(fresh(x), want)
    assert quant_metadata(fresh) == meta


def test_yolo9_quantize_finalize_dequantize_smoke(monkeypatch):
    """A real detection family end to end: simulated PTQ, finalize, dequantize (reference
    kernels: the Triton interpreter would make 200+ layers slow; its parity is tested apart)."""
    from libreyolo.models.yolo9.family import YOLO9

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")

    model = Model(YOLO9(size="t", nc=3, imgsz=32))
    x = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    model.quantize(recipe="fp8", calibrate=x)
    simulated = model.eager_forward(x)
    model.quantize(recipe="fp8", finalize=True)
    finalized = model.eager_forward(x)
    info = model.quant_info()
    assert info["finalized"] and info["modules"] > 100
    flat = lambda out: torch.cat([t.flatten() for t in (out if isinstance(out, (list, tuple)) else [out])])  # noqa: E731
    assert torch.equal(flat(finalized), flat(simulated))
    model.dequantize()
    assert model.quant is None
    assert not any(isinstance(m, (QuantConv2d, PackedConv2d)) for m in model.net.modules())
