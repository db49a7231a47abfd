"""YOLO-NAS: parameter counts, structure (QARepVGG, stages, PAN neck, NDFL heads), fusing,
postprocess with 17 bins, the loss, the converter's key mapping and the user path on the
shapes data (CPU, tiny inputs)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from libreyolo.errors import CheckpointError, ConfigError
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.kernels.quant.model import quantize_model
from libreyolo.layers.conv import ConvBNAct
from libreyolo.model import Model
from libreyolo.models._yolonas.blocks import NASBottleneck, NASCSPLayer, QARepVGGBlock
from libreyolo.models._yolonas.net import NASTrunk
from libreyolo.models._yolonas.variants import VARIANTS, NASVariant
from libreyolo.models.yolonas import convert
from libreyolo.models.yolonas.family import YOLONAS
from libreyolo.models.yolonas.nn import REG_MAX, YOLONASNet, build_yolonas
from libreyolo.models.yolonas.postprocess import decode, postprocess
from libreyolo.registry import get_family, parse_weights_name

SIZES = ("s", "m", "l")


def _n(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


@pytest.fixture(scope="module")
def net_s() -> nn.Module:
    torch.manual_seed(0)
    return build_yolonas(size="s", nc=80).eval()


# --------------------------------------------------------------------------- sizes


@pytest.mark.parametrize("size", SIZES)
def test_param_count_matches_the_model_card(size: str) -> None:
    """Deci's card: S 12.18M, M 31.92M, L 44.53M (80 classes). S and M match the fused networks,
    L the unfused one (variants.py records which); both counts are pinned to what the
    architecture gives so that a structural change shows here."""
    torch.manual_seed(0)
    net = build_yolonas(size=size, nc=80)
    unfused = _n(net)
    net.fuse()
    fused = _n(net)
    v = VARIANTS[size]
    card = v.paper_params_m * 1e6
    counted = fused if v.paper_counts == "fused" else unfused
    assert abs(counted - card) / card < 0.03, (size, fused, unfused, card)
    assert fused < unfused
    # fusing removes per QARepVGG block: the 1x1 branch, the branch BatchNorm, the post-sum BatchNorm
    # affine terms and the 3x3 kernel stays; the removed share is ~5.5 % for every size
    assert 0.04 < 1 - fused / unfused < 0.07, (size, fused, unfused)


def test_every_size_builds_three_levels_of_17_bins() -> None:
    for size in SIZES:
        torch.manual_seed(0)
        net = build_yolonas(size=size, nc=3).eval()
        with torch.no_grad():
            out = net(torch.rand(1, 3, 64, 96))
        assert [o.shape for o in out] == [(1, 4 * 17 + 3, 64 // s, 96 // s) for s in (8, 16, 32)], size
        assert net.reg_max == REG_MAX == 17 and net.strides == (8, 16, 32)


# --------------------------------------------------------------------------- structure


def test_structure_of_size_s(net_s: nn.Module) -> None:
    bb = net_s.backbone
    assert isinstance(bb.stem.conv, QARepVGGBlock) and not bb.stem.conv.identity and bb.stem.conv.stride == 2
    for i, (out, n, hidden, concat) in enumerate(VARIANTS["s"].stages, 1):
        stage = getattr(bb, f"stage{i}")
        assert isinstance(stage.downsample, QARepVGGBlock) and stage.downsample.stride == 2
        assert not stage.downsample.identity and stage.downsample.c2 == out
        csp = stage.blocks
        assert isinstance(csp, NASCSPLayer) and len(csp.bottlenecks) == n and csp.concat_intermediates is concat
        for b in csp.bottlenecks:  # QARepVGG bottlenecks with identity branch and a learnable shortcut weight
            assert isinstance(b.cv1, QARepVGGBlock) and b.cv1.identity and b.cv1.c1 == hidden
            assert isinstance(b.alpha, nn.Parameter) and b.alpha.item() == 1.0
    assert [m.kernel_size for m in bb.context_module.m] == [5, 9, 13]
    neck = net_s.neck
    assert isinstance(neck.neck1.upsample, nn.ConvTranspose2d) and neck.neck1.upsample.stride == (2, 2)
    assert neck.out_channels == (96, 192, 384)
    for stage in (neck.neck3, neck.neck4):  # the down path's bottlenecks are plain 3x3 convs
        assert all(isinstance(b.cv1, ConvBNAct) and b.cv1.conv.kernel_size == (3, 3) for b in stage.blocks.bottlenecks)
    for i, width in enumerate((64, 128, 256), 1):  # 128, 256, 512 times the 0.5 width multiplier
        head = getattr(net_s.heads, f"head{i}")
        assert head.stem.conv.out_channels == width
        assert head.reg_pred.out_channels == 4 * 17 and head.cls_pred.out_channels == 80
        torch.testing.assert_close(head.cls_pred.bias, torch.full((80,), -math.log(99.0)))
    relus = [m for m in net_s.modules() if isinstance(m, (nn.ReLU, nn.SiLU))]
    assert relus and all(isinstance(m, nn.ReLU) for m in relus)
    bns = [m for m in net_s.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(m.eps == 1e-3 and m.momentum == 0.03 for m in bns)


def test_m_and_l_concatenate_the_bottleneck_intermediates() -> None:
    torch.manual_seed(0)
    net = build_yolonas(size="m", nc=80)
    stage3 = net.backbone.stage3.blocks
    assert stage3.concat_intermediates and stage3.conv3.conv.in_channels == 256 * (2 + 5)
    assert not net.backbone.stage4.blocks.concat_intermediates
    assert net.heads.head1.stem.conv.out_channels == 96  # 128 * 0.75


def test_trunk_stands_alone_for_other_heads() -> None:
    """Backbone + neck build without any head (a pose head can be attached to the same trunk)."""
    torch.manual_seed(0)
    trunk = NASTrunk(VARIANTS["s"]).eval()
    assert not any("head" in n for n, _ in trunk.named_modules())
    with torch.no_grad():
        feats = trunk(torch.rand(2, 3, 64, 64))
    assert [tuple(f.shape) for f in feats] == [(2, c, 64 // s, 64 // s)
                                               for c, s in zip(trunk.out_channels, trunk.strides, strict=True)]


def test_qarepvgg_forward_is_the_three_branch_sum() -> None:
    torch.manual_seed(0)
    m = QARepVGGBlock(8, 8, use_alpha=True)
    randomise_norm_stats(m, seed=1)
    with torch.no_grad():
        m.alpha.fill_(0.7)
    m.eval()
    x = torch.randn(2, 8, 10, 10)
    b3 = m.branch_3x3.bn(nn.functional.conv2d(x, m.branch_3x3.conv.weight, padding=1))
    b1 = nn.functional.conv2d(x, m.branch_1x1.weight, m.branch_1x1.bias)
    want = torch.relu(m.post_bn(b3 + 0.7 * b1 + x))
    torch.testing.assert_close(m(x), want)
    with pytest.raises(ValueError, match="identity"):
        QARepVGGBlock(8, 16)


@pytest.mark.parametrize("kw", [dict(c1=8, c2=8), dict(c1=8, c2=8, use_alpha=True), dict(c1=6, c2=10, s=2, identity=False)])
def test_qarepvgg_fuses_to_one_conv(kw: dict) -> None:
    torch.manual_seed(0)
    m = QARepVGGBlock(**kw)
    randomise_norm_stats(m, seed=2)
    if m.alpha is not None:
        with torch.no_grad():
            m.alpha.fill_(1.3)
    m.eval()
    x = torch.randn(2, kw["c1"], 12, 12)
    with torch.no_grad():
        ref = m(x)
        m.fuse()
        got = m(x)
    assert isinstance(m.conv, nn.Conv2d) and m.conv.kernel_size == (3, 3) and m.conv.bias is not None
    assert m.branch_3x3 is None and m.branch_1x1 is None and m.post_bn is None
    assert sorted(type(c).__name__ for c in m.children()) == ["Conv2d", "ReLU"]
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_fused_network_equals_unfused_in_eval() -> None:
    torch.manual_seed(1)
    net = build_yolonas(size="s", nc=5)
    randomise_norm_stats(net, seed=0)
    with torch.no_grad():
        for b in net.modules():
            if isinstance(b, NASBottleneck) and b.alpha is not None:
                b.alpha.fill_(0.8)
    net.eval()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        ref = [o.clone() for o in net(x)]
        assert net.fuse() is net
        got = net(x)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    blocks = [m for m in net.modules() if isinstance(m, QARepVGGBlock)]
    assert len(blocks) == 1 + 4 + 2 * (2 + 3 + 5 + 2) + 2 * 2 * 2  # stem, downsamples, backbone + up-path bottlenecks
    assert all(b.conv is not None and b.branch_3x3 is None for b in blocks)
    for r, g in zip(ref, got, strict=True):
        assert (r - g).abs().max().item() <= 1e-4 * max(1.0, r.abs().max().item())


def test_train_backward_reaches_every_parameter() -> None:
    torch.manual_seed(2)
    net = build_yolonas(size="s", nc=2).train()
    out = net(torch.rand(2, 3, 64, 64))
    sum(o.square().mean() for o in out).backward()
    assert [n for n, p in net.named_parameters() if p.grad is None] == []


def test_bad_size_and_nc() -> None:
    with pytest.raises(ConfigError, match="no size"):
        build_yolonas(size="x", nc=80)
    with pytest.raises(ConfigError, match="nc"):
        build_yolonas(size="s", nc=0)


# --------------------------------------------------------------------------- postprocess


class _Meta(nn.Module):
    def __init__(self, nc: int) -> None:
        super().__init__()
        self.nc, self.reg_max, self.strides = nc, REG_MAX, (8, 16, 32)


def test_postprocess_decodes_17_bins_around_the_cell_centre() -> None:
    nc, r = 2, REG_MAX
    raw = [torch.zeros(1, 4 * r + nc, 64 // s, 64 // s) for s in (8, 16, 32)]
    for t in raw:
        t[:, 4 * r:] = -20.0
    # level 1 (stride 16), cell (row 1, col 2): sides l, t, r, b = 16, 1, 3, 0 bins (16 is the last bin)
    for side, d in enumerate((16, 1, 3, 0)):
        raw[1][0, side * r + d, 1, 2] = 50.0
    raw[1][0, 4 * r + 1, 1, 2] = 3.0
    (dets,) = postprocess(raw, net=_Meta(nc), conf=0.5, iou=0.7, classes=None, max_det=10, agnostic=False)
    cx, cy = (2 + 0.5) * 16, (1 + 0.5) * 16
    want = torch.tensor([[cx - 16 * 16, cy - 1 * 16, cx + 3 * 16, cy + 0 * 16, 1 / (1 + math.exp(-3.0)), 1.0]])
    torch.testing.assert_close(dets, want, rtol=1e-4, atol=1e-3)
    cand = decode(raw, net=_Meta(nc), k=5)
    assert cand.shape == (1, 5, 6)
    torch.testing.assert_close(cand[0, 0], want[0], rtol=1e-4, atol=1e-3)
    with pytest.raises(ConfigError, match="YOLO-NAS output level 0"):
        postprocess([raw[0][:, :-1], *raw[1:]], net=_Meta(nc), conf=0.5, iou=0.7, classes=None, max_det=10,
                    agnostic=False)


# --------------------------------------------------------------------------- loss


def _batch() -> dict:
    g = torch.Generator().manual_seed(0)
    return {"img": torch.rand(2, 3, 64, 64, generator=g),
            "batch_idx": torch.tensor([0, 0, 1]), "cls": torch.tensor([0, 1, 1]),
            "bboxes": torch.tensor([[0.3, 0.3, 0.3, 0.4], [0.7, 0.6, 0.25, 0.3], [0.5, 0.5, 0.5, 0.5]])}


def test_loss_steps_decrease_it() -> None:
    torch.manual_seed(3)
    model = YOLONAS(size="s", nc=2)
    net, crit, batch = model.net.train(), model.build_criterion(), _batch()
    assert crit.reg_max == 17
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    hist = []
    for _ in range(8):
        loss, items = crit(net(batch["img"]), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert torch.isfinite(loss) and items.shape == (3,)
        hist.append(loss.item())
    assert sum(hist[-2:]) < 0.8 * sum(hist[:2]), hist


# --------------------------------------------------------------------------- registry / convert


def test_registry_names() -> None:
    assert get_family("yolonas") is YOLONAS
    assert parse_weights_name("LibreYOLONASm.pt").family == "yolonas"
    assert parse_weights_name("LibreYOLONASs.pt").size == "s"


def _reference_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict under the reference's names (the inverse of convert.rename_key), with the
    reference's unused merged-kernel convs added."""
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        k2 = k.replace("context_module.conv1.", "context_module.cv1.").replace("context_module.conv2.",
                                                                               "context_module.cv2.")
        if k2.startswith("heads."):
            for part in ("stem.", "cls_convs.0.", "reg_convs.0."):
                for leaf in ("conv.", "bn."):
                    k2 = k2.replace(f".{part}{leaf}", f".{part}seq.{leaf}")
        out["module." + k2] = v
        if k.endswith("branch_3x3.conv.weight"):
            p = k[: -len("branch_3x3.conv.weight")]
            out[f"module.{p}rbr_reparam.weight"] = torch.zeros_like(v)
            out[f"module.{p}rbr_reparam.bias"] = torch.zeros(v.shape[0])
    return out


def test_convert_maps_a_reference_layout_state_dict() -> None:
    torch.manual_seed(4)
    src_net = build_yolonas(size="m", nc=7)
    randomise_norm_stats(src_net, seed=3)
    ref = _reference_names(src_net.state_dict())
    assert "module.heads.head1.stem.seq.conv.weight" in ref and "module.backbone.context_module.cv1.conv.weight" in ref

    class FW:
        state_dict = ref

    assert convert.match(FW()) == ("m", 7)
    dst = build_yolonas(size="m", nc=7)
    dst.load_state_dict(convert.convert_state_dict(ref, dst.state_dict()))
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(src_net.eval()(x), dst.eval()(x), strict=True):
            assert torch.equal(a, b)
    broken = {k: v for k, v in ref.items() if "neck.neck2.blocks.conv3" not in k}
    with pytest.raises(CheckpointError, match="neck.neck2.blocks.conv3"):
        convert.convert_state_dict(broken, dst.state_dict())


def test_super_gradients_checkpoint_file_loads(tmp_path) -> None:  # noqa: ANN001 - pytest fixture
    from libreyolo.convert import detect_format, load_foreign

    torch.manual_seed(5)
    src = build_yolonas(size="s", nc=4)
    path = tmp_path / "ckpt_best.pth"
    torch.save({"net": _reference_names(src.state_dict()), "epoch": 3}, path)
    assert detect_format(path) == "super_gradients"
    fam = load_foreign(path)
    assert isinstance(fam, YOLONAS) and (fam.size, fam.nc) == ("s", 4)
    for k, v in src.state_dict().items():
        assert torch.equal(fam.net.state_dict()[k], v), k


# --------------------------------------------------------------------------- user path


def test_predict_fuses_and_train_val_on_shapes(tmp_path) -> None:  # noqa: ANN001 - pytest fixture
    from libreyolo import SAMPLE_IMAGE, LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset

    torch.manual_seed(0)
    model = LibreYOLO("LibreYOLONASs.pt", pretrained=False, nc=3)
    assert isinstance(model.family, YOLONAS) and model.nc == 3
    (res,) = model.predict(SAMPLE_IMAGE, conf=0.0, max_det=5, imgsz=64, device="cpu")
    assert len(res.boxes) == 5 and set(torch.as_tensor(res.boxes.cls).tolist()) <= {0.0, 1.0, 2.0}
    res.save(str(tmp_path / "pred.jpg"))
    assert (tmp_path / "pred.jpg").stat().st_size > 0
    twin = model.prepared().family.net  # what predict ran: every QARepVGG block merged
    blocks = [m for m in twin.modules() if isinstance(m, QARepVGGBlock)]
    assert blocks and all(b.conv is not None for b in blocks)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in twin.modules())
    assert any(b.conv is None for b in model.net.modules() if isinstance(b, QARepVGGBlock))  # trainable copy kept

    data = ensure_shapes_dataset(tmp_path / "shapes", n_train=4, n_val=2, imgsz=64)
    model = Model(YOLONAS(size="s", nc=80))  # the dataset has 6 classes: the head is rebuilt
    result = model.train(data=str(data), imgsz=64, batch=2, workers=0, device="cpu", nbs=2, mosaic=0.0,
                         close_mosaic=0, warmup_epochs=0, optimizer="AdamW", lr0=0.001, verbose=False,
                         tensorboard=False, project=str(tmp_path / "runs"), seed=0, epochs=1)
    assert 0.0 <= result["mAP50-95"] <= result["mAP50"] <= 1.0
    metrics = model.val(data=str(data), imgsz=64, batch=2, device="cpu", workers=0, verbose=False)
    assert 0.0 <= metrics["mAP50-95"] <= metrics["mAP50"] <= 1.0
    loaded = LibreYOLO(result["best"])
    assert isinstance(loaded.family, YOLONAS) and loaded.nc == 6 and loaded.size == "s"
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(model.net.eval()(x), loaded.net.eval()(x), strict=True):
            assert torch.equal(a, b)


TINY = NASVariant(size="s", stem=8, stages=((16, 1, 8, False), (16, 2, 8, True), (32, 1, 8, False), (32, 1, 16, False)),
                  spp=32, up=((16, 1, 8), (16, 1, 8)), down=((16, 1, 8), (32, 1, 8)), head_inter=(16, 16, 16),
                  head_width_mult=1.0, paper_params_m=0.0, paper_counts="fused")


def test_quantize_int8_and_fp8_stay_close() -> None:
    """The QARepVGG point: a fused (merged-kernel) YOLO-NAS keeps its raw head outputs close to
    float under W8A8 and FP8 simulated quantization (a tiny network of the real structure)."""
    g = torch.Generator().manual_seed(7)
    calib = [torch.rand(2, 3, 64, 64, generator=g) for _ in range(2)]
    x = torch.rand(1, 3, 64, 64, generator=g)
    for recipe in ("int8", "fp8"):
        torch.manual_seed(6)
        net = YOLONASNet(TINY, nc=3)
        randomise_norm_stats(net, seed=4)
        net.eval().fuse()
        n_convs = sum(isinstance(m, nn.Conv2d) for m in net.modules())
        with torch.no_grad():
            ref = torch.cat([o.flatten(1) for o in net(x)], 1)
        state = quantize_model(net, {"recipe": recipe, "calibrate": calib})
        assert state.recipe == recipe and len(state.modules) == n_convs > 50 and state.calibration_batches == 2
        assert not any(type(m) is nn.Conv2d for m in net.modules())
        with torch.no_grad():
            got = torch.cat([o.flatten(1) for o in net(x)], 1)
        rel = ((got - ref).norm() / ref.norm()).item()
        assert 0 < rel < 0.02, (recipe, rel)


def test_parity_probe_model_depends_on_its_input() -> None:
    """The parity harness's probe model (calibrated BatchNorm statistics) must give clearly
    different outputs for its two probes, else a replay that forgot to copy its input would pass."""
    from libreyolo.graphs.parity import build_probe_model

    fam = build_probe_model(YOLONAS, size="s", task="detect", device="cpu", seed=0, imgsz=128)
    assert fam.fused
    a = torch.rand(1, 3, 128, 128, generator=torch.Generator().manual_seed(0))
    b = torch.linspace(0, 1, 3 * 128 * 128).view(1, 3, 128, 128)
    with torch.no_grad():
        oa, ob = fam.net(a), fam.net(b)
    assert max((x - y).abs().max().item() for x, y in zip(oa, ob, strict=True)) > 0.5
    assert all(o.abs().max().item() < 1e3 for o in oa)  # far from fp16 overflow
