"""RT-DETR / RT-DETRv2 families: parameter counts, forward contract, seam stages, training steps,
postprocessing and prediction on SAMPLE_IMAGE (CPU, tiny inputs)."""

from __future__ import annotations

import pytest
import torch
from _detr_checks import (
    check_criterion_needs_train_mode,
    check_fuse_keeps_predictions,
    check_predict_sample_image_untrained,
    check_repeated_batch_training,
    detr_batch,
    empty_batch_loss,
    portable_msda,
)

from libreyolo.errors import ConfigError
from libreyolo.graphs.seam import run_eager
from libreyolo.model import Model
from libreyolo.models._detr.net import DETRNetConfig, EncoderDecoderDetector
from libreyolo.models.rtdetr.family import RTDETR
from libreyolo.models.rtdetr.variants import VARIANTS as V1
from libreyolo.models.rtdetrv2.family import RTDETRv2
from libreyolo.models.rtdetrv2.nn import build_rtdetrv2
from libreyolo.models.rtdetrv2.variants import VARIANTS as V2
from libreyolo.registry import parse_weights_name

PUBLISHED_M = {("rtdetr", "r18"): 20.0, ("rtdetr", "r34"): 31.0, ("rtdetr", "r50"): 42.0,
               ("rtdetrv2", "r18"): 20.0, ("rtdetrv2", "r34"): 31.0}
FAMILIES = {"rtdetr": RTDETR, "rtdetrv2": RTDETRv2}
# a narrow network with the same structure, for fast training tests
TINY = DETRNetConfig(depth=18, expansion=0.5, dec_layers=2, hidden=32, enc_ffn=64, dec_ffn=64, num_heads=4,
                     num_queries=20, num_denoising=12, backbone_width=8)


@pytest.fixture(autouse=True)
def _setup(monkeypatch: pytest.MonkeyPatch):
    yield from portable_msda(monkeypatch, FAMILIES.values())


_batch = detr_batch


def _tiny_model(family: str, nc: int = 3):
    model = FAMILIES[family](size="r18", nc=nc)
    model.net = EncoderDecoderDetector(cfg=TINY, nc=nc)
    return model


@pytest.mark.parametrize(("family", "size"), sorted(PUBLISHED_M))
def test_parameter_count_matches_published(family: str, size: str) -> None:
    net = FAMILIES[family].build_net(size=size, nc=80, task="detect")
    n = sum(p.numel() for p in net.parameters()) / 1e6
    assert abs(n - PUBLISHED_M[(family, size)]) / PUBLISHED_M[(family, size)] < 0.03, n
    table = V1 if family == "rtdetr" else V2
    assert table[size].paper_params_m == PUBLISHED_M[(family, size)]


def test_architecture_facts() -> None:
    layers = {s: v.net.dec_layers for s, v in V1.items()}
    assert layers == {"r18": 3, "r34": 4, "r50": 6}
    assert {s: v.net.expansion for s, v in V1.items()} == {"r18": 0.5, "r34": 0.5, "r50": 1.0}
    net = RTDETR.build_net(size="r18", nc=80, task="detect")
    ca = net.decoder.layers[0].cross_attn
    assert (ca.num_heads, ca.num_levels, ca.num_points_list) == (8, 3, (4, 4, 4))
    assert net.decoder.num_queries == 300 and net.decoder.num_denoising == 100
    assert net.encoder.encoder[0][0].linear1.out_features == 1024


def test_eval_forward_shapes_and_stages() -> None:
    torch.manual_seed(0)
    model = Model(RTDETR(size="r18", nc=80))
    x = torch.rand(2, 3, 64, 96)
    with torch.no_grad():
        logits, boxes = model.net(x)
    tokens = 8 * 12 + 4 * 6 + 2 * 3  # fewer than 300: every token is a query
    assert logits.shape == (2, tokens, 80) and boxes.shape == (2, tokens, 4)
    assert torch.all(boxes[..., 2] >= boxes[..., 0]) and boxes.abs().max() < 200  # xyxy input pixels
    stages = model.forward_stages()
    assert [s.capturable for s in stages] == [True, True]
    with torch.no_grad():
        chained = run_eager(stages, x)
    assert torch.equal(chained[0], logits) and torch.equal(chained[1], boxes)
    train = model.train_stages()
    assert [s.capturable for s in train] == [True, False] and train[1].reason


def test_train_forward_returns_encoder_maps_and_trunk_stage_matches() -> None:
    model = _tiny_model("rtdetr")
    net = model.net.train()
    x = torch.rand(2, 3, 64, 64)
    feats = net(x)
    assert isinstance(feats, tuple) and [tuple(f.shape) for f in feats] == [(2, 32, 8, 8), (2, 32, 4, 4),
                                                                             (2, 32, 2, 2)]
    trunk = model.train_stages()[0].fn
    assert trunk.training
    want = {id(p) for p in net.backbone.parameters()} | {id(p) for p in net.encoder.parameters()}
    assert {id(p) for p in trunk.parameters()} == want  # no decoder parameter in the captured part
    assert all(torch.equal(a, b) for a, b in zip(trunk(x), feats, strict=True))
    assert not any(k.startswith("trunk") for k in net.state_dict())


def test_v2_sampling_options() -> None:
    base = build_rtdetrv2(size="r18", nc=80)
    mixed = build_rtdetrv2(size="r18", nc=80, num_points=(4, 4, 2))
    diff = sum(p.numel() for p in base.parameters()) - sum(p.numel() for p in mixed.parameters())
    assert diff == 3 * (8 * 2 * 2 + 8 * 2) * 257  # 3 layers x (offsets + weights) x (in 256 + bias)
    x = torch.rand(1, 3, 64, 64)
    for net in (mixed.eval(), build_rtdetrv2(size="r18", nc=80, method="discrete").eval()):
        with torch.no_grad():
            logits, boxes = net(x)
        assert logits.shape == (1, 84, 80) and torch.isfinite(boxes).all()
    disc = build_rtdetrv2(size="r18", nc=80, method="discrete")
    assert not disc.decoder.layers[0].cross_attn.sampling_offsets.weight.requires_grad


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_repeated_batch_training_reduces_loss(family: str) -> None:
    torch.manual_seed(0)
    model = _tiny_model(family)
    check_repeated_batch_training(model, steps=30, lr=3e-3, n_items=len(model.LOSS_NAMES))


def test_batch_without_boxes_trains() -> None:
    torch.manual_seed(0)
    net, _, items, _ = empty_batch_loss(_tiny_model("rtdetr"))
    assert items[0] > 0 and items[1] == 0 and items[2] == 0
    grad = net.backbone.stem[0].conv.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_mixed_batch_with_one_empty_image_and_many_boxes() -> None:
    torch.manual_seed(0)
    model = _tiny_model("rtdetrv2")
    net = model.net.train()
    n = 40  # more boxes than denoising queries (12): one group, capped
    batch = dict(img=torch.rand(2, 3, 64, 64), batch_idx=torch.ones(n, dtype=torch.long),
                 cls=torch.randint(0, 3, (n,)), bboxes=torch.rand(n, 4) * 0.4 + 0.2)
    crit = model.build_criterion()
    feats = net(batch["img"])
    labels, boxes = [torch.zeros(0, dtype=torch.long), batch["cls"]], [torch.zeros(0, 4), batch["bboxes"]]
    out = crit.decoder_outputs(feats, labels, boxes)
    assert out.dn is not None and out.dn.num_queries <= 2 * 12
    loss, _ = crit(feats, batch)
    loss.backward()
    assert torch.isfinite(loss)


def test_criterion_needs_train_mode() -> None:
    model = _tiny_model("rtdetr")
    check_criterion_needs_train_mode(model, model.net.train()(torch.rand(1, 3, 64, 64)))


def test_postprocess_topk_conf_classes_maxdet() -> None:
    model = _tiny_model("rtdetr", nc=4)
    logits = torch.full((1, 5, 4), -9.0)
    logits[0, 2, 1], logits[0, 4, 3], logits[0, 0, 3] = 3.0, 2.0, -1.5
    boxes = torch.arange(20, dtype=torch.float32).view(1, 5, 4)
    dets = model.postprocess((logits, boxes), conf=0.25, iou=0.7, classes=None, max_det=300, agnostic=False)[0]
    assert dets.shape == (2, 6) and dets[:, 5].tolist() == [1.0, 3.0]
    assert torch.equal(dets[0, :4], boxes[0, 2]) and dets[0, 4].item() == pytest.approx(torch.tensor(3.0).sigmoid().item())
    only3 = model.postprocess((logits, boxes), conf=0.25, iou=0.7, classes=[3], max_det=300, agnostic=False)[0]
    assert only3[:, 5].tolist() == [3.0]
    one = model.postprocess((logits, boxes), conf=0.0, iou=0.7, classes=None, max_det=1, agnostic=False)[0]
    assert one.shape == (1, 6) and one[0, 5] == 1.0
    with pytest.raises(ConfigError):
        model.postprocess((logits[..., :3], boxes), conf=0.25, iou=0.7, classes=None, max_det=300, agnostic=False)


def test_predict_sample_image_untrained() -> None:
    torch.manual_seed(0)
    res = check_predict_sample_image_untrained(Model(RTDETR(size="r18", nc=80)))
    xyxy = res[0].boxes.xyxy
    h, w = res[0].orig_shape
    assert xyxy[:, [0, 2]].min() >= -1 and xyxy[:, [0, 2]].max() <= w + 1


def test_weights_names_resolve_to_each_family() -> None:
    assert parse_weights_name("LibreRTDETRr50.pt").family == "rtdetr"
    p = parse_weights_name("LibreRTDETRv2r18.pt")
    assert (p.family, p.size) == ("rtdetrv2", "r18")


def test_fuse_keeps_predictions() -> None:
    torch.manual_seed(0)
    check_fuse_keeps_predictions(_tiny_model("rtdetr"), lambda net: [net.backbone])
