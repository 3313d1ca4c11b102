"""The memory-reserve benchmark's model, frontiers and improved policy on a small trace (fast)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "memory_reserve.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("memory_reserve_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trace(bench):
    return bench.generate_trace(60, 3, 0.5)


def test_trace_is_deterministic_and_marks_recurring_tasks(bench, trace) -> None:
    ops, draws = trace
    again, draws_again = bench.generate_trace(60, 3, 0.5)
    assert all(np.array_equal(a.u, b.u) for a, b in zip(ops, again, strict=True))
    assert np.array_equal(draws, draws_again)
    seen: set[int] = set()
    for op in ops:
        assert op.first_of_task == (op.key not in seen)
        seen.add(op.key)
        assert 1 <= op.c <= len(op.u) and op.shape["sigma"] > 0
    assert any(not op.first_of_task for op in ops)


def test_frontiers_are_monotone_and_bound_the_fixed_quantile(bench, trace) -> None:
    ops, _ = trace
    result = bench.frontiers(ops)
    for name in ("oracle_quantile", "oracle_distribution", "oracle_distribution_cold"):
        points = result[name]
        reserves = [p[1] for p in points]
        overdrafts = [p[2] for p in points]
        # a larger quantile / overdraft cost never reserves less nor overdrafts more
        assert reserves == sorted(reserves) and overdrafts == sorted(overdrafts, reverse=True)
        assert set(result["summary"][name]) == {
            "reserve_used_at_2pct_overdraft",
            "overdraft_at_reserve_used_1.25",
            "reaches_goal",
        }
    assert result["oracle_quantile"][-1][2] == 0.0  # q = 1: nobody overdrafts
    # with a blind first wave for new tasks the best reachable reserve at 2 % is no better
    summary = result["summary"]
    assert (
        summary["oracle_distribution_cold"]["reserve_used_at_2pct_overdraft"]
        >= summary["oracle_distribution"]["reserve_used_at_2pct_overdraft"] - 1e-9
    )


def test_simulated_metrics_are_consistent(bench, trace) -> None:
    ops, draws = trace
    policies = bench.policies()
    fixed = bench.simulate(ops, draws, policies["fixed_user_limit"](), 1.0)["all"]
    improved = bench.simulate(ops, draws, policies["pooltree_improved"](), 1.0)["all"]
    per_job = bench.simulate(ops, draws, bench.PerJobOracle, 1.0)["all"]
    assert fixed["overdraft"] == 0 and fixed["aborted"] == 0
    assert per_job["overdraft"] == 0 and per_job["reserve/used"] <= 1.0
    assert improved["reserve/used"] < fixed["reserve/used"]
    assert 0 < improved["overdraft"] < 0.2
    assert improved["aborted"] == improved["overdraft"]  # p_abort = 1
    assert improved["over_limit"] == fixed["over_limit"] == per_job["over_limit"]
    assert improved["reserve/used_with_retries"] == pytest.approx(
        improved["reserve/used"] - improved["retry_cost"] + improved["retry_reserve_limit"], abs=2e-3
    )
    half = bench.simulate(ops, draws, policies["pooltree_improved"](), 0.0)["all"]
    assert half["aborted"] == 0 and half["retry_cost"] == 0
    assert math.isfinite(half["reserve/used"])
