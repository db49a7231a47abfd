"""Checks the DETR-lineage families' unit tests share (test_rtdetr.py, test_dfine_deim.py,
test_deformable_detr.py, test_dino_detr.py): the portable-kernel setup, a fixed three-box batch,
loss going down on a repeated batch, a batch without boxes, fusing, untrained prediction on
SAMPLE_IMAGE, and predict / train / val on the shapes demo data."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from libreyolo.errors import ConfigError
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.kernels import registry as kernels
from libreyolo.registry import register_family


def portable_msda(monkeypatch: pytest.MonkeyPatch, families: Iterable[Any] = ()) -> Iterator[None]:
    """The body of an autouse fixture (``yield from``): ``families`` registered, the portable MSDA
    (no Triton interpreter: slow), one thread; the kernel cache cleared before and after."""
    for fam in families:
        register_family(fam)  # idempotent for the same class
    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    kernels.clear_cache()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
    kernels.clear_cache()


def detr_batch(empty: bool = False) -> dict[str, torch.Tensor]:
    """Two 64 px images with three boxes (two in the first), or none."""
    if empty:
        return dict(img=torch.rand(2, 3, 64, 64), batch_idx=torch.zeros(0, dtype=torch.int64),
                    cls=torch.zeros(0, dtype=torch.int64), bboxes=torch.zeros(0, 4))
    return dict(img=torch.rand(2, 3, 64, 64), batch_idx=torch.tensor([0, 0, 1]), cls=torch.tensor([0, 2, 1]),
                bboxes=torch.tensor([[0.3, 0.3, 0.3, 0.4], [0.7, 0.6, 0.2, 0.3], [0.5, 0.5, 0.5, 0.5]]))


def check_repeated_batch_training(model: Any, *, steps: int, lr: float, n_items: int,
                                  trainable_only: bool = False) -> None:
    """AdamW on :func:`detr_batch` for ``steps`` steps (the same random noise each step): the
    loss is ``items.sum() * B`` and its mean over the last 5 steps is below 0.85 x the first 5."""
    net = model.net.train()
    crit = model.build_criterion()
    params = [p for p in net.parameters() if p.requires_grad] if trainable_only else net.parameters()
    opt = torch.optim.AdamW(params, lr=lr)
    batch, losses = detr_batch(), []
    for _ in range(steps):
        torch.manual_seed(100)  # same denoising noise / dropout every step
        loss, items = crit(net(batch["img"]), batch)
        assert items.shape == (n_items,) and not items.requires_grad
        assert loss.item() == pytest.approx(items.sum().item() * 2, rel=1e-5)  # loss = items.sum() * B
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.85 * first, losses


def empty_batch_loss(model: Any) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of :func:`detr_batch` without boxes, finite and backpropagated: (net, loss, terms, batch)."""
    net = model.net.train()
    empty = detr_batch(empty=True)
    loss, items = model.build_criterion()(net(empty["img"]), empty)
    assert torch.isfinite(loss)
    loss.backward()
    return net, loss, items, empty


def check_criterion_needs_train_mode(model: Any, feats: Any) -> None:
    """The criterion refuses outputs of a network in eval mode."""
    model.net.eval()
    with pytest.raises(ConfigError, match="train mode"):
        model.build_criterion()(feats, detr_batch())


def check_fuse_keeps_predictions(model: Any, fused_parts: Callable[[Any], Iterable[torch.nn.Module]]) -> None:
    """With random norm statistics, ``fuse()`` leaves no BatchNorm in ``fused_parts(net)`` and keeps
    the logits (1e-4) and boxes (1e-3)."""
    randomise_norm_stats(model.net, seed=1)
    model.net.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        before = model.net(x)
        model.fuse()
        after = model.net(x)
    for part in fused_parts(model.net):
        assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in part.modules())
    assert torch.allclose(before[0], after[0], atol=1e-4) and torch.allclose(before[1], after[1], atol=1e-3)


def check_predict_sample_image_untrained(model: Any) -> Any:
    """7 finite boxes on SAMPLE_IMAGE at 64 px, and ``classes=[7]`` keeps only class 7; the results."""
    from libreyolo import SAMPLE_IMAGE

    res = model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=7)
    assert len(res) == 1
    xyxy = res[0].boxes.xyxy
    assert xyxy.shape == (7, 4) and torch.isfinite(xyxy).all()
    filtered = model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=5, classes=[7])
    assert filtered[0].boxes.cls.tolist() == [7.0] * 5
    return res


def check_predict_train_val_on_shapes(make_model: Callable[[], Any], tmp_path: Path) -> None:
    """``make_model()`` (seed 0, the shapes set's 6 classes: no rebuild): predict, plot, save; one
    epoch trains the same network (its decoder's class head changes); val scores the 2 images."""
    from libreyolo import SAMPLE_IMAGE
    from libreyolo.data.shapes import ensure_shapes_dataset

    data = ensure_shapes_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=64)
    torch.manual_seed(0)
    model = make_model()
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
