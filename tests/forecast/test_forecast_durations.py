"""Run times the forecast assumes: early in a workload the jobs that completed are the short ones, so their own
median and spread are both too small; the running jobs (censored) bring both back. A group of running jobs'
remaining times keeps the upper tail that decides when the last of them ends."""

from __future__ import annotations

import math
import random
import statistics

from pooltree.forecast.durations import (
    DurationFit,
    DurationSettings,
    fit,
    partial_pooling,
    remaining,
    remaining_distribution,
)
from pooltree.sim.scenario import Distribution

TRUE_MEDIAN, TRUE_SIGMA = 300.0, 0.8


def early_sample(seed: int) -> tuple[list[float], list[float]]:
    """Jobs started uniformly over the last 600 s of run times LN(300, 0.8): those done and the running ones'
    elapsed times."""
    rng = random.Random(seed)
    done, running = [], []
    for _ in range(400):
        started = rng.uniform(0.0, 600.0)
        run_time = TRUE_MEDIAN * math.exp(TRUE_SIGMA * rng.gauss(0.0, 1.0))
        elapsed = 600.0 - started
        (done if run_time <= elapsed else running).append(run_time if run_time <= elapsed else elapsed)
    return done, running


def test_the_running_jobs_bring_back_the_median_and_the_spread() -> None:
    for seed in range(3):
        done, running = early_sample(seed)
        naive = fit(done, "pool", DurationSettings())
        # what the completed jobs alone say
        assert naive.median < 0.8 * TRUE_MEDIAN and naive.sigma < 0.85 * TRUE_SIGMA, naive
        found = fit(done, "pool", DurationSettings(), running)
        assert abs(math.log(found.median / TRUE_MEDIAN)) < 0.12, found
        assert abs(found.sigma - TRUE_SIGMA) < 0.08, found


def test_a_group_of_running_jobs_ends_when_its_last_job_would() -> None:
    """The last of 50 running jobs ends, over many draws, about when it would if each job's remaining time were
    drawn on its own (conditioned on its elapsed time): the group's distribution keeps the upper tail."""
    distribution = Distribution("lognormal", 337.0, 0.6)
    rng = random.Random(3)
    elapsed = sorted(rng.uniform(0, 600) for _ in range(52))
    groups = [elapsed[i : i + 13] for i in range(0, 52, 13)]
    exact, grouped = [], []
    for _ in range(300):
        exact.append(max(remaining(distribution, e, rng) for e in elapsed))
        last = 0.0
        for group in groups:
            drawn = remaining_distribution(distribution, group, rng)
            last = max(last, *(drawn.sample(rng) for _ in group))
        grouped.append(last)
    assert abs(math.log(statistics.median(grouped) / statistics.median(exact))) < 0.15


def test_own_fits_lean_on_their_pool_as_far_as_tasks_differ() -> None:
    """Tasks alike (every task's jobs LN(300 s, 0.6)): a task's own fit from 3 jobs is drawn to its pool's. Tasks
    that differ (medians spread by a factor of e between tasks) keep their own fits from 200 jobs."""
    rng = random.Random(5)
    pool = fit([300.0 * math.exp(0.6 * rng.gauss(0, 1)) for _ in range(256)], "pool", DurationSettings())

    def own(median: float, count: int) -> DurationFit:
        return fit(
            [median * math.exp(0.6 * rng.gauss(0, 1)) for _ in range(count)], "operation", DurationSettings()
        )

    alike = [own(300.0, 3) for _ in range(30)]
    pooled = partial_pooling([(found, pool) for found in alike])
    spread_own = statistics.pstdev(math.log(found.median) for found in alike)
    spread_pooled = statistics.pstdev(math.log(found.median) for found in pooled)
    assert spread_pooled < 0.5 * spread_own, (spread_own, spread_pooled)
    assert all(found.count == 3 and found.source == "operation" for found in pooled)
    assert all(found.doubt is not None and found.doubt < found.sigma / math.sqrt(3) for found in pooled)
    differ = [own(300.0 * math.exp(rng.gauss(0, 1)), 200) for _ in range(30)]
    kept = partial_pooling([(found, pool) for found in differ])
    for before, after in zip(differ, kept, strict=True):
        assert (
            abs(math.log(after.median / before.median)) < 0.05 * abs(math.log(before.median / 300.0)) + 0.01
        )
