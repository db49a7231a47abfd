"""Classification families: published parameter counts, forward contract, loss, a train step."""

from __future__ import annotations

import pytest
import torch

from libreyolo.model import Model
from libreyolo.models._base.classify import ClassificationLoss
from libreyolo.registry import families

# published parameter counts at 1000 classes (millions)
PUBLISHED = {("resnet", "18"): 11.7, ("resnet", "50"): 25.6, ("convnext", "atto"): 3.7,
             ("convnext", "tiny"): 28.6, ("mobilenetv4", "conv_small"): 3.8,
             ("efficientnetv2", "b0"): 7.1, ("efficientnetv2", "s"): 21.5,
             ("vit", "s16"): 22.1, ("vit", "b16"): 86.6, ("deit", "t"): 5.7, ("deit", "s"): 22.1,
             ("swin", "t"): 28.3, ("swin", "s"): 49.6}
CLS_FAMS = sorted({f for f, _ in PUBLISHED})


def test_every_size_is_listed_and_registered():
    fams = families()
    assert {(f, s) for f in CLS_FAMS for s in fams[f].SIZES} == set(PUBLISHED)
    for f in CLS_FAMS:
        cls = fams[f]
        assert cls.TASKS == ("classify",) and cls.OUTPUT_KIND == "probs" and cls.DEFAULT_IMGSZ == 224
        assert cls.LOSS_NAMES == ("cls",)


@pytest.mark.parametrize("fam,size", sorted(PUBLISHED))
def test_parameter_count_within_3_percent(fam: str, size: str):
    net = families()[fam].build_net(size=size, nc=1000, task="classify")
    n = sum(p.numel() for p in net.parameters()) / 1e6
    assert abs(n / PUBLISHED[(fam, size)] - 1) < 0.03, f"{fam}-{size}: {n:.3f} M"


@pytest.mark.parametrize("fam", CLS_FAMS)
def test_forward_shapes_train_and_eval(fam: str):
    cls = families()[fam]
    torch.manual_seed(0)
    model = Model(cls(size=cls.SIZES[0], nc=5))
    assert model.task == "classify"
    x = torch.rand(2, 3, 64, 64)
    model.net.train()
    assert model.net(x).shape == (2, 5)
    model.net.eval()
    logits = model.eager_forward(torch.rand(3, 3, 32, 32))
    assert logits.shape == (3, 5)
    probs = model.postprocess(logits, conf=0.25, iou=0.7, classes=None, max_det=1, agnostic=False)
    assert len(probs) == 3 and all(p.shape == (5,) for p in probs)
    assert torch.allclose(torch.stack(probs).sum(1), torch.ones(3), atol=1e-5)


def test_loss_is_label_smoothed_cross_entropy_times_batch():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 3.0]])
    target = torch.tensor([0, 2])
    loss, items = ClassificationLoss(label_smoothing=0.1)(logits, {"cls": target})
    ref = torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1)
    assert torch.allclose(loss, ref * 2) and items.shape == (1,) and torch.allclose(items[0], ref)
    hard, _ = ClassificationLoss(label_smoothing=0.0)(logits, {"cls": target})
    assert hard < loss  # smoothing penalises confident correct predictions


@pytest.mark.parametrize("fam", CLS_FAMS)
def test_tiny_train_steps_decrease_the_loss(fam: str):
    cls = families()[fam]
    torch.manual_seed(0)
    model = Model(cls(size=cls.SIZES[0], nc=3))
    net = model.net.train()
    crit = model.build_criterion()
    x = torch.rand(6, 3, 32, 32)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    losses = []
    for _ in range(6):
        loss, items = crit(net(x), {"cls": y})
        assert torch.isfinite(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(items[0]))
    assert losses[-1] < losses[0], losses
