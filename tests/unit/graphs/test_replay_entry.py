"""The replay of one graph entry off the GPU, with a stand-in for the CUDA graph: the short path of
a one-stage entry (no tree walks, no per-leaf checks) copies in, replays and copies out exactly as
the general path of a chain does (the captured replays themselves: tests/gpu/test_graphs_predict.py)."""

from __future__ import annotations

import pytest
import torch

from libreyolo.errors import GraphCaptureError
from libreyolo.graphs.runner import CapturedStage, GraphEntry, GraphKey, _replay_entry
from libreyolo.graphs.seam import Stage, flatten


class _FakeGraph:
    """Replays 'out = 2 * in + 1' on the static buffers, as a captured graph would."""

    def __init__(self, static_in: torch.Tensor, static_out: dict[str, torch.Tensor]) -> None:
        self.static_in, self.static_out, self.replays = static_in, static_out, 0

    def replay(self) -> None:
        self.replays += 1
        self.static_out["y"].copy_(2 * self.static_in + 1)
        self.static_out["n"].copy_(self.static_in.sum())


def _stage(shape: tuple[int, ...]) -> tuple[CapturedStage, _FakeGraph]:
    static_in = torch.zeros(shape)
    static_out = {"y": torch.zeros(shape), "n": torch.zeros(())}
    g = _FakeGraph(static_in, static_out)
    return CapturedStage(name="net", graph=g, in_spec=flatten(static_in)[1], static_in=[static_in],
                         static_out=static_out, capture_ms=0.0), g


def _entry(steps: list) -> GraphEntry:
    x = torch.zeros(1, 3, 4, 4)
    return GraphEntry(key=GraphKey.of(x, None), steps=steps, warmup_ms=0.0, capture_ms=0.0)


def test_a_one_stage_entry_takes_the_short_path_and_returns_copies():
    stage, g = _stage((1, 3, 4, 4))
    entry = _entry([stage])
    assert entry.plain() and entry.plain()[0] is stage.static_in[0]
    x = torch.arange(48, dtype=torch.float32).reshape(1, 3, 4, 4)
    out = _replay_entry(entry, x, None)
    assert g.replays == 1 and torch.equal(stage.static_in[0], x)
    assert torch.equal(out["y"], 2 * x + 1) and out["n"].item() == x.sum().item()
    assert out["y"].data_ptr() != stage.static_out["y"].data_ptr()  # the caller's, not graph memory
    second = _replay_entry(entry, x + 1, None)
    assert torch.equal(out["y"], 2 * x + 1) and torch.equal(second["y"], 2 * x + 3)  # not overwritten


def test_a_chain_with_an_eager_stage_keeps_the_checked_path():
    stage, g = _stage((1, 3, 4, 4))
    entry = _entry([Stage(name="pre", fn=lambda t: t * 1, capturable=False), stage])
    assert entry.plain() is False
    x = torch.ones(1, 3, 4, 4)
    assert torch.equal(_replay_entry(entry, x, None)["y"], 2 * x + 1) and g.replays == 1
    with pytest.raises(GraphCaptureError, match="captured for"):  # the per-leaf check still applies
        _replay_entry(entry, torch.ones(1, 3, 4, 5), None)


def test_the_short_path_gives_the_general_paths_values():
    a, _ = _stage((2, 3, 4, 4))
    b, _ = _stage((2, 3, 4, 4))
    plain, chain = _entry([a]), _entry([Stage(name="id", fn=lambda t: t, capturable=False), b])
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    got, want = _replay_entry(plain, x, None), _replay_entry(chain, x, None)
    assert torch.equal(got["y"], want["y"]) and torch.equal(got["n"], want["n"])
