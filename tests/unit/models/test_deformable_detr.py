"""Deformable DETR family: parameter count against the paper, architecture facts, forward contract,
seam stages, the training criterion, and predict / train / val on the shapes demo data (CPU, tiny
network of the same structure)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from _detr_checks import (
    check_criterion_needs_train_mode,
    check_predict_train_val_on_shapes,
    check_repeated_batch_training,
    detr_batch,
    empty_batch_loss,
    portable_msda,
)

from libreyolo.errors import ConfigError
from libreyolo.graphs.seam import run_eager
from libreyolo.model import Model
from libreyolo.models.deformable_detr.family import DeformableDETR
from libreyolo.models.deformable_detr.nn import (
    PAPER_PARAMS_M,
    VARIANTS,
    DeformableDETRConfig,
    DeformableDETRNet,
    sine_embedding,
)
from libreyolo.registry import parse_weights_name

# same structure, narrow: ResNet-18, width 64 (2 channels per GroupNorm group, so a 1x1 map still trains), 2 + 2 layers
TINY = DeformableDETRConfig(depth=18, hidden=64, num_heads=4, enc_layers=2, dec_layers=2, ffn=64, num_queries=12)


@pytest.fixture(autouse=True)
def _setup(monkeypatch: pytest.MonkeyPatch):
    yield from portable_msda(monkeypatch)


def _tiny_model(nc: int = 3) -> Model:
    model = Model(DeformableDETR(size="r50", nc=nc))
    model.family.net = DeformableDETRNet(cfg=TINY, nc=nc)
    return model


_batch = detr_batch


@pytest.mark.parametrize("size", ["r50", "r50refine", "r50twostage"])
def test_parameter_count_matches_paper(size: str) -> None:
    """Paper Table 1: Deformable DETR (ResNet-50) has 40 M parameters, plain, with iterative box
    refinement and two-stage (COCO: 91 class slots). Exact counts: plain = transformers'
    40,069,665; refine = transformers' 40,732,725 (which ties its six class heads) + 5 untied
    class heads; two-stage = transformers' 41,181,529."""
    net = DeformableDETR.build_net(size=size, nc=91, task="detect")
    n = sum(p.numel() for p in net.parameters())
    assert abs(n / 1e6 - PAPER_PARAMS_M[size]) / PAPER_PARAMS_M[size] < 0.03, n
    assert n == {"r50": 40_069_665, "r50refine": 40_732_725 + 5 * (256 * 91 + 91), "r50twostage": 41_181_529}[size]
    assert DeformableDETR.SIZES == tuple(VARIANTS) == ("r50", "r50refine", "r50twostage")


def test_architecture_facts() -> None:
    net = DeformableDETR.build_net(size="r50", nc=91, task="detect")
    assert len(net.encoder.layers) == 6 and len(net.decoder.layers) == 6
    assert net.decoder.num_queries == 300 and net.decoder.query_embed.weight.shape == (300, 512)
    for attn in (net.encoder.layers[0].self_attn, net.decoder.layers[0].cross_attn):
        assert (attn.num_heads, attn.num_levels, attn.num_points_list) == (8, 4, (4, 4, 4, 4))
    assert net.backbone.out_channels == (512, 1024, 2048) and len(net.encoder.input_proj) == 4
    assert net.encoder.input_proj[3][0].stride == (2, 2)  # the fourth level: 3x3 stride 2 on C5
    frozen = {n.split(".")[0] for n, p in net.backbone.named_parameters() if not p.requires_grad}
    assert frozen == {"conv1", "layer1"}  # and every BatchNorm is frozen (buffers, not parameters)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    assert net.encoder.layers[0].ffn.linear1.out_features == 1024


def test_box_refinement_variant() -> None:
    """r50refine: one head pair per layer; every layer after the first samples around a 4-d box."""
    net = DeformableDETRNet(cfg=dataclasses.replace(TINY, box_refine=True), nc=3).eval()
    assert len(net.decoder.class_embed) == len(net.decoder.bbox_embed) == 2
    seen = []
    hook = net.decoder.layers[1].cross_attn.register_forward_pre_hook(lambda m, a: seen.append(a[1].shape[-1]))
    with torch.no_grad():
        logits, boxes = net(torch.rand(1, 3, 64, 64))
    hook.remove()
    assert seen == [4] and logits.shape == (1, 12, 3) and boxes.shape == (1, 12, 4)
    net.train()
    lg, bx = net.decoder(list(net(torch.rand(2, 3, 64, 64))))
    assert lg.shape == (2, 2, 12, 3) and bx.shape == (2, 2, 12, 4)


def test_two_stage_variant_selects_queries_and_trains_its_proposals() -> None:
    torch.manual_seed(0)
    model = _tiny_model()
    model.family.net = net = DeformableDETRNet(cfg=dataclasses.replace(TINY, two_stage=True), nc=3)
    assert len(net.decoder.class_embed) == 3 and not hasattr(net.decoder, "query_embed")
    net.eval()
    with torch.no_grad():
        logits, boxes = net(torch.rand(1, 3, 64, 64))
    assert logits.shape == (1, 12, 3) and torch.isfinite(boxes).all()  # the 12 best of 85 tokens
    net.train()
    out = net.decoder(list(net(torch.rand(2, 3, 64, 64))))
    assert [tuple(t.shape) for t in out] == [(2, 2, 12, 3), (2, 2, 12, 4), (2, 85, 3), (2, 85, 4)]
    loss, items = model.build_criterion()(net(_batch()["img"]), _batch())
    loss.backward()
    assert torch.isfinite(loss) and net.decoder.enc_output.weight.grad.abs().sum() > 0


def test_sine_embedding_layout() -> None:
    pos = sine_embedding(2, 3, 8)
    assert pos.shape == (1, 6, 8)
    # y channels first: the first 4 channels only depend on the row, the last 4 only on the column
    grid = pos.view(2, 3, 8)
    assert torch.equal(grid[:, 0, :4], grid[:, 2, :4]) and torch.equal(grid[0, :, 4:], grid[1, :, 4:])
    assert torch.allclose(grid[1, 0, 0], torch.tensor((1.5 / (2 + 1e-6)) * 2 * torch.pi).sin())
    with pytest.raises(ConfigError):
        sine_embedding(2, 2, 6)


def test_eval_forward_shapes_and_stages() -> None:
    torch.manual_seed(0)
    model = _tiny_model()
    net = model.net.eval()
    x = torch.rand(2, 3, 64, 96)
    with torch.no_grad():
        logits, boxes = net(x)
        staged = run_eager(model.forward_stages(), x)
    assert logits.shape == (2, 12, 3) and boxes.shape == (2, 12, 4)
    assert torch.equal(staged[0], logits) and torch.equal(staged[1], boxes)
    assert (boxes[..., 2] >= boxes[..., 0]).all() and (boxes[..., 3] >= boxes[..., 1]).all()
    net.train()
    maps = net(x)
    assert [tuple(m.shape) for m in maps] == [(2, 64, 8, 12), (2, 64, 4, 6), (2, 64, 2, 3), (2, 64, 1, 2)]
    net.eval()
    trunk = model.train_stages()[0].fn  # in the network's mode (eval: no dropout)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(trunk(x), net.encode(x), strict=True))
    assert sum(p.numel() for p in trunk.parameters()) < sum(p.numel() for p in net.parameters())
    assert model.train_stages()[1].capturable is False


def test_repeated_batch_training_reduces_loss() -> None:
    torch.manual_seed(0)
    check_repeated_batch_training(_tiny_model(), steps=25, lr=2e-3, n_items=3, trainable_only=True)


def test_batch_without_boxes_trains_and_eval_mode_is_refused() -> None:
    torch.manual_seed(0)
    model = _tiny_model()
    net, _, items, empty = empty_batch_loss(model)
    assert items[0] > 0 and items[1] == 0 and items[2] == 0
    check_criterion_needs_train_mode(model, net(empty["img"]))


def test_weights_names_and_declarations() -> None:
    parsed = parse_weights_name("LibreDeformableDETRr50.pt")
    assert (parsed.family, parsed.size) == ("deformable_detr", "r50")
    assert parse_weights_name("LibreDeformableDETRr50refine.pt").size == "r50refine"
    assert parse_weights_name("LibreDeformableDETRr50twostage.pt").size == "r50twostage"
    assert DeformableDETR.LOSS_NAMES == ("focal", "l1", "giou")
    # the graph flags follow the committed parity matrices: tests/unit/test_*parity_matrix_flags.py
    assert DeformableDETR.TRAIN_DEFAULTS["lr0"] == 2e-4 and DeformableDETR.TRAIN_DEFAULTS["optimizer"] == "AdamW"


def test_predict_train_val_on_shapes(tmp_path: Path) -> None:
    check_predict_train_val_on_shapes(lambda: _tiny_model(nc=6), tmp_path)  # 6 classes: no rebuild
