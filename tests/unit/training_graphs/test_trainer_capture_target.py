"""The trainer hands training capture the family's capturable trunk, or the whole network."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import libreyolo.graphs.training as tg
from libreyolo.graphs.seam import Stage
from libreyolo.training.capture import StepCapture


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

    capture = StepCapture(eager=lambda imgs: imgs)  # the trainer's part that owns the capture policy
    capture.enable(Model(), net=net, device=torch.device("cuda", 0), amp_dtype=None, distributed=False)
    assert seen["target"] is (trunk if split else net)
    assert isinstance(capture.graphs, RecordingGraphs)
