"""CPU tests of the graph runner's decisions: policy values, refusals, the "auto" counter, the
LRU cache, invalidation bookkeeping. Nothing here fakes a capture: graphs need CUDA."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from graph_tiny_family import TinyFamily, TinySeamed, TinyUnflagged

from libreyolo.errors import ConfigError
from libreyolo.graphs.runner import GraphBook, GraphKey, PredictGraphs, check_policy, graph_refusal
from libreyolo.model import Model

CPU = torch.device("cpu")
CUDA = torch.device("cuda", 0)  # a device object only: nothing is allocated on it


@pytest.mark.parametrize("value", [False, True, "auto"])
def test_check_policy_accepts_exactly_three_values(value):
    assert check_policy(value) is value or check_policy(value) == value


@pytest.mark.parametrize("value", [None, 0, 1, "true", "True", "AUTO", "on", 1.0, [True]])
def test_check_policy_rejects_everything_else(value):
    with pytest.raises(ValueError, match="cuda_graph must be False, True or 'auto'"):
        check_policy(value)


@pytest.mark.parametrize("policy", [True, "auto"])
def test_unflagged_family_is_refused_by_name(policy):
    with pytest.raises(NotImplementedError, match="'yoloz'"):
        graph_refusal(family="yoloz", supported=False, reason="r", policy=policy, device=CUDA)


def test_force_bypasses_the_flag_but_not_the_device():
    assert graph_refusal(family="f", supported=False, reason="r", policy=True, device=CUDA, force=True) is None
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        graph_refusal(family="f", supported=False, reason="r", policy=True, device=CPU, force=True)


def test_true_on_cpu_is_a_value_error_and_auto_on_cpu_runs_eager_with_a_reason():
    with pytest.raises(ConfigError, match="CUDA graphs need a CUDA device"):
        graph_refusal(family="f", supported=True, reason="", policy=True, device=CPU)
    reason = graph_refusal(family="f", supported=True, reason="", policy="auto", device=CPU)
    assert reason is not None and "CUDA device" in reason
    assert graph_refusal(family="f", supported=True, reason="", policy=True, device=CUDA) is None


def test_book_true_captures_on_first_sight_and_replays_after():
    book: GraphBook[str] = GraphBook(capacity=2)
    assert book.decide("a", policy=True) == "capture"
    book.store("a", "A")
    assert book.decide("a", policy=True) == "replay"
    assert book.stats["captures"] == 1 and book.stats["calls"] == 2


def test_book_auto_captures_only_on_second_sight_per_key():
    book: GraphBook[str] = GraphBook(capacity=2)
    assert book.decide("a", policy="auto") == "eager"
    assert book.decide("b", policy="auto") == "eager"
    assert book.decide("a", policy="auto") == "capture"
    book.store("a", "A")
    assert book.decide("a", policy="auto") == "replay"
    assert book.decide("c", policy="auto") == "eager"
    assert book.stats["auto_waits"] == 3


def test_book_lru_eviction_order_and_logging_once(caplog):
    book: GraphBook[str] = GraphBook(capacity=2)
    book.store("a", "A")
    book.store("b", "B")
    assert book.decide("a", policy=True) == "replay"  # a becomes most recent
    with caplog.at_level(logging.DEBUG, logger="libreyolo.graphs.runner"):
        evicted = book.store("c", "C")
        evicted2 = book.store("d", "D")
    assert evicted == [("b", "B")] and evicted2 == [("a", "A")]
    assert list(book.entries) == ["c", "d"] and book.stats["evictions"] == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "LIBREYOLO_GRAPH_CACHE_SIZE" in warnings[0].getMessage()


def test_book_auto_counter_is_bounded():
    book: GraphBook[str] = GraphBook(capacity=1)
    for i in range(50):
        book.decide(i, policy="auto")
    assert len(book.seen) <= 4
    assert book.decide(0, policy="auto") == "eager"  # forgotten: counts as a first sight again


def test_book_drop_all_forgets_entries_and_sightings():
    book: GraphBook[str] = GraphBook(capacity=2)
    book.decide("x", policy="auto")
    book.store("a", "A")
    assert book.drop_all() == ["A"]
    assert not book.entries and not book.seen
    assert book.decide("x", policy="auto") == "eager"


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_book_rejects_bad_capacity(bad):
    with pytest.raises(ConfigError):
        GraphBook(capacity=bad)


def test_graph_key_separates_dtype_device_and_shape():
    x = torch.zeros(1, 3, 8, 8)
    k32, k16 = GraphKey.of(x, None), GraphKey.of(x, torch.float16)
    assert k32.dtype == "float32" and k16.dtype == "float16" and k32 != k16
    assert GraphKey.of(x, torch.float32) == k32
    assert GraphKey.of(torch.zeros(2, 3, 8, 8), None) != k32
    assert k32.device == "cpu" and k32.shape == (1, 3, 8, 8)


# ------------------------------------------------------------------ the runner on CPU
def _x(b=1, s=32):
    torch.manual_seed(0)
    return torch.rand(b, 3, s, s)


def test_model_forward_auto_on_cpu_runs_eager_and_says_why():
    model = Model(TinyFamily(size="n", nc=2))
    x = _x()
    out = model.forward(x, cuda_graph="auto")
    ref = model.eager_forward(x)
    assert all(torch.equal(a, b) for a, b in zip(out, ref, strict=False))
    info = model.graph_info()
    assert "CUDA device" in info["eager_reason"] and info["graphs"] == []
    assert info["policy"]["eager_runs"] == 1
    json.dumps(info)


def test_model_forward_true_on_cpu_raises_value_error():
    model = Model(TinyFamily(size="n", nc=2))
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        model.forward(_x(), cuda_graph=True)
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        model.capture_graph(imgsz=32, batch=1)


@pytest.mark.parametrize("policy", [True, "auto"])
def test_model_forward_unflagged_family_raises_not_implemented(policy):
    model = Model(TinyUnflagged(size="n", nc=2))
    with pytest.raises(NotImplementedError, match="tiny_unflagged"):
        model.forward(_x(), cuda_graph=policy)
    assert model.forward(_x(), cuda_graph=False)[0].shape == (1, 6, 16, 16)


def test_forced_runner_passes_the_flag_check_and_then_the_device_rule():
    model = Model(TinyUnflagged(size="n", nc=2))
    runner = PredictGraphs(model, force=True)
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        runner.run(_x(), policy=True)
    assert runner.info()["forced"] is True


def test_invalid_policy_is_rejected_by_forward():
    with pytest.raises(ValueError):
        Model(TinyFamily(size="n", nc=2)).forward(_x(), cuda_graph="yes")


def test_cache_size_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("LIBREYOLO_GRAPH_CACHE_SIZE", "3")
    assert Model(TinyFamily(size="n", nc=2)).graphs.capacity == 3
    monkeypatch.setenv("LIBREYOLO_GRAPH_CACHE_SIZE", "0")
    with pytest.raises(ConfigError):
        PredictGraphs(Model(TinyFamily(size="n", nc=2)))
    monkeypatch.delenv("LIBREYOLO_GRAPH_CACHE_SIZE")
    assert PredictGraphs(Model(TinyFamily(size="n", nc=2))).capacity == 8


def test_invalidation_is_recorded_with_its_reason():
    model = Model(TinyFamily(size="n", nc=2))
    model.graphs.invalidate("model moved from cuda:0 to cpu")
    model.fused = False
    model.fuse()  # TinyNet has no fuse(): nothing replaced, nothing invalidated
    model.graphs.invalidate("model quantized")
    info = model.graph_info()
    assert info["invalidation_count"] == 2
    assert [i["reason"] for i in info["invalidations"]] == ["model moved from cuda:0 to cpu", "model quantized"]
    assert info["invalidations"][0]["graphs_dropped"] == 0


def test_seamed_family_auto_on_cpu_equals_the_eager_chain():
    model = Model(TinySeamed(size="n", nc=2))
    x = _x(2)
    out = model.forward(x, cuda_graph="auto")
    ref = model.eager_forward(x)
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
    assert [s.capturable for s in model.forward_stages()] == [True, False, True]
