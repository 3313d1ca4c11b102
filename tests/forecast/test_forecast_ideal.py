"""The back-test's ideal forecast (`bench/forecast_ideal.py`): its normal quantiles, its running jobs' remaining
times given their age, and its pools' queues."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from pooltree.forecast.durations import remaining
from pooltree.forecast.state import ClusterState, OperationState, RunningJob, TaskState
from pooltree.resources import vector
from pooltree.sim.scenario import Distribution

IDEAL = Path(__file__).resolve().parents[2] / "bench" / "forecast_ideal.py"


@pytest.fixture(scope="module")
def ideal() -> Any:
    spec = importlib.util.spec_from_file_location("forecast_ideal_bench", IDEAL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_normal_quantiles_match_the_exact_ones(ideal: Any) -> None:
    points = np.array([1e-12, 1e-6, 0.001, 0.02, 0.1, 0.5, 0.9, 0.98, 0.999999])
    found = ideal.normal_quantile(points)
    exact = [NormalDist().inv_cdf(float(p)) for p in points]
    assert np.allclose(found, exact, rtol=1e-8, atol=1e-8)


def test_remaining_times_are_drawn_given_the_jobs_age(ideal: Any) -> None:
    """An old job of LN(336.8 s, 0.6) (1,792 s, past its 99.7th percentile): the ideal's draws and the forecast's
    own `durations.remaining` agree on p10 / p50 / p90 within sampling error."""
    distribution = Distribution("lognormal", 336.8, 0.6)
    drawn = ideal.remaining_draws(distribution, [1792.0], 20_000, np.random.default_rng(1))[:, 0]
    rng = random.Random(1)
    forecast = sorted(remaining(distribution, 1792.0, rng) for _ in range(20_000))
    for q in (0.1, 0.5, 0.9):
        a = float(np.quantile(drawn, q))
        b = forecast[int(q * (len(forecast) - 1))]
        assert math.isclose(a, b, rel_tol=0.08), (q, a, b)


def test_a_queued_operation_starts_when_its_pool_runs_fewer_than_its_limit(ideal: Any) -> None:
    """A pool of limit 1: the running operation's one job (fixed 100 s, run 40 s) ends in 60 s, the first queued
    one starts then and runs its 3 jobs of 30 s, the second starts 30 s after it."""
    job = vector(user_slots=1, cpu=1)
    now = 1000.0

    def op(name: str, state: str, task: TaskState) -> OperationState:
        return OperationState(name, "u", "vanilla", {"pool": "p"}, "physical", "p", 0.0, (task,), state=state)

    running = op("run", "running", TaskState("main", job, 0, (RunningJob("n", now - 40.0),)))
    first = op("first", "pending", TaskState("main", job, 3))
    second = op("second", "pending", TaskState("main", job, 1))
    state = ClusterState(now, {}, "physical", (), (running, first, second))
    truth = {
        ("run", "main"): Distribution("fixed", 100.0),
        ("first", "main"): Distribution("fixed", 30.0),
        ("second", "main"): Distribution("fixed", 30.0),
    }
    starts = ideal.ideal_starts(state, truth, 1, 8, 0)
    assert np.allclose(starts["first"], 60.0) and np.allclose(starts["second"], 90.0)
    assert ideal.ideal_range(starts["second"], now, 2.0, 3600.0) == {
        "p10": 1088.0,
        "p50": 1090.0,
        "p90": 1092.0,
    }
