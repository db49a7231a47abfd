"""A family's SUPPORTS_CUDA_GRAPH must agree with the committed parity matrix (SPEC G-4).

True iff docs/cuda-graph-parity.json has at least one row for every (task, size) the family
declares and all of that family's rows pass; a False carries a one-line CUDA_GRAPH_REASON.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo.graphs.parity import expected_flag, load_matrix
from libreyolo.models._base.inference import twin_channels_last
from libreyolo.registry import families

MATRIX = Path(__file__).resolve().parents[2] / "docs" / "cuda-graph-parity.json"


def _rows() -> list[dict]:
    doc = load_matrix(MATRIX)
    return [] if doc is None else list(doc["rows"])


@pytest.mark.parametrize("name", sorted(families()))
def test_flag_matches_the_committed_matrix(name):
    cls = families()[name]
    want, why = expected_flag(cls, _rows())
    assert cls.SUPPORTS_CUDA_GRAPH is want, (
        f"{name}.SUPPORTS_CUDA_GRAPH is {cls.SUPPORTS_CUDA_GRAPH}, but the parity matrix says {want} ({why}); "
        "regenerate docs/cuda-graph-parity.json with benchmarks/parity_predict.py or fix the flag"
    )
    if not cls.SUPPORTS_CUDA_GRAPH:
        assert isinstance(cls.CUDA_GRAPH_REASON, str) and cls.CUDA_GRAPH_REASON.strip(), (
            f"{name} is not flagged for CUDA graphs but gives no CUDA_GRAPH_REASON"
        )


def test_matrix_rows_name_registered_families_and_carry_the_environment():
    doc = load_matrix(MATRIX)
    if doc is None:
        assert not any(c.SUPPORTS_CUDA_GRAPH for c in families().values())
        return
    env = doc["environment"]
    assert env["torch"] and env["gpu"] and env["date"] and env["commit"]
    names = set(families())
    for r in doc["rows"]:
        assert r["family"] in names, f"matrix row for unregistered family {r['family']!r}"
        assert r["result"] in {"pass", "fail", "error"}


def _failing_variants() -> list[tuple[str, str, tuple]]:
    seen = {(r["family"], r["size"], tuple(sorted(r["arch"].items()))) for r in _rows()
            if r.get("arch") and r.get("result") != "pass"}
    return sorted(seen)


@pytest.mark.parametrize("name,size,arch", _failing_variants())
def test_a_failing_architecture_variant_is_refused_at_run_time(name, size, arch):
    """A flagged family whose variant rows fail (e.g. fused attention on) must not replay graphs
    for that variant: ``cuda_graph_refusal`` names why, and a predict graph request is refused."""
    import torch

    from libreyolo.graphs.runner import PredictGraphs

    cls = families()[name]
    if not cls.SUPPORTS_CUDA_GRAPH:
        pytest.skip(f"{name} is not flagged: the class refuses every architecture")
    task = next(r["task"] for r in _rows() if r["family"] == name and r["size"] == size)
    model = cls(size=size, task=task, nc=3)
    assert model.cuda_graph_refusal() is None, f"{name} refuses its default architecture"
    model.set_arch(**dict(arch))
    why = model.cuda_graph_refusal()
    assert why, f"{name} {size} {dict(arch)} fails its parity rows but is not refused"
    with pytest.raises(NotImplementedError, match="does not support CUDA graphs"):
        PredictGraphs(model).run(torch.zeros(1, 3, 32, 32), policy=True)


def test_matrix_environment_names_the_commit_the_runner_sent(monkeypatch):
    from libreyolo.graphs.parity import environment

    monkeypatch.setenv("LIBREYOLO_COMMIT", "abc1234")
    assert environment()["commit"] == "abc1234"
    assert environment(commit="def5678")["commit"] == "def5678"
    monkeypatch.delenv("LIBREYOLO_COMMIT")
    assert environment()["commit"] not in ("", "abc1234")


@pytest.mark.parametrize("name", sorted(families()))
def test_rows_were_captured_with_the_prepared_model_the_flags_describe(name):
    """Parity is proven on the prepared model ``predict`` runs: a family's rows must have been
    captured in the layout its flags now select for the row's weights (``INFER_CHANNELS_LAST``,
    ``HALF_CHANNELS_LAST`` for half-precision weights) and with the conv epilogue
    (``GRAPH_BIAS_ACT``, which ``"channels_last"`` restricts to channels-last twins), so flipping
    a flag forces new rows. Architecture variant rows (``arch``) are checked for the layout only:
    they prove refusals and other variants, some were captured before the fused epilogue existed."""
    cls = families()[name]
    rows = [r for r in _rows() if r["family"] == name and "prepared" in r]
    for r in rows:
        where = f"{name}-{r['size']} {r['dtype']} ({r.get('commit')})"
        weights = getattr(torch, r["prepared"]["weights"])
        want_cl = twin_channels_last(cls, weights)
        assert r["prepared"]["channels_last"] is want_cl, (
            f"{where}: captured with channels_last={r['prepared']['channels_last']}, the flags select "
            f"{want_cl} for {weights}; regenerate the rows (benchmarks/parity_predict.py --merge)")
        if r.get("arch") or r.get("result") != "pass":
            continue
        want_ba = bool(cls.GRAPH_BIAS_ACT) and (cls.GRAPH_BIAS_ACT != "channels_last" or want_cl)
        assert bool(r.get("bias_act")) is want_ba, (
            f"{where}: captured with bias_act={bool(r.get('bias_act'))}, GRAPH_BIAS_ACT is "
            f"{cls.GRAPH_BIAS_ACT!r} (channels_last={want_cl})")


@pytest.mark.parametrize("name", sorted(n for n, c in families().items() if c.CUDA_GRAPH_VARIANTS))
def test_a_proven_variant_has_passing_rows_for_every_size(name):
    """``CUDA_GRAPH_VARIANTS`` lets an instance of an unflagged family replay graphs when it runs
    one of those architectures: each must have matrix rows for every declared (task, size), all
    passing, and the family default must really be unflagged (else the entry says nothing)."""
    cls = families()[name]
    assert cls.SUPPORTS_CUDA_GRAPH is False, f"{name} is flagged already; CUDA_GRAPH_VARIANTS is for unflagged families"
    for variant in cls.CUDA_GRAPH_VARIANTS:
        rows = [r for r in _rows() if r["family"] == name and r.get("arch") == dict(variant)]
        assert rows and all(r["result"] == "pass" for r in rows), (name, variant, [r["result"] for r in rows])
        missing = [(t, s) for t in cls.TASKS for s in cls.SIZES
                   if not any(r["task"] == t and r["size"] == s for r in rows)]
        assert not missing, f"{name} {variant}: no rows for {missing}"


def test_an_unflagged_family_replays_only_in_its_proven_variant():
    """ViT's default (fused attention) is refused for graphs; with fused_attn=False, the proven
    variant, the runner lets the request through to the device check (here: no CUDA)."""
    from libreyolo.graphs.runner import PredictGraphs

    model = families()["vit"](size="s16", nc=3)
    with pytest.raises(NotImplementedError, match="does not support CUDA graphs"):
        PredictGraphs(model)._refusal(True, torch.device("cpu"))
    model.set_arch(fused_attn=False)
    assert model.cuda_graph_variant()
    why = PredictGraphs(model)._refusal("auto", torch.device("cpu"))
    assert "need a CUDA device" in why
