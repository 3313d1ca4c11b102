"""Run times the forecast assumes: early in a workload the jobs that completed are the short ones, so their own
median and spread are both too small; the running jobs (censored) bring both back."""

from __future__ import annotations

import math
import random
import statistics

from pooltree.config.pool_trees import parse_pool_trees
from pooltree.forecast.durations import (
    DurationFit,
    DurationSettings,
    fit,
    partial_pooling,
)
from pooltree.forecast.fork import duration_fits, seed_distributions
from pooltree.forecast.state import ClusterState, NodeState, OperationState, TaskState
from pooltree.resources import vector

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
    pooled, _ = partial_pooling([(found, pool) for found in alike])
    spread_own = statistics.pstdev(math.log(found.median) for found in alike)
    spread_pooled = statistics.pstdev(math.log(found.median) for found in pooled)
    assert spread_pooled < 0.5 * spread_own, (spread_own, spread_pooled)
    assert all(found.count == 3 and found.source == "operation" for found in pooled)
    assert all(found.doubt is not None and found.doubt < found.sigma / math.sqrt(3) for found in pooled)
    differ = [own(300.0 * math.exp(rng.gauss(0, 1)), 200) for _ in range(30)]
    kept, _ = partial_pooling([(found, pool) for found in differ])
    for before, after in zip(differ, kept, strict=True):
        assert (
            abs(math.log(after.median / before.median)) < 0.05 * abs(math.log(before.median / 300.0)) + 0.01
        )


def pools_state(rng: random.Random, observed: dict[str, int], medians: dict[str, float]) -> ClusterState:
    """Pools with ``observed[pool]`` completed jobs of LN(``medians[pool]``, 0.6) each and two queued operations
    each (no job of their own yet)."""
    trees = parse_pool_trees({"physical": {"pools": {name: {} for name in observed}}})
    job = vector(user_slots=1, cpu=1, memory=2**30)
    operations = tuple(
        OperationState(
            f"{pool}-{k}", "u", "map", {"pool": pool}, "physical", pool, 0.0, (TaskState("map", job, 10),)
        )
        for pool in observed
        for k in range(2)
    )
    durations = {
        pool: tuple(medians[pool] * math.exp(0.6 * rng.gauss(0.0, 1.0)) for _ in range(count))
        for pool, count in observed.items()
    }
    nodes = (NodeState("n", vector(user_slots=16, cpu=16, memory=64 * 2**30)),)
    return ClusterState(1000.0, trees, "physical", nodes, operations, pool_durations=durations)


def test_pools_alike_lean_on_the_cluster_and_a_pool_seen_little_is_not_alone() -> None:
    """Twenty pools whose jobs all run LN(300 s, 0.6): a pool with 6 completed jobs is fitted near the cluster's
    300 s, not to its own 6 jobs (its own fit alone strays by ~25%); a pool with no completed job gets the
    cluster's fit, not the prior's 600 s."""
    strays = []
    for seed in range(6):
        rng = random.Random(seed)
        observed = {f"p{i}": 256 for i in range(18)} | {"few": 6, "none": 0}
        state = pools_state(rng, observed, dict.fromkeys(observed, 300.0))
        fits = duration_fits(state, DurationSettings())
        alone = fit(state.pool_durations["few"], "pool", DurationSettings())
        strays.append(
            (abs(math.log(fits[("few-0", "map")].median / 300.0)), abs(math.log(alone.median / 300.0)))
        )
        empty = fits[("none-0", "map")]
        assert empty.source == "cluster" and abs(math.log(empty.median / 300.0)) < 0.1, empty
    pooled, alone = (statistics.mean(column) for column in zip(*strays, strict=True))
    assert pooled < 0.5 * alone, strays


def test_pools_that_differ_keep_their_own_fits() -> None:
    rng = random.Random(3)
    observed = {f"p{i}": 256 for i in range(12)}
    medians = {pool: 300.0 * math.exp(rng.gauss(0.0, 1.0)) for pool in observed}
    fits = duration_fits(pools_state(rng, observed, medians), DurationSettings())
    for pool, median in medians.items():
        assert abs(math.log(fits[(f"{pool}-0", "map")].median / median)) < 0.1


def test_a_seed_draws_one_median_for_a_pool_and_its_queued_operations_share_it() -> None:
    """The uncertainty of a pool's fit is common to its queued operations: in one seed both draw the same median
    (a chain of them is then longer or shorter by the sum); other pools and other seeds draw their own."""
    observed = {"a": 4, "b": 4, "c": 256}
    state = pools_state(random.Random(1), observed, dict.fromkeys(observed, 300.0))
    fits = duration_fits(state, DurationSettings())
    medians = []
    for seed in range(40):
        drawn = seed_distributions(state, seed, fits)
        assert drawn[("a-0", "map")].a == drawn[("a-1", "map")].a
        assert drawn[("a-0", "map")].a != drawn[("b-0", "map")].a
        medians.append(drawn[("a-0", "map")].a)
    spread = statistics.pstdev(math.log(value) for value in medians)
    doubt = fits[("a-0", "map")].total_doubt()
    assert 0.5 * doubt < spread < 1.6 * doubt, (spread, doubt)
