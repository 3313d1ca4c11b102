"""Submissions to come: drawn per seed from what the cluster saw submitted, they take capacity the waiting
operations were given, in the simulator and in the capacity hand-over alike; the forecast states the assumption
and never reports a drawn operation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pooltree.config.pool_trees import parse_pool_trees
from pooltree.errors import ConfigError
from pooltree.forecast.arrivals import ArrivalSettings, arrival_model, draw_arrivals, is_arrival
from pooltree.forecast.durations import DurationSettings
from pooltree.forecast.run import ForecastSettings, forecast
from pooltree.forecast.state import (
    ClusterState,
    NodeState,
    OperationState,
    RunningJob,
    Submission,
    SubmittedTask,
    TaskState,
)
from pooltree.resources import vector

JOB = vector(user_slots=1, cpu=1, memory=2 * 2**30)
NOW = 7200.0


def busy_state(*, history: bool) -> ClusterState:
    """One node of 10 slots. ``mine`` (pool ``a``, which runs one operation at a time) holds every slot with 60
    jobs of ~100 s left to start; ``queued`` waits behind it. Pool ``b`` saw 12 submissions of 10 jobs in the
    last hour (``history``): if they keep coming, they take half the node and ``mine`` ends later."""
    trees = parse_pool_trees({"physical": {"pools": {"a": {"max_running_operation_count": 1}, "b": {}}}})
    nodes = (NodeState("node-0", np.array(vector(user_slots=10, cpu=10, memory=64 * 2**30))),)
    running = tuple(RunningJob("node-0", NOW - 10.0 * i) for i in range(10))
    mine = OperationState(
        "mine",
        "alice",
        "vanilla",
        {"pool": "a"},
        "physical",
        "a",
        NOW - 600.0,
        (TaskState("main", JOB, 60, running, 40, durations=(100.0,) * 40),),
        first_job_time=NOW - 600.0,
    )
    queued = OperationState(
        "queued",
        "alice",
        "vanilla",
        {"pool": "a"},
        "physical",
        "a",
        NOW - 60.0,
        (TaskState("main", JOB, 5),),
        state="pending",
    )
    seen = tuple(
        Submission(
            NOW - 3600.0 + 300.0 * i, "physical", "b", "bob", "vanilla", (SubmittedTask("main", JOB, 10),)
        )
        for i in range(12)
    )
    return ClusterState(
        NOW,
        trees,
        "physical",
        nodes,
        (mine, queued),
        pool_durations={"a": (100.0,) * 40, "b": (100.0,) * 40},
        submissions=seen if history else (),
        submissions_since=0.0 if history else None,
    )


@pytest.mark.parametrize("budget", [None, 60.0], ids=["simulated", "handed-over"])
def test_submissions_to_come_take_capacity_from_the_queue(budget: float | None) -> None:
    exact = DurationSettings(min_sigma=0.0)
    settings = ForecastSettings(
        seeds=3,
        horizon=4000.0,
        durations=exact,
        cpu_budget=budget,
        simulation_share=1e-7 if budget else 0.6,
        arrivals=ArrivalSettings(enabled=True),
    )
    alone = forecast(busy_state(history=False), settings)
    coming = forecast(busy_state(history=True), settings)
    if budget is not None:
        assert coming.simulated is not None and coming.simulated < 5.0  # the hand-over drew the arrivals
    assert alone.arrivals == {}
    assert coming.arrivals["pools"] == 1 and coming.arrivals["operations_per_hour"] == pytest.approx(12.0)
    # left alone, mine's 70 jobs of 100 s on 10 slots take ~700 s; with pool b's arrivals sharing the node longer
    before = alone.operations["queued"].start["p50"]
    after = coming.operations["queued"].start["p50"]
    assert before is not None and after is not None
    assert before < NOW + 800.0
    # the simulator gives pool b its fair share (half the node); the hand-over gives an arrival its first job,
    # then leaves freed capacity with the operation whose job ended (it does not rebalance fair shares)
    assert after > before + (100.0 if budget is None else 20.0)
    assert set(coming.operations) == {"mine", "queued"}
    assert not any(
        is_arrival(item["operation_id"]) for f in coming.operations.values() for item in f.preempts
    )


def test_the_model_reads_the_window_and_each_seed_draws_its_own_future() -> None:
    state = busy_state(history=True)
    settings = ArrivalSettings(enabled=True, window=1800.0)
    model = arrival_model(state.submissions, state.submissions_since, NOW, settings)
    assert model.observed == 1800.0 and len(model.pools[("physical", "b")]) == 6
    assert model.rate_per_hour() == pytest.approx(12.0)
    # a history younger than the window measures over what it saw; younger than min_history: nothing
    young = arrival_model(state.submissions, NOW - 900.0, NOW, settings)
    assert young.observed == 900.0 and len(young.pools[("physical", "b")]) == 3
    assert arrival_model(state.submissions, NOW - 30.0, NOW, settings).pools == {}
    assert arrival_model(state.submissions, None, NOW, settings).pools == {}
    assert arrival_model(state.submissions, 0.0, NOW, replace(settings, enabled=False)).pools == {}

    def draw(seed: int) -> list[tuple[str, float, int]]:
        drawn = draw_arrivals(model, seed, 36_000.0, state.pool_durations, DurationSettings(), {})
        return [(op.id, op.submit_time, op.tasks[0].job_count) for op in drawn]

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)
    counts = [len(draw(seed)) for seed in range(40)]
    # 10 h at ~12 per hour: the seeds' counts spread around 120 (the rate itself is uncertain: wider than Poisson)
    assert 90 < sum(counts) / len(counts) < 150
    assert max(counts) - min(counts) > 20
    assert all(is_arrival(op_id) and at < 36_000.0 and jobs == 10 for op_id, at, jobs in draw(3))


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"forecast\.arrivals\.window"):
        ArrivalSettings(window=10.0)
    with pytest.raises(ConfigError, match=r"forecast\.arrivals\.prior_count"):
        ArrivalSettings(prior_count=-1.0)
