"""The trainer hands training capture the family's capturable trunk, or the whole network."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import libreyolo.graphs.training as tg
from libreyolo.graphs.seam import Stage
from libreyolo.training import trainer as tr


@pytest.mark.parametrize("split", [True, False])
def test_capture_target(monkeypatch: pytest.MonkeyPatch, split: bool) -> None:
    seen: dict[str, object] = {}

    class RecordingGraphs:
        def __init__(self, target: nn.Module, **kwargs: object) -> None:
            seen["target"] = target
            self.enabled = True

    monkeypatch.setattr(tg, "TrainGraphs", RecordingGraphs)
    monkeypatch.setattr(tg, "unsupported_reason", lambda *a, **k: None)
    trunk, net = nn.Linear(2, 2), nn.Linear(2, 2)

    class Model:
        def train_stages(self) -> list[Stage] | None:
            if not split:
                return None
            return [Stage(name="trunk", fn=trunk, capturable=True),
                    Stage(name="decoder+criterion", fn=nn.Identity(), capturable=False)]

    t = tr.Trainer.__new__(tr.Trainer)
    t.model, t.net, t.cfg = Model(), net, SimpleNamespace(cuda_graph=True)
    t.device, t.dist, t.amp_dtype, t.graph_capture = torch.device("cuda", 0), None, None, None
    t._setup_graph_capture()
    assert seen["target"] is (trunk if split else net)
    assert isinstance(t.graph_capture, RecordingGraphs)
