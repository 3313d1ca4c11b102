"""A forecast under a CPU budget covers as far as its runs got, and an operation with no job left to start
finishes when its running jobs end (the same time a longer run simulates)."""

from __future__ import annotations

import numpy as np

from pooltree.forecast.run import ForecastSettings, forecast
from pooltree.forecast.state import ClusterState, NodeState, OperationState, RunningJob, TaskState
from pooltree.resources import vector
from tests.forecast.test_forecast_fork import project_state

JOB = vector(user_slots=1, cpu=1, memory=2 * 2**30)


def draining_state() -> ClusterState:
    """``tail-1``'s ten jobs all run (none pending); ``queued-1`` waits for the whole cluster."""
    project = project_state()
    nodes = (NodeState("node-0", np.array(vector(user_slots=10, cpu=10, memory=64 * 2**30))),)
    running = tuple(RunningJob("node-0", 100.0 + 10 * i) for i in range(10))
    tail = OperationState(
        "tail-1",
        "bob",
        "vanilla",
        {"pool": "project-batch"},
        "physical",
        "project-batch",
        0.0,
        (TaskState("main", JOB, 0, running, 40, durations=(900.0, 1000.0, 1100.0)),),
        first_job_time=100.0,
    )
    queued = OperationState(
        "queued-1",
        "bob",
        "vanilla",
        {"pool": "project-batch"},
        "physical",
        "project-batch",
        500.0,
        (TaskState("main", vector(user_slots=10, cpu=10, memory=2 * 2**30), 1),),
    )
    return ClusterState(620.0, project.pool_trees, "physical", nodes, (tail, queued))


def test_a_spent_budget_shortens_the_horizon_for_every_run():
    full = forecast(project_state(), ForecastSettings(seeds=2, horizon=900.0))
    assert full.horizon == 900.0 and full.operations["adhoc-1"].start["p50"] is not None
    short = forecast(project_state(), ForecastSettings(seeds=2, horizon=900.0, cpu_budget=1e-6))
    # each run stops at its first check (one fair-share period in): adhoc-1 starts after that in every run
    assert short.horizon < 5.0
    assert short.operations["adhoc-1"].start == {"p10": None, "p50": None, "p90": None}


def test_finish_from_running_jobs_equals_the_simulated_finish():
    """Past a short horizon, ``tail-1`` finishes when its last drawn job end comes: the finish a run of the
    whole horizon simulates with the same seed."""
    state = draining_state()
    short = forecast(state, ForecastSettings(seeds=3, horizon=10.0))
    full = forecast(state, ForecastSettings(seeds=3, horizon=20_000.0))
    tail = short.operations["tail-1"].finish
    assert tail["p50"] is not None and tail["p50"] > state.now + 10.0
    assert tail == full.operations["tail-1"].finish
    # queued-1 needs the whole node: it starts after tail-1, past the short horizon (unknown), within the long
    assert short.operations["queued-1"].start["p50"] is None
    assert full.operations["queued-1"].start["p50"] is not None
