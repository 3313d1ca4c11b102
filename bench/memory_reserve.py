"""Memory-reserve policy benchmark: the synthetic trace model of memory-digest.md §4–5.

Prints ONE JSON object: per policy, overall and per family, reserve/used, rel_slack, overdraft, warm_od (jobs
started after the first wave), aborted, over_limit and retry_cost; plus digest insert/query timings.

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

Run: ``.venv/bin/python bench/memory_reserve.py [--operations 1500] [--seed 7] [--quick]``.
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
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pooltree.controllers.memory import (
    JobMemoryReserve,
    MemoryDigestSettings,
    MemoryDigestWarmStartStore,
    TaskMemoryOptions,
    TaskMemoryReserve,
)
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
        if tasks and rng.random() < repeat:
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
        ops.append(Operation(key=key, family=family, tmpfs=tmpfs, u=_jobs(rng, family, shape, n), c=c))
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
    ):
        spec = {
            "memory_limit": LIMIT,
            "tmpfs_size": op.tmpfs * LIMIT,
            "user_job_memory_digest_default_value": default,
        }
        self.store = store
        self.key = ("user", "pool", f"task-{op.key}")
        warm = store.lookup(*self.key) if store is not None else None
        self.task = TaskMemoryReserve(TaskMemoryOptions.from_spec(spec, settings), settings, warm_start=warm)
        self._factor = self.task.user_job_reserve_factor()

    def reserve(self) -> float:
        return self._factor

    def observe(self, u: float, aborted: bool, r: float) -> None:
        if aborted:
            job = JobMemoryReserve(None, r, 1.0, LIMIT, self.task.options.job_proxy_memory, 0.0)
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
        sum_r = slack = retry = 0.0
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
        "jobs": int(a["jobs"]),
    }


def policies() -> dict[str, Callable[[], Callable[[Operation], object]]]:
    """Each entry builds a fresh factory (so stores start empty per run)."""

    def yt(**kw):
        settings = MemoryDigestSettings(**{k: v for k, v in kw.items() if k != "default"})
        return lambda: lambda op: YtDigest(op, settings, default=kw.get("default", 0.5))

    def improved(quantile: float = 0.95):
        settings = MemoryDigestSettings(
            overdraft_sample_variant="docs", user_job_memory_reserve_quantile=quantile
        )
        store = MemoryDigestWarmStartStore(capacity=100_000, max_carried_samples=IMPROVED_CARRIED)
        return lambda op: YtDigest(op, settings, default=IMPROVED_DEFAULT, store=store)

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
        "pooltree_improved": improved,
        "pooltree_improved_p99": lambda: improved(0.99),
    }


IMPROVED_CARRIED = 50  # carried samples: enough to size the first wave, few enough to be outvoted quickly
IMPROVED_DEFAULT = 1.0  # a task never seen before starts at its full limit (cautious first wave)


class PerJobOracle:
    """r = min(u, 1) for the job about to start: needs the trace, so it peeks at the next job."""

    def __init__(self, op: Operation):
        self.next = iter(op.u.tolist())

    def reserve(self) -> float:
        return min(next(self.next), 1.0)

    def observe(self, u: float, aborted: bool, r: float) -> None:
        pass


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


def run(operations: int, seed: int, p_abort: float, repeat: float, only: list[str] | None) -> dict:
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
    return {
        "operations": operations,
        "jobs": int(sum(len(op.u) for op in ops)),
        "first_wave_share": round(first_wave, 4),
        "policies": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--extra-seed", type=int, default=11, help="second seed reported alongside (-1: none)"
    )
    parser.add_argument("--p-abort", type=float, default=1.0)
    parser.add_argument(
        "--repeat", type=float, default=0.5, help="share of operations re-running an earlier task"
    )
    parser.add_argument("--quick", action="store_true", help="300 operations, one seed, fewer timing repeats")
    parser.add_argument("--only", nargs="*", help="policy names to run")
    args = parser.parse_args()
    if args.operations < 1 or not 0 <= args.p_abort <= 1 or not 0 <= args.repeat < 1:
        parser.error("--operations must be >= 1, --p-abort in [0, 1], --repeat in [0, 1)")
    operations = 300 if args.quick else args.operations
    seeds = [args.seed] if args.quick or args.extra_seed < 0 else [args.seed, args.extra_seed]
    started = time.perf_counter()
    out = {
        "name": "memory_reserve",
        "parameters": {
            "operations": operations,
            "seeds": seeds,
            "p_abort": args.p_abort,
            "repeat": args.repeat,
            "improved_policy": "real TaskMemoryReserve, docs bump, default 1.0 for a task never seen, warm start "
            f"from the same task's previous operation via MemoryDigestWarmStartStore (at most {IMPROVED_CARRIED} "
            "carried samples); _p99 uses quantile 0.99",
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "digest_timings": digest_timings(3 if args.quick else 7),
        "runs": {
            f"seed{seed}_repeat{repeat}": run(operations, seed, args.p_abort, repeat, args.only)
            for seed in seeds
            for repeat in sorted({0.0, args.repeat})
        },
    }
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
