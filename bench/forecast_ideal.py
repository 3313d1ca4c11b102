"""The ideal forecast of the back-test's day workload (`bench/forecast_backtest.py backtest --ideal N`).

What a perfect forecast of a waiting operation's start would say, from the same cluster state the forecast
gets plus what the forecast cannot know: the workload's true run-time distributions. Each draw runs every pool
as the queue it is on that workload (`--pool-running-limit L`: an operation starts when its pool runs fewer than
L operations, in registration order; the cluster has room for every job: `day` keeps 2,500-4,000 of 16,000
slots busy at 1,000 nodes), an operation finishes with its last job, a running job ends after a remaining time
drawn from its task's true distribution given how long it has run, and a job still to start runs a whole draw
(the last of ``n`` of them: one draw of the maximum). Its p10 / p50 / p90 are the draws' own quantiles, moved
out by the same timing resolution as the forecast's published range; the back-test scores it with the same
counting as the forecast. So it shows how much of a miss is the counting and the recorded day's own draw
rather than the forecast: with an ideal model, an 80% range holds 80% of the outcomes only over outcomes
chosen without looking at them.

Valid only where its two assumptions hold (pools' count limits are the only queue, no node is full); it is
not the forecast's model and does not replace it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from pooltree.forecast.state import ClusterState, OperationState
from pooltree.sim.scenario import Distribution

_A = (
    -39.69683028665376,
    220.9460984245205,
    -275.9285104469687,
    138.3577518672690,
    -30.66479806614716,
    2.506628277459239,
)
_B = (-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572)
_C = (
    -0.007784894002430293,
    -0.3223964580411365,
    -2.400758277161838,
    -2.549732539343734,
    4.374664141464968,
    2.938163982698783,
)
_D = (0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416)
_LOW = 0.02425


def normal_quantile(p: np.ndarray) -> np.ndarray:
    """The standard normal's quantile of each ``p`` in (0, 1) (Acklam's rational approximation, relative error
    below 1.2e-9; numpy has none and scipy is not a dependency)."""
    p = np.clip(np.asarray(p, dtype=float), 1e-300, 1.0 - 1e-16)
    x = np.empty_like(p)
    low = p < _LOW
    high = p > 1.0 - _LOW
    mid = ~(low | high)
    q = p[mid] - 0.5
    r = q * q
    x[mid] = (
        (((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5])
        * q
        / (((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1.0)
    )
    for part, sign in ((low, 1.0), (high, -1.0)):
        tail = p[part] if sign > 0 else 1.0 - p[part]
        t = np.sqrt(-2.0 * np.log(tail))
        x[part] = sign * (
            (((((_C[0] * t + _C[1]) * t + _C[2]) * t + _C[3]) * t + _C[4]) * t + _C[5])
            / ((((_D[0] * t + _D[1]) * t + _D[2]) * t + _D[3]) * t + 1.0)
        )
    return x


def _lognormal(distribution: Distribution) -> tuple[float, float]:
    if distribution.kind == "fixed":
        return distribution.a, 0.0
    if distribution.kind != "lognormal":
        raise ValueError(f"the ideal forecast draws lognormal or fixed run times, not {distribution.kind}")
    return distribution.a, distribution.b


def remaining_draws(
    distribution: Distribution, ages: Sequence[float], draws: int, rng: np.random.Generator
) -> np.ndarray:
    """``draws`` × len(``ages``): each running job's remaining time given it has run ``age`` seconds (its run
    time drawn above its age: the upper tail's probability scaled by a uniform, for precision far out)."""
    median, sigma = _lognormal(distribution)
    age = np.asarray(ages, dtype=float)
    if sigma <= 0:
        return np.broadcast_to(np.maximum(median - age, 0.0), (draws, len(age))).copy()
    z = np.log(np.maximum(age, 1e-3) / median) / sigma
    above = np.array([0.5 * math.erfc(value / math.sqrt(2.0)) for value in z])  # P(run time > age)
    tail = above[None, :] * (1.0 - rng.random((draws, len(age))))
    return np.maximum(median * np.exp(-sigma * normal_quantile(tail)) - age[None, :], 0.0)


def longest_of(distribution: Distribution, count: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` draws of the longest of ``count`` whole run times (one draw of the maximum: U^(1/count))."""
    median, sigma = _lognormal(distribution)
    if count <= 0:
        return np.zeros(draws)
    if sigma <= 0:
        return np.full(draws, median)
    tail = -np.expm1(np.log(1.0 - rng.random(draws)) / count)  # 1 - U^(1/count), kept precise near 0
    return median * np.exp(-sigma * normal_quantile(tail))


def _finish(
    op: OperationState,
    now: float,
    truth: Mapping[tuple[str, str], Distribution],
    draws: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """When ``op`` finishes, from now (it has started or is activated): its last job's end in each draw."""
    found = np.zeros(draws)
    for task in op.tasks:
        distribution = truth[(op.id, task.name)]
        if task.running:
            ends = remaining_draws(distribution, [now - job.start_time for job in task.running], draws, rng)
            found = np.maximum(found, ends.max(axis=1))
        if task.pending:
            found = np.maximum(found, longest_of(distribution, task.pending, draws, rng))
    return found


def ideal_starts(
    state: ClusterState,
    truth: Mapping[tuple[str, str], Distribution],
    limit: int,
    draws: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """Operation id → ``draws`` sorted start times (seconds from ``state.now``) of each operation that had not
    started, with each pool a queue of at most ``limit`` running operations (see the module docstring)."""
    rng = np.random.default_rng(seed)
    pools: dict[tuple[str, str], list[OperationState]] = {}
    for op in state.operations:
        pools.setdefault((op.tree, op.pool), []).append(op)
    found: dict[str, np.ndarray] = {}
    for ops in pools.values():
        running = [op for op in ops if op.state == "running"]
        queued = [op for op in ops if op.state != "running"]
        if not queued and all(op.first_job_time is not None for op in running):
            continue
        columns = [_finish(op, state.now, truth, draws, rng) for op in running]
        for op in running:
            if op.first_job_time is None:
                found[op.id] = np.zeros(draws)  # activated: its first job starts at the next heartbeat
        ends = np.sort(np.column_stack(columns), axis=1) if columns else np.zeros((draws, 0))
        for op in queued:
            count = ends.shape[1]
            if count < limit:
                start = np.zeros(draws)
            else:
                start = ends[:, count - limit].copy()
                ends = ends[:, count - limit + 1 :]
            found[op.id] = np.sort(start)
            finish = start + _finish(op, state.now, truth, draws, rng)
            ends = np.sort(np.column_stack([ends, finish]), axis=1)
    return found


def ideal_range(starts: np.ndarray, now: float, resolution: float, horizon: float) -> dict[str, float | None]:
    """p10 / p50 / p90 of the draws as absolute times, p10 and p90 moved out by ``resolution`` (as the forecast's
    published range); None: after the horizon."""
    found: dict[str, float | None] = {}
    for q, margin in ((0.1, -resolution), (0.5, 0.0), (0.9, resolution)):
        value = float(np.quantile(starts, q))
        found[f"p{round(q * 100)}"] = None if value > horizon else now + max(value + margin, 0.0)
    return found
