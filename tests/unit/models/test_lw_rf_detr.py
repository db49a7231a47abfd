"""LW-DETR and RF-DETR families: parameter counts against the published ones, the published
structure (window / global blocks, output blocks, queries, 13 query groups), forward contract,
seam stages, Group-DETR training (groups independent, folded into the criterion's batch), the
fused-attention flag, and predict / train / val on the shapes demo data (CPU, tiny networks of the
same structure; ``lw_detr:p3p5`` is the large / xlarge layout, a two-level P3 + P5 projector)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from libreyolo.errors import ConfigError
from libreyolo.graphs.seam import run_eager
from libreyolo.kernels import registry as kernels
from libreyolo.kernels.attention import set_fused_attention
from libreyolo.model import Model
from libreyolo.models._detr.lwdetr import LWDecoderConfig, refine_boxes
from libreyolo.models.lw_detr import nn as lw
from libreyolo.models.lw_detr.family import LWDETR
from libreyolo.models.rf_detr import nn as rf
from libreyolo.models.rf_detr.family import RFDETR
from libreyolo.registry import parse_weights_name

DEC = LWDecoderConfig(hidden=64, sa_heads=4, ca_heads=4, dec_layers=2, points=2, ffn=64, num_queries=8, groups=3)
DEC2 = dataclasses.replace(DEC, num_levels=2, scales=(2.0, 0.5))
TINY = {
    "lw_detr:p3p5": (LWDETR, lambda nc: lw.LWDETRNet(cfg=lw.LWDETRConfig(dim=32, depth=3, heads=2, pos_grid=4,
                                                                          windows=2, window_blocks=(0, 2),
                                                                          out_blocks=(0, 2), decoder=DEC2), nc=nc)),
    "lw_detr": (LWDETR, lambda nc: lw.LWDETRNet(cfg=lw.LWDETRConfig(dim=32, depth=3, heads=2, pos_grid=4, windows=2,
                                                                     window_blocks=(0, 2), out_blocks=(0, 2),
                                                                     decoder=DEC), nc=nc)),
    "rf_detr": (RFDETR, lambda nc: rf.RFDETRNet(cfg=rf.RFDETRConfig(dim=32, depth=3, heads=2, pos_grid=4, windows=2,
                                                                     out_stages=(2, 3), decoder=DEC), nc=nc)),
}
FAMS = sorted(TINY)


@pytest.fixture(autouse=True)
def _setup(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")  # portable MSDA
    kernels.clear_cache()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
    kernels.clear_cache()


def _tiny_model(family: str, nc: int = 3) -> Model:
    fam, build = TINY[family]
    model = Model(fam(size=fam.SIZES[0], nc=nc))
    model.family.net = build(nc)
    return model


def _batch() -> dict[str, torch.Tensor]:
    return dict(img=torch.rand(2, 3, 64, 64), batch_idx=torch.tensor([0, 0, 1]), cls=torch.tensor([0, 2, 1]),
                bboxes=torch.tensor([[0.3, 0.3, 0.3, 0.4], [0.7, 0.6, 0.2, 0.3], [0.5, 0.5, 0.5, 0.5]]))


# published (M) and ours (exact, unfused, COCO's 91 class slots as the reference checkpoints)
COUNTS = {("lw_detr", "tiny"): (12.1, 12_053_154), ("lw_detr", "small"): (14.6, 14_559_298),
          ("lw_detr", "medium"): (28.2, 28_241_218), ("lw_detr", "large"): (46.8, 46_827_490),
          ("lw_detr", "xlarge"): (118.0, 118_041_058),
          ("rf_detr", "nano"): (30.5, 30_466_914), ("rf_detr", "small"): (32.1, 32_110_786),
          ("rf_detr", "medium"): (33.7, 33_687_074), ("rf_detr", "large"): (33.9, 33_932_834)}


@pytest.mark.parametrize(("family", "size"), sorted(COUNTS))
def test_parameter_counts_match_the_published(family: str, size: str) -> None:
    """LW-DETR paper Table 2 (tiny 12.1, small 14.6, medium 28.2, large 46.8, xlarge 118.0 M);
    rfdetr README (nano 30.5, small 32.1, medium 33.7, large 33.9 M). All within 0.5 %. Built on
    the meta device (shapes only)."""
    fam = {"lw_detr": LWDETR, "rf_detr": RFDETR}[family]
    with torch.device("meta"):
        net = fam.build_net(size=size, nc=91, task="detect")
    published_table = lw.PAPER_PARAMS_M if family == "lw_detr" else rf.PUBLISHED_PARAMS_M
    assert published_table[size] == COUNTS[(family, size)][0]
    n = sum(p.numel() for p in net.parameters())
    published, ours = COUNTS[(family, size)]
    assert abs(n / 1e6 - published) / published < 0.03, n
    assert n == ours


def test_rf_detr_base_inference_parameters_match_the_first_release() -> None:
    """RF-DETR base (first release README): 29 M, the inference network (query group 0); with the
    12 training-only query groups (their proposal heads and learned queries) 32.17 M."""
    net = RFDETR.build_net(size="base", nc=91, task="detect")
    total = sum(p.numel() for p in net.parameters())
    d = net.decoder
    extra = sum(p.numel() for mods in (d.enc_output, d.enc_output_norm, d.enc_out_class_embed, d.enc_out_bbox_embed)
                for m in list(mods)[1:] for p in m.parameters())
    extra += (d.query_feat.weight.numel() + d.reference_point_embed.weight.numel()) * 12 // 13
    assert total == 32_174_146 and total - extra == 28_570_510
    assert abs((total - extra) / 1e6 - rf.PUBLISHED_PARAMS_M["base"]) / rf.PUBLISHED_PARAMS_M["base"] < 0.03
    assert [i for i, b in enumerate(net.backbone.blocks) if not b.window] == [2, 5, 8, 11]
    assert net.backbone.out_blocks == (1, 4, 7, 10) and net.backbone.patch == 14 and net.backbone.windows == 4
    model = Model(RFDETR(size="base", nc=3))
    assert model.stride == 56 and Model(RFDETR(size="nano", nc=3)).stride == 32
    with torch.no_grad():
        logits, boxes = model.net.eval()(torch.rand(1, 3, 112, 112))
    assert logits.shape == (1, 64, 3) and boxes.shape == (1, 64, 4)


def test_sizes_and_structure() -> None:
    assert LWDETR.SIZES == tuple(lw.VARIANTS) == ("tiny", "small", "medium", "large", "xlarge")
    assert RFDETR.SIZES == tuple(rf.VARIANTS) == ("nano", "small", "medium", "large", "base")
    net = LWDETR.build_net(size="small", nc=91, task="detect")
    vit = net.backbone
    assert [b.window for b in vit.blocks] == [i in (0, 1, 3, 6, 7, 9) for i in range(10)]
    assert vit.out_blocks == (2, 4, 5, 9) and vit.windows == 4 and vit.cls_token is None and vit.norm is None
    assert net.decoder.num_queries == 300 and net.decoder.groups == 13
    assert LWDETR.build_net(size="tiny", nc=91, task="detect").decoder.num_queries == 100
    attn = net.decoder.layers[0].cross_attn
    assert (attn.num_heads, attn.num_levels, attn.num_points_list) == (16, 1, (2,))
    assert net.decoder.layers[0].self_attn.num_heads == 8 and len(net.decoder.layers) == 3
    assert isinstance(net.encoder.conv1.norm, torch.nn.BatchNorm2d)
    r = RFDETR.build_net(size="medium", nc=91, task="detect")
    assert [i for i, b in enumerate(r.backbone.blocks) if not b.window] == [3, 6, 9]  # the reference's rule
    assert r.backbone.out_blocks == (2, 5, 8, 11) and r.backbone.cls_token is not None and r.backbone.norm is not None
    assert len(r.decoder.layers) == 4 and r.backbone.pos_grid == 36
    assert not isinstance(r.encoder.conv1.norm, torch.nn.BatchNorm2d)  # LayerNorm convolutions
    assert rf.window_blocks((2, 5, 8, 11)) == (0, 1, 3, 4, 6, 7, 9, 10)
    rl = RFDETR.build_net(size="large", nc=91, task="detect")
    assert rl.backbone.pos_grid == 44 and len(rl.decoder.layers) == 4 and rf.RESOLUTION["large"] == 44 * 16
    assert rl.backbone.out_blocks == (2, 5, 8, 11) and rl.backbone.patch == 16 and rl.backbone.windows == 2
    with pytest.raises(ConfigError):
        LWDETR.build_net(size="huge", nc=3, task="detect")
    with pytest.raises(ConfigError):  # xlarge / 2xlarge: Platform Model License weights, not offered
        RFDETR.build_net(size="xlarge", nc=3, task="detect")


def test_larger_lw_detr_sizes_follow_the_reference_scripts() -> None:
    """medium: the ViT at width 384, otherwise small's layout; large / xlarge (width 384 / 768): a
    P3 + P5 projector (stride 8 and 32), decoder width 384 with 12 / 24 heads and 4 points; xlarge's
    P3 resampling halves its 768 channels by a 1x1 conv before the transposed conv."""
    with torch.device("meta"):
        m, lg, xl = (LWDETR.build_net(size=s, nc=91, task="detect") for s in ("medium", "large", "xlarge"))
    assert m.backbone.patch_embed.proj.out_channels == 384 and m.strides == (16,) and m.decoder.hidden == 256
    assert [b.window for b in m.backbone.blocks] == [i in (0, 1, 3, 6, 7, 9) for i in range(10)]
    for net, width in ((lg, 384), (xl, 768)):
        assert net.backbone.patch_embed.proj.out_channels == width and net.strides == (8, 32)
        assert net.backbone.out_blocks == (2, 4, 5, 9) and len(net.decoder.layers) == 3
        attn = net.decoder.layers[0].cross_attn
        assert (attn.num_heads, attn.num_levels, attn.num_points_list) == (24, 2, (4, 4))
        assert net.decoder.layers[0].self_attn.num_heads == 12 and net.decoder.hidden == 384
        assert len(net.encoder.levels) == 2 and all(len(lvl.sampling) == 4 for lvl in net.encoder.levels)
        assert net.encoder.levels[1].sampling[0][0].conv.stride == (2, 2)
    up_lg, up_xl = lg.encoder.levels[0].sampling[0], xl.encoder.levels[0].sampling[0]
    assert [type(mod).__name__ for mod in up_lg] == ["ConvTranspose2d"] and up_lg[0].out_channels == 192
    assert [type(mod).__name__ for mod in up_xl] == ["ConvNorm", "ConvTranspose2d"] and up_xl[1].out_channels == 192
    with pytest.raises(ConfigError, match="scales"):
        lw.LWDETRNet(cfg=lw.LWDETRConfig(decoder=LWDecoderConfig(num_levels=2)), nc=3)


def test_refine_boxes_reparametrisation() -> None:
    ref = torch.tensor([[0.5, 0.5, 0.2, 0.4]])
    out = refine_boxes(ref, torch.tensor([[1.0, -0.5, 0.0, torch.log(torch.tensor(2.0))]]))
    assert torch.allclose(out, torch.tensor([[0.7, 0.3, 0.2, 0.8]]))


@pytest.mark.parametrize("family", FAMS)
def test_eval_forward_shapes_and_stages(family: str) -> None:
    torch.manual_seed(0)
    model = _tiny_model(family)
    net = model.net.eval()
    x = torch.rand(2, 3, 64, 128)
    with torch.no_grad():
        logits, boxes = net(x)
        staged = run_eager(model.forward_stages(), x)
    assert logits.shape == (2, 8, 3) and boxes.shape == (2, 8, 4)
    assert torch.equal(staged[0], logits) and torch.equal(staged[1], boxes)
    assert (boxes[..., 2] >= boxes[..., 0]).all() and (boxes[..., 3] >= boxes[..., 1]).all()
    net.train()
    assert [tuple(m.shape) for m in net(x)] == [(2, 64, 64 // s, 128 // s) for s in net.strides]
    assert net.strides == ((8, 32) if family == "lw_detr:p3p5" else (16,))
    stages = model.train_stages()
    assert stages[0].capturable is True and stages[1].capturable is False
    with pytest.raises(ConfigError, match="windows"):
        net.eval()(torch.rand(1, 3, 48, 48))


@pytest.mark.parametrize("family", FAMS)
def test_query_groups_are_independent_and_folded(family: str) -> None:
    """Training runs 3 groups of 8 queries; the criterion sees them as 3 x the batch. Changing group
    2's learned queries leaves groups 0 and 1 unchanged (self-attention stays within a group)."""
    torch.manual_seed(0)
    net = TINY[family][1](3).train()
    for m in net.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    feats = list(net(torch.rand(2, 3, 64, 64)))
    out = net.decoder(feats)
    assert out.logits.shape == (2, 6, 8, 3) and out.enc_logits.shape == (6, 8, 3) and out.dn is None
    with torch.no_grad():
        net.decoder.query_feat.weight[16:] += 1.0
    out2 = net.decoder(feats)
    assert torch.equal(out.logits[:, :4], out2.logits[:, :4]) and not torch.equal(out.logits[:, 4:], out2.logits[:, 4:])


@pytest.mark.parametrize("family", FAMS)
def test_repeated_batch_training_reduces_loss(family: str) -> None:
    torch.manual_seed(0)
    model = _tiny_model(family)
    net = model.net.train()
    crit = model.build_criterion()
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=2e-3)
    batch, losses = _batch(), []
    for _ in range(20):
        torch.manual_seed(100)
        loss, items = crit(net(batch["img"]), batch)
        assert items.shape == (3,) and not items.requires_grad
        assert loss.item() == pytest.approx(items.sum().item() * 2, rel=1e-5)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-4:]) / 4 < 0.85 * sum(losses[:4]) / 4, losses
    net.eval()
    with pytest.raises(ConfigError, match="train mode"):
        crit([torch.zeros(2, 64, 4, 4)], batch)


@pytest.mark.parametrize("family", FAMS)
def test_fused_attention_flag_flips_every_attention(family: str) -> None:
    """SPEC K-9: each ViT block's attention and each decoder self-attention carry ``fused_attn``
    (off by default); flipping it keeps the eval output (CPU SDPA agrees to float rounding)."""
    torch.manual_seed(0)
    net = TINY[family][1](3).eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        a = net(x)
    assert set_fused_attention(net, enabled=True) == 3 + 2
    with torch.no_grad():
        b = net(x)
    assert torch.allclose(a[0], b[0], atol=1e-4) and torch.allclose(a[1], b[1], atol=1e-3)
    assert set_fused_attention(net, enabled=False) == 5


def test_weights_names_and_declarations() -> None:
    assert (parse_weights_name("LibreLWDETRtiny.pt").family, parse_weights_name("LibreLWDETRtiny.pt").size) == (
        "lw_detr", "tiny")
    assert (parse_weights_name("LibreRFDETRnano.pt").family, parse_weights_name("LibreRFDETRnano.pt").size) == (
        "rf_detr", "nano")
    for fam in (LWDETR, RFDETR):
        # the graph flags follow the committed parity matrices: tests/unit/test_*parity_matrix_flags.py
        assert fam.LOSS_NAMES == ("focal", "l1", "giou") and fam.TRAIN_DEFAULTS["optimizer"] == "AdamW"
    assert LWDETR.STRIDE == 64 and RFDETR.STRIDE == 32
    assert dataclasses.replace(rf.VARIANTS["nano"]).pos_grid * 16 == rf.RESOLUTION["nano"]


@pytest.mark.parametrize("family", FAMS)
def test_predict_train_val_on_shapes(family: str, tmp_path: Path) -> None:
    from libreyolo import SAMPLE_IMAGE
    from libreyolo.data.shapes import ensure_shapes_dataset

    data = ensure_shapes_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=64)
    torch.manual_seed(0)
    model = _tiny_model(family, nc=6)
    tiny = model.net
    res = model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=5)
    assert len(res) == 1 and res[0].boxes.xyxy.shape == (5, 4) and torch.isfinite(res[0].boxes.xyxy).all()
    assert res[0].plot().ndim == 3
    assert Path(res[0].save(tmp_path / "pred.jpg")).is_file()
    before = model.net.decoder.class_embed.weight.detach().clone()
    model.train(data=str(data), imgsz=64, epochs=1, batch=2, workers=0, device="cpu", nbs=2, warmup_epochs=0,
                verbose=False, tensorboard=False, plots=False, project=str(tmp_path / "runs"), seed=0, val=False)
    assert model.net is tiny and not torch.equal(before, model.net.decoder.class_embed.weight.detach())
    metrics = model.val(data=str(data), imgsz=64, batch=2, workers=0, device="cpu", verbose=False, plots=False)
    assert metrics["images"] == 2 and metrics["instances"] > 0 and 0.0 <= metrics["mAP50-95"] <= 1.0
