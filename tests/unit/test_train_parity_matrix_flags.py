"""Each family's SUPPORTS_TRAIN_CUDA_GRAPH agrees with the committed training parity matrix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from libreyolo.registry import families

MATRIX = Path(__file__).resolve().parents[2] / "docs" / "cuda-graph-training-parity.json"


def _rows() -> list[dict]:
    if not MATRIX.is_file():
        return []
    return json.loads(MATRIX.read_text())["rows"]


def verified(family: str, sizes: tuple[str, ...], rows: list[dict]) -> bool:
    """True when every size has a passing step-zero row (loss bit-identical, BN buffers equal)."""
    mine = [r for r in rows if r.get("family") == family]
    return bool(mine) and all(any(r["size"] == s and r.get("pass") for r in mine) for s in sizes) and all(
        r.get("pass") for r in mine
    )


@pytest.mark.parametrize("name", sorted(families()))
def test_flag_matches_matrix(name: str) -> None:
    fam = families()[name]
    ok = verified(name, fam.SIZES, _rows())
    assert fam.SUPPORTS_TRAIN_CUDA_GRAPH == ok, (
        f"{name}: SUPPORTS_TRAIN_CUDA_GRAPH={fam.SUPPORTS_TRAIN_CUDA_GRAPH} but the committed matrix "
        f"{'verifies' if ok else 'does not verify'} it; rerun benchmarks/parity_train.py on a GPU"
    )
    if not fam.SUPPORTS_TRAIN_CUDA_GRAPH:
        assert fam.TRAIN_CUDA_GRAPH_REASON.strip()


def test_verified_rule_rejects_missing_or_failing_rows() -> None:
    rows = [{"family": "f", "size": "a", "pass": True}, {"family": "f", "size": "b", "pass": False}]
    assert not verified("f", ("a", "b"), rows)
    assert not verified("f", ("a",), rows)  # a failing row of the family still blocks the flag
    assert verified("f", ("a",), rows[:1])
    assert not verified("g", ("a",), rows)
