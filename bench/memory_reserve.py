"""Memory-reserve policy benchmark: the synthetic trace model of memory-digest.md §4–5.

Prints ONE JSON object: per policy, overall and per family, reserve/used, rel_slack, overdraft, warm_od (jobs
started after the first wave), aborted, over_limit, retry_cost and the retry escalation figures; the
frontiers; digest insert/query timings.

The YTsaurus rows run the real ``pooltree.controllers.memory.TaskMemoryReserve`` (and so the real ``LogDigest``).

Trace (§4; all per operation, memory_limit = 1): median ratio m ~ Beta(2.2, 2.8); spread σ ~ U(0.05, 0.4);
family 45 % lognormal, 20 % near-constant (σ = 0.01), 15 % bimodal (light jobs at b ~ U(0.2, 0.6)× m, a share
h ~ U(0.05, 0.3) of heavy jobs at a ~ U(1.8, 3)× the light level, each with the operation's σ), 10 % drift (the
job level ramps linearly by g ~ U(1.5, 2.5) across the jobs, scaled so the ramp's mean is m), 10 % under-declared (m ~ U(0.7, 0.9), σ = 0.15); jobs per operation
lognormal(median 80, σ 1.2) clipped to [5, 3000]; concurrency lognormal(median 30, σ 0.8) clipped to [1, n];
40 % of operations have tmpfs of 0.1 or 0.3 (the reserve floor). Job j starts when job j − c finishes.
Extension for warm start (§4 is silent on recurrence): with probability ``--repeat`` (default 0.5) an operation
re-runs an earlier operation's task (same user/pool/command key): same family and shape parameters, the median
jittered by lognormal σ 0.1, fresh job count, concurrency and job draws.

Beyond the policies, each main run reports three frontiers of (reserve/used, overdraft) computed on the same
jobs (see :func:`frontiers`): the per-operation quantile oracle (q = 0.5 … 1), the distribution oracle (each
job sized knowing its operation's true generating distribution, by minimising r + λ·P(overdraft): an upper
bound for every policy that does not see the job's own peak), and that oracle with a blind first wave for tasks
never seen. Retry escalation is reported per policy (the re-run's reserve for three rules, and
``reserve/used_with_retries``); ``--low-p-abort`` reruns some policies with node arbitration (p_abort < 1).

The model gives no per-job signal (no input size, no task index within an operation): a bimodal operation's
heavy jobs are drawn at random, so no policy can tell a heavy job before it runs.

Run: ``.venv/bin/python bench/memory_reserve.py [--operations 1500] [--seed 7] [--quick] [--plot out.png]``
(default ≈ 60–90 s on 2 cores; ``--all-policies-every-run`` for every policy on every run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import timeit
from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import itertools

from pooltree.controllers.memory import (
    JobMemoryReserve,
    MemoryDigestSettings,
    TaskMemoryOptions,
    TaskMemoryReserve,
)
from pooltree.controllers.warm_start import MemoryDigestWarmStartStore
from pooltree.digest import LogDigest

FAMILIES = ("lognormal", "constant", "bimodal", "drift", "under_declared")
FAMILY_WEIGHTS = (0.45, 0.20, 0.15, 0.10, 0.10)
LIMIT = 1024.0**3  # memory_limit in bytes for the real TaskMemoryReserve; ratios are bytes / LIMIT


@dataclass
class Operation:
    """One synthetic operation: its task key, family, tmpfs floor, true job peaks and concurrency."""

    key: int
    family: str
    tmpfs: float
    u: np.ndarray
    c: int
    shape: dict[str, float] = field(default_factory=dict)
    first_of_task: bool = True


def _shape(rng: np.random.Generator, family: str) -> dict[str, float]:
    """Per-task shape parameters (reused when the task recurs)."""
    if family == "under_declared":
        return {"m": rng.uniform(0.7, 0.9), "sigma": 0.15}
    shape = {"m": rng.beta(2.2, 2.8), "sigma": rng.uniform(0.05, 0.4)}
    if family == "constant":
        shape["sigma"] = 0.01
    elif family == "bimodal":
        shape.update(h=rng.uniform(0.05, 0.3), a=rng.uniform(1.8, 3.0), b=rng.uniform(0.2, 0.6))
    elif family == "drift":
        shape["g"] = rng.uniform(1.5, 2.5)
    return shape


def _jobs(rng: np.random.Generator, family: str, shape: dict[str, float], n: int) -> np.ndarray:
    m, sigma = shape["m"], shape["sigma"]
    noise = np.exp(sigma * rng.standard_normal(n))
    if family == "bimodal":
        heavy = rng.random(n) < shape["h"]
        return m * shape["b"] * np.where(heavy, shape["a"], 1.0) * noise
    if family == "drift":
        ramp = 1.0 + (shape["g"] - 1.0) * np.arange(n) / max(n - 1, 1)
        return m * ramp * (2.0 / (1.0 + shape["g"])) * noise
    return m * noise


def generate_trace(operations: int, seed: int, repeat: float) -> tuple[list[Operation], np.ndarray]:
    """The operations and, per job (flattened), the uniform draw deciding whether an overdraft is aborted."""
    rng = np.random.default_rng(seed)
    tasks: list[tuple[str, dict[str, float], float]] = []
    ops: list[Operation] = []
    for _ in range(operations):
        first = True
        if tasks and rng.random() < repeat:
            first = False
            key = int(rng.integers(len(tasks)))
            family, shape, tmpfs = tasks[key]
            shape = dict(shape)
            shape["m"] = min(shape["m"] * math.exp(0.1 * rng.standard_normal()), 0.999)
        else:
            family = FAMILIES[int(rng.choice(len(FAMILIES), p=FAMILY_WEIGHTS))]
            shape = _shape(rng, family)
            tmpfs = float(rng.choice([0.1, 0.3])) if rng.random() < 0.4 else 0.0
            key = len(tasks)
            tasks.append((family, shape, tmpfs))
        n = int(np.clip(round(rng.lognormal(math.log(80), 1.2)), 5, 3000))
        c = int(np.clip(round(rng.lognormal(math.log(30), 0.8)), 1, n))
        u = _jobs(rng, family, shape, n)
        ops.append(Operation(key, family, tmpfs, u, c, shape=shape, first_of_task=first))
    total = sum(len(op.u) for op in ops)
    abort_draws = np.random.default_rng(seed + 1_000_003).random(total)
    return ops, abort_draws


# Policies: reserve() → factor of memory_limit (≤ 1); observe(u, aborted, r) when the job finishes.


class Fixed:
    def __init__(self, op: Operation):
        pass

    def reserve(self) -> float:
        return 1.0

    def observe(self, u: float, aborted: bool, r: float) -> None:
        pass


class YtDigest:
    """The real TaskMemoryReserve with the given settings (optionally warm-started from a store)."""

    def __init__(
        self,
        op: Operation,
        settings: MemoryDigestSettings,
        default: float = 0.5,
        store: MemoryDigestWarmStartStore | None = None,
        cold_prior: bool = False,
    ):
        spec = {
            "memory_limit": LIMIT,
            "tmpfs_size": op.tmpfs * LIMIT,
            "user_job_memory_digest_default_value": default,
        }
        self.store = store
        self.key = ("user", "pool", f"task-{op.key}")
        warm = store.lookup(*self.key) if store is not None else None
        prior = store.cluster_prior() if store is not None and warm is None and cold_prior else None
        self.task = TaskMemoryReserve(
            TaskMemoryOptions.from_spec(spec, settings), settings, warm_start=warm, cold_start_prior=prior
        )
        self._factor = self.task.user_job_reserve_factor()

    def reserve(self) -> float:
        return self._factor

    def observe(self, u: float, aborted: bool, r: float) -> None:
        if aborted:
            job = JobMemoryReserve(r, 1.0, LIMIT, self.task.options.job_proxy_memory, 0.0)
            self.task.on_job_aborted_resource_overdraft(None, u * LIMIT, reserve=job)
        else:
            self.task.on_job_completed(u * LIMIT)
        self._factor = self.task.user_job_reserve_factor()

    def finish(self) -> None:
        if self.store is not None:
            self.store.remember(*self.key, self.task)


class Exact:
    """Exact nearest-rank quantile of all samples, YTsaurus clamping and the code bump."""

    def __init__(self, op: Operation, q: float = 0.95):
        self.lower = max(0.05, op.tmpfs)
        self.default = max(0.5, self.lower)
        self.q = q
        self.samples: list[float] = []

    def reserve(self) -> float:
        if not self.samples:
            return self.default
        rank = max(math.ceil(self.q * len(self.samples)), 1)
        return min(max(self.samples[rank - 1], self.lower), 1.0)

    def observe(self, u: float, aborted: bool, r: float) -> None:
        insort(self.samples, max(u, 1.1 * r) if aborted else u)


class VpaLike:
    """p90 of an exponential-bucket histogram (5 % growth, bucket end) × 1.15; OOM sample max(u, r) × 1.2."""

    START, GROWTH, COUNT = 0.01, 1.05, 120

    def __init__(self, op: Operation, half_life: float | None = None):
        self.lower = max(0.05, op.tmpfs)
        self.default = max(0.5, self.lower)
        self.weights = [0.0] * self.COUNT
        self.total = 0.0
        self.half_life = half_life
        self.seen = 0
        self._factor = self.default

    def reserve(self) -> float:
        return self._factor

    def observe(self, u: float, aborted: bool, r: float) -> None:
        sample = max(u, r) * 1.2 if aborted else u
        index = min(max(int(math.log(sample / self.START) / math.log(self.GROWTH)), 0), self.COUNT - 1)
        weight = 2.0 ** (self.seen / self.half_life) if self.half_life else 1.0
        self.seen += 1
        self.weights[index] += weight
        self.total += weight
        target, running = 0.9 * self.total, 0.0
        index = self.COUNT - 1
        for i, w in enumerate(self.weights):
            running += w
            if running >= target:
                index = i
                break
        edge = self.START * self.GROWTH ** (index + 1)
        self._factor = min(max(edge * 1.15, self.lower), 1.0)


class OracleP95:
    def __init__(self, op: Operation):
        ordered = np.sort(op.u)
        p95 = float(ordered[max(math.ceil(0.95 * len(ordered)), 1) - 1])
        self.r = min(max(p95, op.tmpfs), 1.0)

    def reserve(self) -> float:
        return self.r

    def observe(self, u: float, aborted: bool, r: float) -> None:
        pass


def simulate(
    ops: list[Operation], abort_draws: np.ndarray, make: Callable[[Operation], object], p_abort: float
):
    """Run one policy over the trace; returns metric sums overall and per family."""
    keys = (
        "jobs",
        "warm_jobs",
        "sum_r",
        "sum_u",
        "slack",
        "overdraft",
        "warm_overdraft",
        "aborted",
        "over_limit",
        "retry",
        "retry_limit",
        "retry_peak",
        "retry_x2",
        "retry_x2_od",
    )
    acc = {name: dict.fromkeys(keys, 0.0) for name in ("all", *FAMILIES)}
    offset = 0
    for op in ops:
        policy = make(op)
        u_list = op.u.tolist()
        n, c = len(u_list), op.c
        draws = abort_draws[offset : offset + n].tolist()
        offset += n
        reserves = [0.0] * n
        aborted_flags = [False] * n
        failed = [False] * n
        sum_r = slack = retry = retry_peak = retry_x2 = 0.0
        retry_x2_od = 0
        overdraft = warm_overdraft = aborted = over_limit = 0
        for j in range(n):
            k = j - c
            if k >= 0 and not failed[k]:
                policy.observe(u_list[k], aborted_flags[k], reserves[k])
            r = policy.reserve()
            u = u_list[j]
            reserves[j] = r
            sum_r += r
            if r > u:
                slack += r - u
            if u > 1.0:
                over_limit += 1
                failed[j] = True
            elif u > r:
                overdraft += 1
                if j >= c:
                    warm_overdraft += 1
                if draws[j] < p_abort:
                    aborted += 1
                    aborted_flags[j] = True
                    retry += 0.5 * r
                    # Retry escalation variants (the re-run's own reserve; not part of sum_r):
                    # limit (YTsaurus default), the aborted attempt's peak × 1.1, the attempt's reserve × 2.
                    retry_peak += min(1.1 * u, 1.0)
                    retry_x2 += min(2.0 * r, 1.0)
                    if u > min(2.0 * r, 1.0):
                        retry_x2_od += 1
        # Jobs still running at the end finish; their samples reach the policy (matters for warm start).
        for k in range(max(n - c, 0), n):
            if not failed[k]:
                policy.observe(u_list[k], aborted_flags[k], reserves[k])
        finish = getattr(policy, "finish", None)
        if finish is not None:
            finish()
        values = {
            "jobs": n,
            "warm_jobs": max(n - c, 0),
            "sum_r": sum_r,
            "sum_u": float(op.u.sum()),
            "slack": slack,
            "overdraft": overdraft,
            "warm_overdraft": warm_overdraft,
            "aborted": aborted,
            "over_limit": over_limit,
            "retry": retry,
            "retry_limit": float(aborted),
            "retry_peak": retry_peak,
            "retry_x2": retry_x2,
            "retry_x2_od": retry_x2_od,
        }
        for group in ("all", op.family):
            for name, value in values.items():
                acc[group][name] += value
    return {group: _metrics(a) for group, a in acc.items() if a["jobs"]}


def _metrics(a: dict[str, float]) -> dict[str, float]:
    return {
        "reserve/used": round(a["sum_r"] / a["sum_u"], 3),
        "rel_slack": round(a["slack"] / a["sum_r"], 3),
        "overdraft": round(a["overdraft"] / a["jobs"], 4),
        "warm_od": round(a["warm_overdraft"] / a["warm_jobs"], 4) if a["warm_jobs"] else 0.0,
        "aborted": round(a["aborted"] / a["jobs"], 4),
        "over_limit": round(a["over_limit"] / a["jobs"], 4),
        "retry_cost": round(a["retry"] / a["sum_u"], 4),
        # reserve × time when an aborted attempt holds r for half its run and its re-run holds the limit
        "reserve/used_with_retries": round((a["sum_r"] - a["retry"] + a["retry_limit"]) / a["sum_u"], 3),
        "retry_reserve_limit": round(a["retry_limit"] / a["sum_u"], 4),
        "retry_reserve_peak_x1.1": round(a["retry_peak"] / a["sum_u"], 4),
        "retry_reserve_x2": round(a["retry_x2"] / a["sum_u"], 4),
        "retry_x2_overdraft_again": round(a["retry_x2_od"] / a["aborted"], 4) if a["aborted"] else 0.0,
        "jobs": int(a["jobs"]),
    }


def policies() -> dict[str, Callable[[], Callable[[Operation], object]]]:
    """Each entry builds a fresh factory (so stores start empty per run)."""

    def yt(**kw):
        settings = MemoryDigestSettings(**{k: v for k, v in kw.items() if k != "default"})
        return lambda: lambda op: YtDigest(op, settings, default=kw.get("default", 0.5))

    def improved_v1(quantile: float = 0.95):
        settings = MemoryDigestSettings(
            overdraft_sample_variant="docs", user_job_memory_reserve_quantile=quantile
        )
        store = MemoryDigestWarmStartStore(capacity=100_000, max_carried_samples=IMPROVED_CARRIED)
        return lambda op: YtDigest(op, settings, default=IMPROVED_DEFAULT, store=store)

    def improved(cost: float = IMPROVED_OVERDRAFT_COST, warm: bool = True, window: int = IMPROVED_WINDOW):
        settings = MemoryDigestSettings.pooltree_improved(
            user_job_overdraft_cost=cost, user_job_recent_window=window
        )
        store = MemoryDigestWarmStartStore.pooltree_improved(capacity=100_000)
        if not warm:
            return lambda op: YtDigest(op, settings, default=IMPROVED_DEFAULT)
        return lambda op: YtDigest(op, settings, default=IMPROVED_DEFAULT, store=store, cold_prior=True)

    return {
        "fixed_user_limit": lambda: Fixed,
        "yt_p95_code": yt(overdraft_sample_variant="code"),
        "yt_p95_docs": yt(overdraft_sample_variant="docs"),
        "yt_p95_newest": yt(overdraft_sample_variant="newest"),
        "yt_p95_exact_samples_code": lambda: Exact,
        "yt_p99_code": yt(overdraft_sample_variant="code", user_job_memory_reserve_quantile=0.99),
        "yt_p95_default_1.0_code": yt(overdraft_sample_variant="code", default=1.0),
        "vpa_p90x1.15": lambda: VpaLike,
        "vpa_p90x1.15_half_life_50": lambda: lambda op: VpaLike(op, half_life=50.0),
        "oracle_true_p95": lambda: OracleP95,
        "oracle_per_job": lambda: None,
        "pooltree_improved_v1_quantile_warm": improved_v1,
        "pooltree_improved_v1_p99": lambda: improved_v1(0.99),
        "improved_no_history": lambda: improved(warm=False),
        "improved_no_window": lambda: improved(window=0),
        "overdraft_cost_1.5": lambda: improved(1.5),
        "overdraft_cost_3": lambda: improved(3.0),
        "pooltree_improved": improved,
    }


# Which policies each run of the default invocation covers (keeps it short; --all-policies-every-run: all).
REFERENCE_POLICIES = (  # the rows of memory-digest.md §5.4
    "fixed_user_limit",
    "yt_p95_code",
    "yt_p95_exact_samples_code",
    "yt_p95_docs",
    "yt_p95_newest",
    "yt_p99_code",
    "yt_p95_default_1.0_code",
    "vpa_p90x1.15",
    "vpa_p90x1.15_half_life_50",
    "oracle_true_p95",
    "oracle_per_job",
)
CORE_POLICIES = (
    "fixed_user_limit",
    "yt_p95_code",
    "yt_p95_docs",
    "vpa_p90x1.15",
    "oracle_true_p95",
    "pooltree_improved_v1_quantile_warm",
    "pooltree_improved",
)
IMPROVED_POLICIES = ("pooltree_improved_v1_quantile_warm", "pooltree_improved_v1_p99", "pooltree_improved")
SWEEP_POLICIES = ("overdraft_cost_1.5", "overdraft_cost_3")  # ablations: improved_no_window/_no_history
ABORT_POLICIES = ("yt_p95_code", "pooltree_improved")


IMPROVED_CARRIED = 50  # carried samples: enough to size the first wave, few enough to be outvoted quickly
IMPROVED_DEFAULT = 1.0  # a task never seen, before the cluster prior fills, starts at its full limit
_PRESET = MemoryDigestSettings.pooltree_improved()
IMPROVED_OVERDRAFT_COST = _PRESET.user_job_overdraft_cost  # an overdraft is worth 2 × memory_limit of reserve
IMPROVED_WINDOW = _PRESET.user_job_recent_window  # change detection over the last 40 samples
IMPROVED_CARRIED_SCALE = (
    MemoryDigestWarmStartStore.pooltree_improved().carried_scale
)  # runs drift (σ 0.1 here)


class PerJobOracle:
    """r = min(u, 1) for the job about to start: needs the trace, so it peeks at the next job."""

    def __init__(self, op: Operation):
        self.next = iter(op.u.tolist())

    def reserve(self) -> float:
        return min(next(self.next), 1.0)

    def observe(self, u: float, aborted: bool, r: float) -> None:
        pass


# Frontiers: what the best policies of a family can reach on this trace (evaluated on the realised jobs).

GOAL = {"reserve/used": 1.25, "overdraft": 0.02}
FRONTIER_QUANTILES = (0.5, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995, 1.0)
FRONTIER_COSTS = (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.7, 2.0, 2.5, 3.0, 5.0, 10.0)
_GRID = np.concatenate([np.geomspace(0.02, 1.0, 600)[:-1], [1.0]])
_erf = np.frompyfunc(math.erf, 1, 1)


def _exceed(r: np.ndarray, median: float, sigma: float) -> np.ndarray:
    """P(u > r) for a lognormal job peak with this median and log-sd."""
    z = (np.log(r) - math.log(median)) / (sigma * math.sqrt(2.0))
    return 0.5 * (1.0 - _erf(z).astype(float))


def _segments(op: Operation, chunks: int = 20) -> list[tuple[slice, np.ndarray]]:
    """Per run of jobs with one known distribution: P(r < u ≤ 1) on the reserve grid (drift: 20 chunks)."""
    shape, n, sigma = op.shape, len(op.u), op.shape["sigma"]

    def overdraft(mixture: list[tuple[float, float]]) -> np.ndarray:
        at_limit = sum(w * float(_exceed(np.array([1.0]), mu, sigma)[0]) for mu, w in mixture)
        above = sum(w * _exceed(_GRID, mu, sigma) for mu, w in mixture)
        return np.clip(above - at_limit, 0.0, 1.0)

    if op.family == "bimodal":
        light = shape["m"] * shape["b"]
        return [(slice(0, n), overdraft([(light, 1 - shape["h"]), (light * shape["a"], shape["h"])]))]
    if op.family == "drift":
        g, out = shape["g"], []
        edges = np.linspace(0, n, min(chunks, n) + 1).astype(int)
        for a, b in itertools.pairwise(edges):
            if b > a:
                ramp = 1 + (g - 1) * ((a + b - 1) / 2) / max(n - 1, 1)
                out.append((slice(a, b), overdraft([(shape["m"] * ramp * 2 / (1 + g), 1.0)])))
        return out
    return [(slice(0, n), overdraft([(shape["m"], 1.0)]))]


def _evaluate(ops: list[Operation], reserves: list[np.ndarray]) -> tuple[float, float]:
    sum_r = sum_u = 0.0
    overdraft = jobs = 0
    for op, r in zip(ops, reserves, strict=True):
        sum_r += float(r.sum())
        sum_u += float(op.u.sum())
        overdraft += int(np.sum((op.u > r) & (op.u <= 1.0)))
        jobs += len(op.u)
    return round(sum_r / sum_u, 4), round(overdraft / jobs, 4)


def frontiers(ops: list[Operation]) -> dict:
    """Three frontiers of (reserve/used, overdraft):

    * ``oracle_quantile``: every job of an operation gets the same quantile q of that operation's realised peaks
      (peeks at the whole operation; the family the brief names);
    * ``oracle_distribution``: each job gets the r minimising ``r + λ·P(r < u ≤ 1)`` under its operation's true
      generating distribution (including the drift ramp position): the best any policy that does not see the
      job's own peak can do in expectation, with perfect knowledge of the task;
    * ``oracle_distribution_cold``: the same, but the first wave of a task never seen before only knows the
      pooled peaks of the whole trace (generous: a policy would learn this prior from earlier operations).
    """
    quantile = []
    for q in FRONTIER_QUANTILES:
        reserves = []
        for op in ops:
            value = float(np.quantile(op.u, q, method="inverted_cdf"))
            reserves.append(np.full(len(op.u), min(max(value, op.tmpfs), 1.0)))
        quantile.append([q, *_evaluate(ops, reserves)])
    segments = [_segments(op) for op in ops]
    pooled = np.concatenate([op.u for op in ops])
    within = np.sort(pooled[pooled <= 1.0])
    population = (len(within) - np.searchsorted(within, _GRID, side="right")) / len(pooled)
    curves: dict[str, list] = {"oracle_distribution": [], "oracle_distribution_cold": []}
    for cost in FRONTIER_COSTS:
        known, cold = [], []
        for op, parts in zip(ops, segments, strict=True):
            r = np.empty(len(op.u))
            for part, overdraft in parts:
                total = _GRID + cost * overdraft
                total[op.tmpfs > _GRID] = np.inf
                r[part] = _GRID[int(np.argmin(total))]
            known.append(r)
            if op.first_of_task:
                total = _GRID + cost * population
                total[op.tmpfs > _GRID] = np.inf
                r = r.copy()
                r[: op.c] = _GRID[int(np.argmin(total))]
            cold.append(r)
        curves["oracle_distribution"].append([cost, *_evaluate(ops, known)])
        curves["oracle_distribution_cold"].append([cost, *_evaluate(ops, cold)])
    out = {"oracle_quantile": quantile, **curves}
    summary = {}
    for name, points in out.items():
        ordered = sorted(points, key=lambda p: p[2])
        ru, od = [p[1] for p in ordered], [p[2] for p in ordered]
        summary[name] = {
            "reserve_used_at_2pct_overdraft": round(float(np.interp(0.02, od, ru)), 3),
            "overdraft_at_reserve_used_1.25": round(float(np.interp(1.25, ru[::-1], od[::-1])), 4),
            "reaches_goal": any(p[1] <= GOAL["reserve/used"] and p[2] <= GOAL["overdraft"] for p in points),
        }
    out["summary"] = summary
    return out


def plot(result: dict, path: str) -> None:
    """Frontiers and policy points of the first run, with the goal, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(result["runs"].items())
    fig, axes = plt.subplots(1, len(runs), figsize=(7 * len(runs), 5.5), squeeze=False)
    for ax, (name, run_result) in zip(axes[0], runs, strict=True):
        for curve, points in run_result.get("frontier", {}).items():
            if curve in ("summary", "seconds"):
                continue
            ordered = sorted(points, key=lambda p: p[2])
            ax.plot([100 * p[2] for p in ordered], [p[1] for p in ordered], marker=".", label=curve)
        for policy, metrics in run_result["policies"].items():
            m = metrics["all"]
            if m["overdraft"] <= 0.2 and m["reserve/used"] <= 1.8:
                ax.scatter(100 * m["overdraft"], m["reserve/used"], s=18)
                ax.annotate(policy, (100 * m["overdraft"], m["reserve/used"]), fontsize=6)
        ax.add_patch(plt.Rectangle((0, 0.9), 100 * GOAL["overdraft"], GOAL["reserve/used"] - 0.9, alpha=0.15))
        ax.set_xlabel("overdraft, % of jobs")
        ax.set_ylabel("reserve / used")
        ax.set_title(name)
        ax.set_xlim(0, 20)
        ax.set_ylim(0.9, 1.8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def digest_timings(repeats: int) -> dict[str, float]:
    """Median over repeats of one LogDigest insert and one p95 query (user-job settings), in µs."""
    rng = np.random.default_rng(1)
    values = rng.lognormal(math.log(0.3), 0.5, 20_000).tolist()
    inserts, queries = [], []
    for _ in range(repeats):
        digest = LogDigest(0.05, 1.0, 0.01, 0.5)
        add, query, it = digest.add_sample, digest.get_quantile, iter(values)
        inserts.append(timeit.timeit(lambda: add(next(it)), number=len(values)) / len(values) * 1e6)  # noqa: B023
        queries.append(timeit.timeit(lambda: query(0.95), number=20_000) / 20_000 * 1e6)  # noqa: B023
    return {
        "insert_us_median": round(statistics.median(inserts), 3),
        "query_p95_us_median": round(statistics.median(queries), 3),
        "insert_us_min_max": [round(min(inserts), 3), round(max(inserts), 3)],
        "query_p95_us_min_max": [round(min(queries), 3), round(max(queries), 3)],
        "repeats": repeats,
    }


def run(
    operations: int,
    seed: int,
    p_abort: float,
    repeat: float,
    only: list[str] | None,
    with_frontier: bool = True,
) -> dict:
    ops, draws = generate_trace(operations, seed, repeat)
    first_wave = sum(min(op.c, len(op.u)) for op in ops) / sum(len(op.u) for op in ops)
    results = {}
    for name, factory in policies().items():
        if only and name not in only:
            continue
        make = PerJobOracle if name == "oracle_per_job" else factory()
        started = time.perf_counter()
        results[name] = simulate(ops, draws, make, p_abort)
        results[name]["all"]["seconds"] = round(time.perf_counter() - started, 2)
    out = {
        "operations": operations,
        "jobs": int(sum(len(op.u) for op in ops)),
        "first_wave_share": round(first_wave, 4),
        "policies": results,
    }
    if with_frontier:
        started = time.perf_counter()
        out["frontier"] = frontiers(ops)
        out["frontier"]["seconds"] = round(time.perf_counter() - started, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--extra-seed", type=int, default=11, help="second seed, core policies only (-1: none)"
    )
    parser.add_argument("--p-abort", type=float, default=1.0)
    parser.add_argument(
        "--low-p-abort", type=float, default=0.3, help="node arbitration run (core policies, -1: none)"
    )
    parser.add_argument(
        "--repeat", type=float, default=0.5, help="share of operations re-running an earlier task"
    )
    parser.add_argument("--quick", action="store_true", help="300 operations, one seed, fewer timing repeats")
    parser.add_argument("--only", nargs="*", help="policy names to run")
    parser.add_argument("--all-policies-every-run", action="store_true", help="longer: no core-only runs")
    parser.add_argument("--plot", help="write the frontier plot (PNG) to this path")
    args = parser.parse_args()
    if args.operations < 1 or not 0 <= args.p_abort <= 1 or not 0 <= args.repeat < 1:
        parser.error("--operations must be >= 1, --p-abort in [0, 1], --repeat in [0, 1)")
    operations = 300 if args.quick else args.operations
    every = args.all_policies_every_run

    def pick(*groups: tuple[str, ...]) -> list[str] | None:
        if args.only:
            return list(args.only)
        return None if every else list(dict.fromkeys(name for group in groups for name in group))

    started = time.perf_counter()
    seed, extra, main_repeat = args.seed, args.extra_seed, args.repeat
    plan: list[tuple[str, int, float, float, list[str] | None]] = [
        (f"seed{seed}_repeat0.0", seed, args.p_abort, 0.0, pick(REFERENCE_POLICIES, IMPROVED_POLICIES))
    ]
    if main_repeat > 0:
        plan.append(
            (
                f"seed{seed}_repeat{main_repeat}",
                seed,
                args.p_abort,
                main_repeat,
                pick(CORE_POLICIES, IMPROVED_POLICIES, SWEEP_POLICIES),
            )
        )
    if not args.quick and extra >= 0:
        plan.append((f"seed{extra}_repeat0.0", extra, args.p_abort, 0.0, pick(CORE_POLICIES)))
        if every and main_repeat > 0:
            plan.append((f"seed{extra}_repeat{main_repeat}", extra, args.p_abort, main_repeat, None))
    if not args.quick and args.low_p_abort >= 0:
        plan.append(
            (
                f"seed{seed}_repeat{main_repeat}_p_abort{args.low_p_abort}",
                seed,
                args.low_p_abort,
                main_repeat,
                pick(ABORT_POLICIES),
            )
        )
    runs = {
        name: run(operations, run_seed, p_abort, repeat, names, with_frontier=p_abort == args.p_abort)
        for name, run_seed, p_abort, repeat, names in plan
    }
    out = {
        "name": "memory_reserve",
        "parameters": {
            "operations": operations,
            "seed": args.seed,
            "extra_seed": None if args.quick else args.extra_seed,
            "p_abort": args.p_abort,
            "low_p_abort": None if args.quick else args.low_p_abort,
            "repeat": args.repeat,
            "goal": GOAL,
            "improved_policy": "real TaskMemoryReserve: overdraft_cost rule (r minimising r + "
            f"{IMPROVED_OVERDRAFT_COST}·P(next job > r), P = (samples above r + 1)/(N + 1)), the larger of the rule on "
            f"all samples and on the last {IMPROVED_WINDOW} (change detection), docs bump; warm start "
            f"from the same task's previous operation (at most {IMPROVED_CARRIED} carried samples, moved up "
            f"×{IMPROVED_CARRIED_SCALE}); a task never seen starts from the cluster prior of earlier operations "
            f"(default {IMPROVED_DEFAULT} until the prior holds 200 samples)",
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "digest_timings": digest_timings(3 if args.quick else 5),
        "runs": runs,
    }
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out), flush=True)
    if args.plot:
        plot({"runs": {k: v for k, v in runs.items() if "frontier" in v}}, args.plot)


if __name__ == "__main__":
    main()
