"""BiRefNet: published parameter counts (3 %), the structure against the reference's facts, the
seam (captured encoder + eager decoder equals all-eager), the converter's key mapping, and the
deformable layer's ONNX operator (opset 19, clear error below)."""

from __future__ import annotations

import io

import pytest
import torch

from libreyolo.errors import CheckpointError, ExportError
from libreyolo.graphs.seam import run_eager
from libreyolo.layers.deform_conv import DeformableConv2d
from libreyolo.models.birefnet.convert import convert_state_dict, rename_key, size_of
from libreyolo.models.birefnet.family import PARAMS_M, BiRefNet
from libreyolo.models.birefnet.nn import laplacian5, patches

# the reference's exact counts (its code built with these backbones, BatchNorm everywhere)
REFERENCE_EXACT = {"lite": 44_313_720, "l": 220_176_498}


@pytest.mark.parametrize("size", sorted(PARAMS_M))
def test_parameter_counts_match_the_published_models(size: str) -> None:
    with torch.device("meta"):
        net = BiRefNet.build_net(size=size, nc=1, task="matte")
    n = sum(p.numel() for p in net.parameters())
    assert abs(n / 1e6 - PARAMS_M[size]) / PARAMS_M[size] < 0.03
    assert n == REFERENCE_EXACT[size]


def test_structure_of_the_lite_decoder() -> None:
    with torch.device("meta"):
        net = BiRefNet.build_net(size="lite", nc=1, task="matte")
    sd = net.state_dict()
    # squeeze block: x4 (2 x 768) with the three context levels (2 x (96 + 192 + 384)) in front
    assert tuple(sd["squeeze_module.0.conv_in.weight"].shape) == (64, 2880, 3, 3)
    assert tuple(sd["decoder.ipt_blk5.conv1.weight"].shape) == (64, 3072, 3, 3)  # 32 x 32 patches x 3 channels
    assert tuple(sd["decoder.decoder_block4.conv_in.weight"].shape) == (64, 1728, 3, 3)
    assert tuple(sd["decoder.decoder_block4.dec_att.aspp_deforms.2.atrous_conv.offset_conv.weight"].shape) == \
        (98, 64, 7, 7)
    assert tuple(sd["decoder.conv_out1.0.weight"].shape) == (1, 120, 1, 1)
    assert tuple(sd["encoder.bb.layers.0.downsample.reduction.weight"].shape) == (192, 384)


def test_patches_and_laplacian() -> None:
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    p = patches(x, torch.zeros(1, 1, 2, 2))
    assert p.shape == (2, 48, 2, 2)
    assert torch.equal(p[1, 3 * 16 - 1], x[1, 2, 6:8, 6:8])  # last channel: the last colour's bottom-right patch
    flat = laplacian5(torch.full((1, 1, 6, 6), 0.7))
    assert float(flat.abs().max()) < 1e-6  # a constant image has no gradient


def test_seam_stages_equal_all_eager_and_train_outputs() -> None:
    torch.manual_seed(0)
    model = BiRefNet(size="tiny")
    stages = model.forward_stages()
    assert [(s.name, s.capturable) for s in stages] == [("encoder", True), ("decoder", False)]
    assert "deform_conv2d" in stages[1].reason
    for seed in (1, 2):  # two probe images
        x = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            assert torch.equal(run_eager(stages, x), model.net(x))
    net = model.net.train()
    maps, gdt_p, gdt_l = net(torch.rand(2, 3, 64, 64))
    assert [tuple(m.shape[2:]) for m in maps] == [(2, 2), (4, 4), (8, 8), (64, 64)] and len(gdt_p) == len(gdt_l) == 3
    loss, items = model.build_criterion()((maps, gdt_p, gdt_l), {"alpha": torch.rand(2, 64, 64).round()})
    loss.backward()
    assert items.shape == (3,) and torch.isfinite(loss)
    assert model.net.decoder.gdt_convs_pred_4[0].weight.grad is not None  # gradient supervision trains its branch


def test_converter_maps_reference_keys_and_names_misfits() -> None:
    assert rename_key("bb.layers.1.blocks.0.attn.relative_position_index") is None
    assert rename_key("_orig_mod.bb.norm3.weight") == "encoder.bb.norm3.weight"
    with pytest.raises(CheckpointError, match="cls_head"):
        rename_key("cls_head.0.weight")
    model = BiRefNet(size="tiny")
    own = model.net.state_dict()
    ref = {}
    for k, v in own.items():  # our state dict written in the reference's names
        k = k.replace("encoder.bb.", "bb.").replace("rel_pos_bias.table", "relative_position_bias_table")
        ref[k] = torch.randn_like(v) if v.is_floating_point() else v
    out = convert_state_dict(ref, own)
    assert set(out) == set(own) and torch.equal(out["encoder.bb.norm0.weight"], ref["bb.norm0.weight"])
    with pytest.raises(CheckpointError, match="width 8"):
        size_of(ref)


def test_deformable_layer_exports_deformconv_at_opset_19_and_refuses_below() -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    m = DeformableConv2d(4, 6, kernel_size=3, padding=1).eval()
    with torch.no_grad():
        m.offset_conv.weight.normal_(0, 0.5)
        m.modulator_conv.weight.normal_(0, 0.5)
    x = torch.rand(1, 4, 9, 11)
    f = io.BytesIO()
    torch.onnx.export(m, (x,), f, dynamo=False, opset_version=19, input_names=["x"], output_names=["y"])
    proto = onnx.load_from_string(f.getvalue())
    assert "DeformConv" in [n.op_type for n in proto.graph.node]
    y = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    with torch.no_grad():
        assert torch.allclose(torch.from_numpy(y), m(x), atol=1e-5)
    with pytest.raises(ExportError, match="opset >= 19"):
        torch.onnx.export(m, (x,), io.BytesIO(), dynamo=False, opset_version=17)
