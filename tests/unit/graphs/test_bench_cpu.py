"""The benchmark harness on CPU: eager arm timed, graph arm skipped with a reason, JSON written."""

from __future__ import annotations

import json

import pytest
from graph_tiny_family import TinyFamily, TinyUnflagged

from libreyolo.bench import evaluate_targets, format_table, run_benchmark
from libreyolo.bench.run import _parse_batches, _parse_graph, _parse_imgsz
from libreyolo.errors import ConfigError
from libreyolo.model import Model


def test_run_benchmark_on_cpu_times_eager_and_skips_graph(tmp_path, capsys):
    model = Model(TinyFamily(size="n", nc=2))
    r = run_benchmark(model=model, imgsz=32, batch=[1, 2], device="cpu", half=False, warmup=1, iters=3,
                      end_to_end=False, compile=False, out=tmp_path)
    assert [run["config"]["batch"] for run in r["runs"]] == [1, 2]
    eager = r["runs"][0]["network"]["eager"]
    assert eager["median_ms"] > 0 and eager["n"] == 3
    assert "CUDA" in r["runs"][0]["network"]["graph"]["skipped"]
    assert r["model"]["fused"] is True and r["model"]["family"] == "tiny"
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["benchmark-tinyn-32x32.json", "benchmark-tinyn-32x32.md"]
    assert json.loads((tmp_path / files[0]).read_text())["runs"][1]["config"]["batch"] == 2
    assert "eager ms" in capsys.readouterr().out


def test_targets_are_judged_from_derived_numbers():
    run = {"derived": {"network_speedup": 4.5, "graph_over_kernel_sum": 1.2, "e2e_speedup": None,
                       "capture_ms": 20.0, "memory_ratio": 1.0}}
    ok = {t["name"]: t["ok"] for t in evaluate_targets(run)}
    assert ok == {"network_speedup": True, "graph_over_kernel_sum": False, "e2e_speedup": None,
                  "capture_ms": True, "memory_ratio": True}


def test_table_marks_a_refused_graph_arm():
    result = {"model": {"family": "f", "size": "t", "weights": "untrained"}, "environment": {},
              "runs": [{"config": {"batch": 1, "imgsz": [64, 64], "amp": "float16"},
                        "network": {"eager": {"median_ms": 2.0}, "graph": {"error": "refused: no"}},
                        "end_to_end": {}, "derived": {}}]}
    text = format_table(result)
    assert "error" in text and "graph arm: refused: no" in text


def test_argument_parsing():
    assert _parse_batches("1,8,32") == [1, 8, 32] and _parse_batches(4) == [4]
    assert _parse_imgsz("640") == 640 and _parse_imgsz("480,640") == (480, 640)
    assert _parse_graph("auto") is True and _parse_graph(False) is False and _parse_graph("false") is False
    for bad in ("x", "0", [1, -2]):
        with pytest.raises(ConfigError):
            _parse_batches(bad)
    with pytest.raises(ValueError):
        _parse_graph("maybe")


def test_forced_graph_benchmark_of_an_unflagged_family_then_a_profile_pass(tmp_path):
    """bench_predict.py's path: ``force_graph`` on a family without the flag, then the profiler
    pass over the finished runs (on CPU the profile reports that it needs CUDA)."""
    from libreyolo.bench.run import profile_runs

    model = Model(TinyUnflagged(size="n", nc=2))
    assert not model.SUPPORTS_CUDA_GRAPH
    r = run_benchmark(model=model, imgsz=32, batch=[1], device="cpu", half=False, warmup=1, iters=2,
                      end_to_end=False, compile=False, force_graph=True, profile=False, show=False)
    assert r["runs"][0]["config"]["graph_forced"] is True
    profile_runs(model, r["runs"], weights="untrained", half=False, device=__import__("torch").device("cpu"))
    eager = r["runs"][0]["network"]["eager"]
    assert eager["note"] == "needs CUDA" and eager["kernel_sum_ms"] is None
    assert "derived" in r["runs"][0] and "targets" in r["runs"][0]
