"""``bench/start_cost_fit.py``: the line through the runs' (starts per heartbeat, CPU per heartbeat) points, whose
intercept is a busy heartbeat's cost and slope a start's, and the jobs a run needs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))

from start_cost_fit import fit_line, fit_round, jobs_needed


def test_two_runs_give_the_heartbeat_and_the_start_costs_exactly() -> None:
    """0.3 ms a heartbeat and 0.2 a start: runs at 1.5 and 0.5 starts a heartbeat give those back."""
    a, b = fit_line([(1.5, 0.3 + 1.5 * 0.2), (0.5, 0.3 + 0.5 * 0.2)]) or (None, None)
    assert a == pytest.approx(0.3)
    assert b == pytest.approx(0.2)


def test_more_runs_give_the_least_squares_line() -> None:
    """Three points off a line: the least-squares slope and intercept (not the first two points' line)."""
    a, b = fit_line([(0.0, 1.0), (1.0, 2.0), (2.0, 4.0)]) or (None, None)
    assert b == pytest.approx(1.5)
    assert a == pytest.approx(7 / 3 - 1.5)


def test_runs_with_the_same_starts_a_heartbeat_give_no_line() -> None:
    assert fit_line([(1.0, 0.5), (1.0, 0.7)]) is None
    assert fit_line([(1.0, 0.5)]) is None


def test_a_run_needs_the_first_fill_and_the_turnover_of_its_warm_up_and_window() -> None:
    """1,000 nodes of 16 slots, jobs of 10 s, 20 s of warm-up and 10 measured: 16,000 x (1 + 30 / 10)."""
    args = argparse.Namespace(nodes=1000, node_cpu=16.0, seconds=10.0)
    assert jobs_needed(args, 10.0, 20.0) == pytest.approx(64_000)


def test_a_round_gives_each_start_its_cost_over_the_busy_heartbeat() -> None:
    """Busy heartbeats cost 0.2 ms; at 1.5 starts a heartbeat 0.5 ms (0.2 a start over it), at 0.5 starts 0.35 ms
    (0.3 a start): the line through the two turnover runs says 0.275 a heartbeat and 0.15 a start."""
    points = [
        {"starts_per_heartbeat": 1.5, "cpu_ms_per_heartbeat": 0.5},
        {"starts_per_heartbeat": 0.5, "cpu_ms_per_heartbeat": 0.35},
    ]
    figures = fit_round(points, {"cpu_ms_per_heartbeat": 0.2})
    assert figures["ms_per_start_over_busy"] == [pytest.approx(0.2), pytest.approx(0.3)]
    assert figures["a_ms_per_heartbeat"] == pytest.approx(0.275)
    assert figures["b_ms_per_start"] == pytest.approx(0.15)
    assert figures["busy_ms_per_heartbeat"] == 0.2
    assert fit_round(points, None)["ms_per_start_over_busy"] == [None, None]
