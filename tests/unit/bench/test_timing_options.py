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


def test_time_interleaved_alternates_arms_and_reports_total_and_host_ms():
    order: list[str] = []
    fns = {"a": lambda: (order.append("a"), time.sleep(0.002)), "b": lambda: order.append("b")}
    t = timing.time_interleaved(fns, device=CPU, iters=3, warmup=1)
    assert order == ["a", "b"] * 4  # one warm-up round, then three rounds in alternation
    assert set(t) == {"a", "b"} and t["a"]["n"] == 3 and t["a"]["clock"] == "wall_sync"
    assert 1.5 <= t["a"]["median_ms"] < 50 and t["b"]["median_ms"] < t["a"]["median_ms"]
    assert t["a"]["host_ms"]["n"] == 3 and t["a"]["host_ms"]["median_ms"] <= t["a"]["median_ms"]


def test_time_behind_busy_subtracts_the_busy_time_and_sizes_the_busy_call():
    cycles: list[int] = []
    fn = Counter(sleep_s=0.002)

    def busy(n: int) -> None:
        cycles.append(n)
        time.sleep(0.005)

    t = timing.time_behind_busy(fn, busy_ms=5.0, cycles_per_ms=100, iters=4, device=CPU, busy=busy)
    assert fn.calls == 4 and cycles == [500] * 4 and t["n"] == 4 and t["clock"] == "wall_sync"
    assert 1.0 <= t["median_ms"] < 50  # fn's ~2 ms, the busy 5 ms taken off


def test_busy_cycles_per_ms_is_none_off_cuda():
    assert timing.busy_cycles_per_ms(CPU) is None
