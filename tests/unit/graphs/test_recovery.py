"""CPU behaviour of libreyolo.graphs.recovery (the CUDA side is tested in tests/gpu)."""

from __future__ import annotations

import gc

import pytest
import torch

from libreyolo.graphs.recovery import (
    no_gc,
    recover_after_failed_capture,
    reset_generator_capture_state,
)


def test_no_gc_disables_and_restores_even_on_error() -> None:
    assert gc.isenabled()
    with no_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), no_gc():
        raise ValueError("boom")
    assert gc.isenabled()


def test_no_gc_keeps_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with no_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_recovery_is_a_no_op_off_cuda() -> None:
    recover_after_failed_capture("cpu")  # must not raise
    assert reset_generator_capture_state("cpu") is False
    if not torch.cuda.is_available():
        assert reset_generator_capture_state(0) is False
