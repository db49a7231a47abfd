"""From-scratch runs repeat: ``LibreYOLO(..., pretrained=False)`` draws its initial weights from a
fixed seed without consuming the caller's random stream, so two seeded trainings from it end with
the same weights (before, the network was initialised from whatever the global RNG held, which
``train(seed=...)`` could not reach because it seeds after the network exists)."""

from __future__ import annotations

import torch

from libreyolo import LibreYOLO
from libreyolo.training.distributed import state_digest


def test_untrained_builds_are_identical_and_leave_the_global_stream_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=3)
    assert torch.equal(torch.rand(3), expected)  # the build drew nothing from the caller's stream
    torch.manual_seed(7)
    b = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=3)
    assert state_digest(a.net.state_dict()) == state_digest(b.net.state_dict())


def test_two_seeded_trainings_from_scratch_end_equal(tiny_shapes, tmp_path):
    digests = []
    for run in ("a", "b"):
        torch.rand(5)  # a different global stream before each build must not matter
        m = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=6)
        m.train(data=str(tiny_shapes), imgsz=64, batch=4, workers=0, device="cpu", nbs=4, mosaic=0.0,
                close_mosaic=0, warmup_epochs=0, epochs=1, seed=0, val=False, plots=False, verbose=False,
                tensorboard=False, project=str(tmp_path / run))
        digests.append(state_digest(m.net.state_dict()))
    assert digests[0] == digests[1]
