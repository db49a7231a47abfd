"""The windowed ViT's cached resampling matrices survive a predict followed by training.

:func:`~libreyolo.models._vit.windowed.antialias_matrix` keeps its matrices for the life of the
process. The first request may come from a ``predict`` (under ``torch.inference_mode``); the
cached matrix must still be usable in a later training step, whose backward saves it. An
inference tensor in the cache made the training step fail ("Inference tensors cannot be saved
for backward"), depending on which test ran first in a worker.
"""

from __future__ import annotations

import torch

from libreyolo.models._vit import windowed


def test_matrix_first_made_under_inference_mode_is_usable_for_backward(monkeypatch) -> None:
    monkeypatch.setattr(windowed, "_AA", {})  # a fresh cache: this test makes the first request
    with torch.inference_mode():
        first = windowed.antialias_matrix(7, 5, torch.device("cpu"))
    assert not first.is_inference()
    again = windowed.antialias_matrix(7, 5, torch.device("cpu"))
    assert again is first  # cached, not rebuilt
    x = torch.rand(3, 7, requires_grad=True)
    (x @ again.t()).square().sum().backward()  # saves the matrix for backward
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_windowed_vit_trains_after_an_inference_mode_forward(monkeypatch) -> None:
    monkeypatch.setattr(windowed, "_AA", {})
    torch.manual_seed(0)
    vit = windowed.WindowedViT(dim=32, depth=2, heads=2, patch=16, pos_grid=4, windows=1, window_blocks=(),
                               out_blocks=(1,), cls_token=True, layer_scale=1.0, out_norm=True, pos_antialias=True)
    with torch.inference_mode():
        vit.eval()(torch.rand(1, 3, 96, 64))  # a grid other than the trained 4x4: the matrices are made here
    vit.train()
    out = vit(torch.rand(1, 3, 96, 64))[0]
    out.mean().backward()
    assert vit.pos_embed.grad is not None and vit.pos_embed.grad.abs().sum() > 0


def test_msda_level_layout_first_made_under_inference_mode_is_not_an_inference_tensor(monkeypatch) -> None:
    """The same for the deformable-attention level layout (a provider saves its tensors for backward)."""
    from collections import OrderedDict

    from libreyolo.layers import msda

    monkeypatch.setattr(msda, "_cache", OrderedDict())
    with torch.inference_mode():
        layout = msda.level_layout([(5, 7), (3, 4)], device="cpu")
    assert not layout.spatial_shapes.is_inference() and not layout.level_start_index.is_inference()
    assert msda.level_layout([(5, 7), (3, 4)], device="cpu") is layout  # the cached one
