"""DEIMv2 (atto, femto, pico, n) and RT-DETRv4 (s, m) families, and DEIM's SiLU decoder: parameter counts,
architecture facts, forward contract and seam, training steps, the user path (predict, train, val on
the shapes data) and fusion (CPU, tiny inputs)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.graphs.seam import run_eager
from libreyolo.kernels import registry as kernels
from libreyolo.models._detr.deimv2_net import Deimv2Detector, RMSNorm, SwiGLU
from libreyolo.models._detr.deimv2_variants import VARIANTS as V2
from libreyolo.models._detr.dfine_net import DFineDetector
from libreyolo.models._detr.dfine_variants import RTDETRV4_VARIANTS as V4
from libreyolo.models._detr.dfine_variants import VARIANTS as VDFINE
from libreyolo.models._detr.dfine_variants import deim_net
from libreyolo.models.deim.family import DEIM
from libreyolo.models.deimv2.family import DEIMv2
from libreyolo.models.dfine.family import DFINE
from libreyolo.models.rtdetrv4.family import RTDETRv4
from libreyolo.registry import parse_weights_name, register_family

FAMILIES = {"deimv2": DEIMv2, "rtdetrv4": RTDETRv4}
TINY = {"deimv2": dataclasses.replace(V2["atto"].net, num_queries=20, num_denoising=12),
        "rtdetrv4": dataclasses.replace(deim_net(VDFINE["n"].net), num_queries=20, num_denoising=12)}


@pytest.fixture(autouse=True)
def _setup(monkeypatch: pytest.MonkeyPatch):
    for fam in (*FAMILIES.values(), DEIM, DFINE):
        register_family(fam)
    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    kernels.clear_cache()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
    kernels.clear_cache()


def _tiny_model(family: str, nc: int = 3):
    fam = FAMILIES[family]
    model = fam(size=fam.SIZES[0], nc=nc)
    model.net = (Deimv2Detector if family == "deimv2" else DFineDetector)(cfg=TINY[family], nc=nc)
    return model


def _batch() -> dict[str, torch.Tensor]:
    return dict(img=torch.rand(2, 3, 64, 64), batch_idx=torch.tensor([0, 0, 1]), cls=torch.tensor([0, 2, 1]),
                bboxes=torch.tensor([[0.3, 0.3, 0.3, 0.4], [0.7, 0.6, 0.2, 0.3], [0.5, 0.5, 0.5, 0.5]]))


@pytest.mark.parametrize("family,size", [("deimv2", "atto"), ("deimv2", "femto"), ("deimv2", "pico"), ("deimv2", "n"),
                                         ("rtdetrv4", "s"),
                                         ("rtdetrv4", "m")])
def test_parameter_count_matches_published(family: str, size: str) -> None:
    v = (V2 if family == "deimv2" else V4)[size]
    n = sum(p.numel() for p in FAMILIES[family].build_net(size=size, nc=80, task="detect").parameters())
    if family == "deimv2":  # README 0.5 / 1.0 / 1.5 / 3.6 M: the deployed net (no denoising embedding) within 3 %
        net = FAMILIES[family].build_net(size=size, nc=80, task="detect")
        deploy = n - net.decoder.denoising_class_embed.weight.numel()
        assert abs(deploy / 1e6 - v.paper_params_m) <= 0.03 * v.paper_params_m, deploy
    else:  # whole millions (D-FINE / DEIM S 10 M, M 19 M): within that rounding plus 3 %
        assert abs(n / 1e6 - v.paper_params_m) <= 0.5 + 0.03 * v.paper_params_m, n
    if (family, size) == ("rtdetrv4", "s"):  # DEIM-D-FINE-S: the reference's 10,321,877 less two constants
        assert n == 10_321_875


def test_deimv2_architecture_facts() -> None:
    atto, femto = (DEIMv2.build_net(size=k, nc=80, task="detect") for k in ("atto", "femto"))
    assert atto.strides == (16, 32) and atto.backbone.out_channels == (256,) and femto.backbone.out_channels == (512,)
    assert len(atto.backbone.stages) == 3 and atto.decoder.num_queries == 100 and femto.decoder.num_queries == 150
    layer = atto.decoder.layers[0]
    assert isinstance(layer.norm1, RMSNorm) and isinstance(layer.norm2, RMSNorm) and layer.gateway is None
    assert isinstance(layer.mlp, SwiGLU) and layer.mlp.gate_proj.out_features == 80
    assert femto.decoder.layers[0].mlp.gate_proj.out_features == 128
    pico = DEIMv2.build_net(size="pico", nc=80, task="detect")
    assert len(pico.backbone.stages[2].blocks) == 2 and pico.decoder.num_queries == 200 and pico.decoder.hidden == 112
    n = DEIMv2.build_net(size="n", nc=80, task="detect")
    assert n.strides == (16, 32) and n.backbone.out_channels == (512, 1024) and n.decoder.num_queries == 300
    assert n.encoder.merge_levels(torch.ones(1), torch.ones(1)).item() == 2.0  # sum fusion, not concatenation
    assert isinstance(n.decoder.layers[0].gateway.norm, RMSNorm) and n.decoder.layers[0].norm2 is None
    assert n.decoder.dec_bbox_head[0] is not n.decoder.dec_bbox_head[1]
    assert n.encoder.fpn_blocks[0].conv2.conv.in_channels == 2 * 128 + 2 * 21
    assert layer.cross_attn.num_points_list == (4, 2) and len(atto.decoder.layers) == 3
    heads = atto.decoder.dec_bbox_head
    assert heads[0] is heads[1] is heads[2]
    assert len(atto.decoder.query_pos_head.layers) == 3 and atto.decoder.query_pos_head.layers[0].out_features == 64
    for mlp in (atto.decoder.query_pos_head, atto.decoder.pre_bbox_head, heads[0],
                atto.decoder.lqe_layers[0].reg_conf):
        assert mlp.act_name == "silu"  # reference activation / mlp_act


def test_rtdetrv4_architecture_facts() -> None:
    s, m = (RTDETRv4.build_net(size=k, nc=80, task="detect") for k in ("s", "m"))
    assert s.backbone.out_channels == (256, 512, 1024) and m.backbone.out_channels == (384, 768, 1536)
    assert len(s.decoder.layers) == 3 and len(m.decoder.layers) == 4 and m.strides == (8, 16, 32)
    assert m.encoder.fpn_blocks[0].cv2[0].bottlenecks.__len__() == 2  # round(3 * 0.67)
    for net in (s, m):
        assert net.decoder.layers[0]._act is F.silu and net.decoder.query_pos_head.act_name == "silu"


def test_deim_decoder_uses_silu_and_dfine_relu() -> None:
    """DEIM's deim.yml sets DFINETransformer activation / mlp_act to silu; D-FINE keeps relu."""
    deim, dfine = DEIM.build_net(size="n", nc=80, task="detect"), DFINE.build_net(size="n", nc=80, task="detect")
    d, f = deim.decoder, dfine.decoder
    assert d.layers[0]._act is F.silu and f.layers[0]._act is F.relu
    for name in ("query_pos_head", "enc_bbox_head", "pre_bbox_head"):
        assert getattr(d, name).act_name == "silu" and getattr(f, name).act_name == "relu"
    assert d.dec_bbox_head[0].act_name == "silu" and d.lqe_layers[0].reg_conf.act_name == "silu"
    assert f.lqe_layers[0].reg_conf.act_name == "relu"
    # same state dict layout: D-FINE files still load into DEIM
    assert list(deim.state_dict()) == list(dfine.state_dict())
    # and the activation is the one applied: the FFN of a layer with SiLU computes linear2(silu(linear1(x)))
    layer = d.layers[0]
    x = torch.randn(2, 5, 128)
    assert torch.allclose(layer.linear2(layer._act(layer.linear1(x))), layer.linear2(F.silu(layer.linear1(x))))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_forward_shapes_train_and_eval(family: str) -> None:
    torch.manual_seed(0)
    model = _tiny_model(family)
    net = model.net.eval()
    x = torch.rand(2, 3, 64, 96)
    with torch.no_grad():
        logits, boxes = net(x)
        staged = run_eager(model.forward_stages(), x)
    tokens = 4 * 6 + 2 * 3  # strides 16 and 32 for both tiny nets
    assert logits.shape == (2, min(20, tokens), 3) and boxes.shape == (2, min(20, tokens), 4)
    assert torch.equal(staged[0], logits) and torch.equal(staged[1], boxes)
    assert (boxes[..., 2] >= boxes[..., 0]).all() and (boxes[..., 3] >= boxes[..., 1]).all()
    net.train()
    hidden = TINY[family].hidden
    assert [tuple(m.shape) for m in net(x)] == [(2, hidden, 4, 6), (2, hidden, 2, 3)]
    trunk = model.train_stages()[0].fn
    assert sum(p.numel() for p in trunk.parameters()) < sum(p.numel() for p in net.parameters())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_repeated_batch_training_reduces_loss(family: str) -> None:
    torch.manual_seed(0)
    model = _tiny_model(family)
    net = model.net.train()
    crit = model.build_criterion()
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3)
    batch, losses = _batch(), []
    for _ in range(20):
        torch.manual_seed(100)
        loss, items = crit(net(batch["img"]), batch)
        assert items.shape == (len(model.LOSS_NAMES),)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.85 * sum(losses[:5]) / 5, losses


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_predict_train_val_on_shapes(family: str, tmp_path: Path) -> None:
    from libreyolo import SAMPLE_IMAGE
    from libreyolo.data.shapes import ensure_shapes_dataset
    from libreyolo.model import Model

    data = ensure_shapes_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=64)
    torch.manual_seed(0)
    model = Model(_tiny_model(family, nc=6))
    tiny = model.net
    res = model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=5)
    assert len(res) == 1 and res[0].boxes.xyxy.shape == (5, 4) and torch.isfinite(res[0].boxes.xyxy).all()
    assert res[0].plot().ndim == 3 and Path(res[0].save(tmp_path / "pred.jpg")).is_file()
    before = model.net.decoder.enc_score_head.weight.detach().clone()
    model.train(data=str(data), imgsz=64, epochs=1, batch=2, workers=0, device="cpu", nbs=2, warmup_epochs=0,
                verbose=False, tensorboard=False, plots=False, project=str(tmp_path / "runs"), seed=0, val=False)
    assert model.net is tiny and not torch.equal(before, model.net.decoder.enc_score_head.weight.detach())
    metrics = model.val(data=str(data), imgsz=64, batch=2, workers=0, device="cpu", verbose=False, plots=False)
    assert metrics["images"] == 2 and metrics["instances"] > 0 and 0.0 <= metrics["mAP50-95"] <= 1.0


def test_weights_names_flags_and_defaults() -> None:
    for name, fam, size in (("LibreDEIMv2atto.pt", "deimv2", "atto"), ("LibreDEIMv2femto.pt", "deimv2", "femto"),
                            ("LibreRTDETRv4s.pt", "rtdetrv4", "s"), ("LibreRTDETRv4m.pt", "rtdetrv4", "m"),
                            ("LibreDEIMs.pt", "deim", "s")):
        parsed = parse_weights_name(name)
        assert (parsed.family, parsed.size) == (fam, size)
    for fam in FAMILIES.values():
        # the graph flags follow the committed parity matrices: tests/unit/test_*parity_matrix_flags.py
        assert fam.TRAIN_DEFAULTS["amp"] is False and fam.LOSS_NAMES == DEIM.LOSS_NAMES


def test_deimv2_fuse_keeps_predictions() -> None:
    torch.manual_seed(0)
    model = _tiny_model("deimv2")
    randomise_norm_stats(model.net, seed=1)
    model.net.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        before = model.net(x)
        model.fuse()
        after = model.net(x)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.net.encoder.modules())
    assert torch.allclose(before[0], after[0], atol=1e-4) and torch.allclose(before[1], after[1], atol=1e-3)
