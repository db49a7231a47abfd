"""Prediction graphs captured in chunks (``Family.GRAPH_CHUNKS``): where the cuts fall and the
hooks that place them, off the GPU (the capture itself: tests/gpu/test_graphs_predict.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libreyolo.errors import ConfigError
from libreyolo.graphs.parity import build_probe_model
from libreyolo.graphs.runner import PredictGraphs, _Chunker, chunk_cuts
from libreyolo.registry import families


def test_cuts_share_the_weight_and_never_leave_an_empty_last_graph():
    assert chunk_cuts([1] * 9, 3) == [3, 6]
    assert chunk_cuts([1, 1, 1, 1], 4) == [1, 2, 3]
    assert chunk_cuts([1, 1, 10], 3) == []  # the share is reached only inside the heavy last module: one graph
    assert chunk_cuts([4], 3) == [] and chunk_cuts([1, 2, 3], 1) == []
    for weights in ([3, 1, 4, 1, 5, 9, 2, 6], [1] * 30, [50, 1, 1, 1]):
        for n in (2, 3, 4):
            cuts = chunk_cuts(weights, n)
            assert cuts == sorted(set(cuts)) and len(cuts) <= n - 1
            assert all(1 <= c < len(weights) for c in cuts)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Sequential(nn.Conv2d(4, 4, 1), nn.ReLU(), nn.Conv2d(4, 4, 1))
        self.up = nn.Upsample(scale_factor=2.0)
        self.c = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.c(self.up(self.b(self.a(x))) + self.up(self.a(x)))


def test_recording_follows_the_order_modules_finish_and_close_removes_every_hook():
    net = _Net()
    ch = _Chunker(net, 3)
    ch.mode = "record"
    net(torch.zeros(1, 3, 4, 4))
    ch.mode = "off"
    # a, b (3 leaves), up, a, up, c: every call counts, a module called twice appears twice
    assert ch.order == [1, 3, 1, 1, 1, 1]
    ch.plan()
    assert ch.cuts == set(chunk_cuts(ch.order, 3)) == {2, 4}
    ch.close()
    assert not any(m._forward_hooks for m in net.modules())
    assert not _Chunker(net, 1).handles  # one graph: no hooks at all


def test_runner_takes_its_chunk_count_from_the_family_or_the_caller():
    fam = build_probe_model(families()["yolo9"], size="t", task="detect", device="cpu", seed=0)
    assert PredictGraphs(fam).chunks == type(fam).GRAPH_CHUNKS == 1
    runner = PredictGraphs(fam, chunks=3)
    assert runner.chunks == 3 and runner.info()["chunks"] == 3
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="positive int"):
            PredictGraphs(fam, chunks=bad)
