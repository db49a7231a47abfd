"""Timing primitives: CUDA-event medians, synchronised wall clocks (alone, interleaved, behind busy
device work), profiler kernel sums, peaks.

A timer that takes ``warmup`` runs that many calls first; the summaries report the median (plus
min and p90) of ``iters`` samples.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

_NOT_KERNELS = ("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")


def _summary(samples: list[float]) -> dict[str, Any]:
    s = sorted(samples)
    return {"median_ms": statistics.median(s), "min_ms": s[0], "p90_ms": s[min(len(s) - 1, int(0.9 * len(s)))],
            "n": len(s)}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_events(fn: Callable[[], Any], *, device: torch.device, iters: int, warmup: int, inner: int = 1,
                sync_each: bool = False) -> dict[str, Any]:
    """Per-call GPU time with CUDA events (host clock with synchronisation on CPU), in ms.

    Each of the ``iters`` samples spans ``inner`` back-to-back calls between two events and is
    divided by ``inner`` (``inner > 1`` keeps the device queue full: device time, not the gap
    while the host prepares one launch). ``sync_each`` waits for each sample's end event before
    the next sample starts (the device idles between samples); otherwise samples are queued
    back to back and read after one synchronisation.
    """
    for _ in range(warmup):
        fn()
    sync(device)
    if device.type != "cuda":
        return time_wall(fn, device=device, iters=iters, warmup=0, inner=inner)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        for _ in range(inner):
            fn()
        ends[i].record()
        if sync_each:
            ends[i].synchronize()
    torch.cuda.synchronize(device)
    samples = [a.elapsed_time(b) / inner for a, b in zip(starts, ends, strict=True)]
    return {**_summary(samples), "clock": "cuda_events"}


def time_wall(fn: Callable[[], Any], *, device: torch.device, iters: int, warmup: int,
              inner: int = 1) -> dict[str, Any]:
    """Per-call wall time, synchronising the device after each sample of ``inner`` calls, in ms."""
    for _ in range(warmup):
        fn()
    sync(device)
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync(device)
        samples.append((time.perf_counter() - t0) * 1e3 / inner)
    return {**_summary(samples), "clock": "wall_sync"}


def time_pipelined(fn: Callable[[], Any], *, device: torch.device, iters: int) -> float:
    """Mean ms per call of ``iters`` back-to-back calls with one synchronisation at the end: the
    cost per call when the host may run ahead of the device (no warm-up: call it after a timer)."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(device)
    return (time.perf_counter() - t0) * 1e3 / iters


def time_interleaved(fns: dict[Any, Callable[[], Any]], *, device: torch.device, iters: int,
                     warmup: int = 0) -> dict[Any, dict[str, Any]]:
    """Several arms timed in alternation (one call of each per round, so no drift between arms),
    synchronised wall clock, in ms; per arm the summary of the call to synchronisation
    (``median_ms``…) plus ``host_ms``, the summary of the time until the call returned (what
    launching it cost the host before the device finished)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    total: dict[Any, list[float]] = {k: [] for k in fns}
    host: dict[Any, list[float]] = {k: [] for k in fns}
    for _ in range(iters):
        for k, fn in fns.items():
            sync(device)
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            sync(device)
            t2 = time.perf_counter()
            host[k].append((t1 - t0) * 1e3)
            total[k].append((t2 - t0) * 1e3)
    return {k: {**_summary(total[k]), "host_ms": _summary(host[k]), "clock": "wall_sync"} for k in fns}


def busy_cycles_per_ms(device: torch.device) -> int | None:
    """Cycles of ``torch.cuda._sleep`` per millisecond on this GPU, from one CUDA-event timed
    sleep after a warm-up (None off CUDA or where ``_sleep`` is unavailable)."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if device.type != "cuda" or sleep is None:
        return None
    cycles = 10_000_000
    sleep(cycles)  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    sleep(cycles)
    end.record()
    end.synchronize()
    return max(1, int(cycles / max(start.elapsed_time(end), 1e-3)))


def time_behind_busy(fn: Callable[[], Any], *, busy_ms: float, cycles_per_ms: int, iters: int,
                     device: torch.device, busy: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Per-call ms of ``fn`` queued behind ``busy_ms`` of device work (standing in for a network):
    each sample is the synchronised wall time of (busy, then ``fn``) minus ``busy_ms``, so what it
    shows is ``fn``'s extra cost when it follows device work (a host sync forbids overlap). No
    warm-up. ``busy(cycles)`` defaults to ``torch.cuda._sleep`` (see :func:`busy_cycles_per_ms`)."""
    busy = busy if busy is not None else torch.cuda._sleep
    samples = []
    for _ in range(iters):
        sync(device)
        t0 = time.perf_counter()
        busy(int(busy_ms * cycles_per_ms))
        fn()
        sync(device)
        samples.append((time.perf_counter() - t0) * 1e3 - busy_ms)
    return {**_summary(samples), "clock": "wall_sync"}


def kernel_profile(fn: Callable[[], Any], *, device: torch.device) -> dict[str, Any]:
    """Sum of CUDA kernel durations and kernel count for one call of ``fn`` (torch.profiler).

    The sum is the physical floor a replay can approach: launch gaps removed, kernels unchanged.
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    if device.type != "cuda":
        return {"kernel_sum_ms": None, "kernel_count": None, "note": "needs CUDA"}
    fn()
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        sync(device)
    kernels = [e for e in prof.events()
               if e.device_type == DeviceType.CUDA and not e.name.startswith(_NOT_KERNELS)]
    total_us = sum(e.time_range.elapsed_us() for e in kernels)
    return {"kernel_sum_ms": total_us / 1e3, "kernel_count": len(kernels)}


def fresh_memory(device: torch.device) -> int:
    """Collect garbage, empty the cache, reset peak statistics; returns bytes allocated now."""
    gc.collect()
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))


def peak_memory(device: torch.device) -> dict[str, int | None]:
    """Peak bytes allocated and reserved since the last :func:`fresh_memory` (None off CUDA).

    Allocated is what live tensors used at the peak; reserved also counts memory the caching
    allocator holds, which is where a graph's private pool shows (its intermediates are free
    between replays but stay reserved for the graph).
    """
    if device.type != "cuda":
        return {"peak_bytes": None, "peak_reserved_bytes": None}
    torch.cuda.synchronize(device)
    return {"peak_bytes": int(torch.cuda.max_memory_allocated(device)),
            "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(device))}
