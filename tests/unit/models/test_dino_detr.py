"""DINO family: parameter count against the paper, the paper's structure (900 queries, mixed query
selection, look-forward-twice, contrastive denoising), forward contract, seam stages, the criterion,
and predict / train / val on the shapes demo data (CPU, tiny network of the same structure)."""

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
from libreyolo.models.dino_detr.family import DINODETR
from libreyolo.models.dino_detr.nn import (
    PAPER_PARAMS_M,
    VARIANTS,
    DINOConfig,
    DINONet,
    box_sine_embedding,
)
from libreyolo.registry import parse_weights_name

# same structure, narrow: ResNet-18, width 64, 2 + 2 layers, 12 queries, 20 denoising queries
TINY = DINOConfig(depth=18, hidden=64, num_heads=4, enc_layers=2, dec_layers=2, ffn=64, num_queries=12,
                  num_denoising=20)


@pytest.fixture(autouse=True)
def _setup(monkeypatch: pytest.MonkeyPatch):
    yield from portable_msda(monkeypatch)


def _tiny_model(nc: int = 3, cfg: DINOConfig = TINY) -> Model:
    model = Model(DINODETR(size="r50", nc=nc))
    model.family.net = DINONet(cfg=cfg, nc=nc)
    return model


_batch = detr_batch


def test_parameter_count_matches_paper() -> None:
    """DINO paper (Table 1): DINO-4scale with ResNet-50 has 47 M parameters (COCO, 91 class slots).
    Ours: 46,893,182, unfused (0.2 % below)."""
    net = DINODETR.build_net(size="r50", nc=91, task="detect")
    n = sum(p.numel() for p in net.parameters())
    assert abs(n / 1e6 - PAPER_PARAMS_M["r50"]) / PAPER_PARAMS_M["r50"] < 0.03, n
    assert n == 46_893_182
    assert DINODETR.SIZES == tuple(VARIANTS) == ("r50",)


def test_architecture_facts() -> None:
    net = DINODETR.build_net(size="r50", nc=91, task="detect")
    enc, dec = net.encoder, net.decoder
    assert len(enc.layers) == 6 and len(dec.layers) == 6 and len(enc.input_proj) == 4
    assert dec.num_queries == 900 and dec.tgt_embed.weight.shape == (900, 256)  # learned content queries
    for attn in (enc.layers[0].self_attn, dec.layers[0].cross_attn):
        assert (attn.num_heads, attn.num_levels, attn.num_points_list) == (8, 4, (4, 4, 4, 4))
    assert enc.layers[0].ffn.linear1.out_features == 2048 and dec.layers[0].ffn.linear1.out_features == 2048
    assert enc.POS_TEMPERATURE == 20.0 and enc.POS_OFFSET == 0.0
    assert dec.ref_point_head.layers[0].in_features == 512  # query position from the 4-d box's sine embedding
    assert dec.label_enc.weight.shape == (92, 256) and dec.label_enc.padding_idx == 91
    assert (dec.num_denoising, dec.label_noise, dec.box_noise) == (100, 0.5, 0.4)  # DINO_4scale.py
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())  # frozen BN only
    assert all(m.dropout.p == 0.0 for m in enc.layers)


def test_box_sine_embedding_layout() -> None:
    box = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    emb = box_sine_embedding(box, 8)
    assert emb.shape == (1, 32)
    # block order y, x, w, h; first channel of each block sin(2 pi c)
    first = emb.view(4, 8)[:, 0]
    assert torch.allclose(first, (torch.tensor([0.2, 0.1, 0.3, 0.4]) * 2 * torch.pi).sin())


def test_mixed_query_selection_keeps_learned_content_and_selects_boxes() -> None:
    """The reference boxes come from the top-k encoder proposals (they change with the input);
    the content queries are the learned ``tgt_embed`` (they do not)."""
    torch.manual_seed(0)
    net = DINONet(cfg=TINY, nc=3).eval()
    seen = []
    hook = net.decoder.layers[0].register_forward_pre_hook(lambda m, a: seen.append((a[0].clone(), a[2].clone())))
    with torch.no_grad():
        net(torch.rand(1, 3, 64, 64))
        net(torch.rand(1, 3, 64, 64) * 0.1)
    hook.remove()
    (t0, r0), (t1, r1) = seen
    assert torch.equal(t0, t1) and torch.equal(t0[0], net.decoder.tgt_embed.weight)
    assert not torch.equal(r0, r1) and r0.shape == (1, 12, 4, 4)


def test_look_forward_twice_gradient_reaches_previous_layer() -> None:
    """Layer 2's output box is refined from layer 1's *undetached* box: its loss has a gradient
    with respect to layer 1's refinement (the box head's second call), which plain iterative
    refinement (detached references) would not have."""
    torch.manual_seed(0)
    net = DINONet(cfg=TINY, nc=3).train()
    calls: list[torch.Tensor] = []
    hook = net.decoder.bbox_embed.register_forward_hook(lambda m, a, out: calls.append(out))
    out = net.decoder(list(net(torch.rand(1, 3, 64, 64))))
    hook.remove()
    assert out.logits.shape == (2, 1, 12, 3) and out.boxes.shape == (2, 1, 12, 4)
    assert len(calls) == 3  # layer 1: output head + refinement; layer 2: output head only
    refine = calls[1]
    (g,) = torch.autograd.grad(out.boxes[1].sum(), refine, retain_graph=True)
    assert g.abs().sum() > 0
    (g0,) = torch.autograd.grad(out.boxes[0].sum(), refine, allow_unused=True)
    assert g0 is None or not g0.any()  # layer 1's own output does not go through its refinement


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
    stages = model.train_stages()
    assert stages[0].capturable is True and stages[1].capturable is False
    assert sum(p.numel() for p in stages[0].fn.parameters()) < sum(p.numel() for p in net.parameters())


def test_contrastive_denoising_in_training() -> None:
    torch.manual_seed(0)
    model = _tiny_model()
    net = model.net.train()
    crit = model.build_criterion()
    batch = _batch()
    feats = list(net(batch["img"]))
    labels = [torch.tensor([0, 2]), torch.tensor([1])]
    boxes = [batch["bboxes"][:2], batch["bboxes"][2:]]
    out = crit.decoder_outputs(feats, labels, boxes)
    # 20 denoising queries / 2 boxes max -> 10 groups of (2 positives + 2 negatives)
    assert out.dn is not None and out.dn.groups == 10 and out.dn_logits.shape == (2, 2, 40, 3)
    assert out.logits.shape == (2, 2, 12, 3) and out.enc_logits.shape == (2, 12, 3)
    mask = out.dn.attn_mask
    assert mask.shape == (52, 52) and mask[40:, :40].all() and not mask[:4, :4].any() and mask[:4, 4:40].all()


def test_repeated_batch_training_reduces_loss() -> None:
    torch.manual_seed(0)
    check_repeated_batch_training(_tiny_model(), steps=25, lr=2e-3, n_items=3, trainable_only=True)


def test_batch_without_boxes_trains_and_eval_mode_is_refused() -> None:
    torch.manual_seed(0)
    model = _tiny_model()
    net, _, items, empty = empty_batch_loss(model)
    assert items[0] > 0 and items[1] == 0 and items[2] == 0
    check_criterion_needs_train_mode(model, net(empty["img"]))
    with pytest.raises(ConfigError):
        DINODETR.build_net(size="r101", nc=3, task="detect")


def test_no_denoising_config_still_trains() -> None:
    torch.manual_seed(0)
    model = _tiny_model(cfg=dataclasses.replace(TINY, num_denoising=0))
    assert model.net.decoder.label_enc is None
    loss, _ = model.build_criterion()(model.net.train()(_batch()["img"]), _batch())
    loss.backward()
    assert torch.isfinite(loss)


def test_weights_names_and_declarations() -> None:
    parsed = parse_weights_name("LibreDINODETRr50.pt")
    assert (parsed.family, parsed.size) == ("dino_detr", "r50")
    assert DINODETR.LOSS_NAMES == ("focal", "l1", "giou")
    # the graph flags follow the committed parity matrices: tests/unit/test_*parity_matrix_flags.py
    assert DINODETR.TRAIN_DEFAULTS["lr0"] == 1e-4 and DINODETR.TRAIN_DEFAULTS["optimizer"] == "AdamW"


def test_predict_train_val_on_shapes(tmp_path: Path) -> None:
    check_predict_train_val_on_shapes(lambda: _tiny_model(nc=6), tmp_path)  # 6 classes: no rebuild


def test_box_sine_embedding_orders_y_x_w_h_without_advanced_indexing() -> None:
    """The embedding of (cx, cy, w, h) puts the y block first, then x, w, h, and builds that order
    by slicing: an index tuple makes a host tensor that is copied to the device on every call,
    which a CUDA-graph capture refuses (the GPU run of 2026-12-03 failed DINO, LW-DETR and RF-DETR
    capture this way)."""
    import math

    from torch.utils._python_dispatch import TorchDispatchMode

    from libreyolo.models.dino_detr.nn import box_sine_embedding

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    boxes = torch.rand(2, 5, 4)
    with Ops() as ops:
        emb = box_sine_embedding(boxes, dim=8)
    assert not [n for n in ops.names if "index" in n or "lift_fresh" in n], ops.names
    dim_t = 10000.0 ** (2 * (torch.arange(8) // 2).float() / 8)
    for block, coord in enumerate((1, 0, 2, 3)):  # y, x, w, h
        p = boxes[..., coord, None] * (2 * math.pi) / dim_t
        want = torch.stack((p[..., 0::2].sin(), p[..., 1::2].cos()), dim=-1).flatten(-2)
        assert torch.allclose(emb[..., block * 8:(block + 1) * 8], want, atol=1e-6)
