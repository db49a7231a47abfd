"""libreyolo.bench.timing options the benchmark scripts rely on: ``inner`` calls per sample,
``time_pipelined``; on CPU ``time_events`` falls back to the synchronised wall clock."""

from __future__ import annotations

import time

import torch

from libreyolo.bench import timing

CPU = torch.device("cpu")


class Counter:
    def __init__(self, sleep_s: float = 0.0) -> None:
        self.calls, self.sleep_s = 0, sleep_s

    def __call__(self) -> None:
        self.calls += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)


def test_time_wall_runs_inner_calls_per_sample_and_reports_per_call_ms():
    fn = Counter(sleep_s=0.002)
    t = timing.time_wall(fn, device=CPU, iters=3, warmup=2, inner=4)
    assert fn.calls == 2 + 3 * 4
    assert t["n"] == 3 and t["clock"] == "wall_sync"
    assert 1.5 <= t["median_ms"] < 50  # per call, not per sample of four calls
    assert t["min_ms"] <= t["median_ms"] <= t["p90_ms"]


def test_time_events_on_cpu_uses_the_wall_clock_with_the_same_counts():
    fn = Counter()
    t = timing.time_events(fn, device=CPU, iters=5, warmup=3, inner=2, sync_each=True)
    assert fn.calls == 3 + 5 * 2 and t["n"] == 5 and t["clock"] == "wall_sync"


def test_time_pipelined_is_the_mean_of_back_to_back_calls():
    fn = Counter(sleep_s=0.002)
    ms = timing.time_pipelined(fn, device=CPU, iters=5)
    assert fn.calls == 5 and 1.5 <= ms < 50
