"""Progress reports of a run: the engine's simulated-time marks and bench/simulate.py --progress lines."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import pytest

from pooltree.sim import Simulation, parse_scenario
from tests.sim.simkit import project_document

BENCH = Path(__file__).resolve().parents[2] / "bench" / "simulate.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("simulate_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _comparable(summary: dict) -> dict:
    summary = dict(summary)
    summary.pop("engine")
    summary["global"] = {k: v for k, v in summary["global"].items() if k != "wall_time"}
    return summary


def test_progress_interval_calls_at_each_simulated_mark_and_changes_nothing():
    document = project_document(until="10m")
    calls: list[tuple[float, float, int, int]] = []
    watched = Simulation(
        parse_scenario(document, source="test"),
        progress=lambda *args: calls.append(args),
        progress_interval=60.0,
    ).run()
    plain = Simulation(parse_scenario(document, source="test")).run()
    assert _comparable(watched.summary) == _comparable(plain.summary)
    assert watched.operation_rows == plain.operation_rows
    assert watched.stats["events"] == plain.stats["events"]
    times = [now for now, _horizon, _finished, _total in calls]
    # the first event at or after each minute (fair-share updates fall on whole seconds), then the end
    for minute in range(1, 10):
        assert any(60.0 * minute <= now < 60.0 * minute + 1.0 for now in times), minute
    assert times == sorted(times)
    assert times[-1] == 600.0
    assert all(horizon == 600.0 and total == 3 for _now, horizon, _finished, total in calls)


def test_progress_without_interval_keeps_the_event_count_rhythm():
    document = project_document(until="5m")
    calls: list[float] = []
    result = Simulation(
        parse_scenario(document, source="test"), progress=lambda now, *_: calls.append(now)
    ).run()
    assert len(calls) == result.stats["events"] // 20000 + 1  # every 20,000 events and once at the end


def test_bench_progress_lines_report_each_interval(bench):
    document = bench.teams_scenario_document(20, 0.5, 40, 2, 2, 1.0, 5)
    scenario = parse_scenario(document, source="test")
    stream = io.StringIO()
    lines = bench.ProgressLines(5.0, stream=stream)
    simulation = Simulation(scenario, progress=lines, progress_interval=lines.interval)
    lines.simulation = simulation
    result = simulation.run()
    output = stream.getvalue().splitlines()
    assert len(output) == 6  # 5, 10, ..., 30 simulated minutes; the end falls on the last mark
    fields = [dict(item.split("=", 1) for item in line.split()[1:]) for line in output]
    assert [float(f["sim_h"]) for f in fields] == pytest.approx(
        [m / 60 for m in (5, 10, 15, 20, 25, 30)], abs=1e-3
    )
    completed = sum(op["completed_job_count"] for op in result.summary["operations"])
    assert int(fields[-1]["completed_jobs"]) == completed
    assert fields[-1]["finished_ops"].endswith("/40")
    running = sum(1 for op in simulation.ops if op.state == "running")
    assert int(fields[-1]["running_ops"]) == running
    assert all(float(f["rss_mib"]) > 0 and float(f["interval_wall_s_per_sim_h"]) >= 0 for f in fields)
