"""Timing helpers shared by the peer scripts: warm-up, median of repetitions, a per-case budget
and a cost model that skips (and says so) what would not fit, mirroring bench/ct/CostModel.cpp."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field


@dataclass
class Budget:
    case_s: float          # a case runs its repetitions when est * (2 + min_reps) fits this
    single_s: float        # else it runs once when est fits this; else it is skipped
    total_s: float         # nothing starts once this much wall time is used
    max_reps: int
    min_reps: int = 1
    start: float = field(default_factory=time.perf_counter)

    def left(self) -> float:
        return self.total_s - (time.perf_counter() - self.start)


class CostModel:
    """Seconds per work unit, learned from the last measurement of the same key."""

    def __init__(self):
        self.rate = {}

    def estimate(self, key, units):
        r = self.rate.get(key)
        return None if r is None else r * units

    def learn(self, key, units, seconds):
        if seconds > 0 and units > 0:
            self.rate[key] = seconds / units


def plan(est_s, budget: Budget):
    """None to run, or the reason to skip: the estimated run exceeds the single-run budget or
    the time left (an unknown estimate runs)."""
    left = budget.left()
    if left <= 0:
        return "run-time cap reached"
    if est_s is None or est_s <= min(budget.single_s, left):
        return None
    if est_s > budget.single_s:
        return f"est. {est_s:.3g} s per run > {budget.single_s:.3g} s budget"
    return "run-time cap reached"


def time_adaptive(fn, budget: Budget, gpu: bool):
    """Times a first run (a warm-up run); when the measured first run shows that one more warm-up
    run and min_reps repetitions fit the case budget, runs them and as many repetitions as fit
    (up to max_reps); otherwise the first run is the only sample. Returns
    (median_ms, samples, warmup, out)."""
    timer = time_cuda if gpu else time_host
    first, _, out = timer(fn, 0, 1)
    first = max(first, 1e-6)
    room = min(budget.case_s, budget.left()) * 1e3
    if first * (1 + budget.min_reps) <= room:
        reps = max(budget.min_reps, min(budget.max_reps, int(room / first) - 1))
        median, samples, out = timer(fn, 1, reps)
        return median, samples, 2, out
    return first, [first], 0, out


def time_host(fn, warmup, reps):
    """Wall-clock median (ms) of `reps` calls after `warmup` calls; returns (median, samples, out)."""
    out = None
    for _ in range(warmup):
        out = fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples), samples, out


def time_cuda(fn, warmup, reps):
    """CUDA-event median (ms) of `reps` calls after `warmup` calls (torch)."""
    import torch

    out = None
    for _ in range(warmup):
        out = fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples), samples, out
