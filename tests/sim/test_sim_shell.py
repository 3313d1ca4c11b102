"""The simulator's own bookkeeping: plot series read per pool, beat-time replay of slept beats."""

from __future__ import annotations

import math

import numpy as np

from pooltree.sim import Simulation, parse_scenario
from pooltree.sim.beats import beat_time, beat_times
from pooltree.sim.state import PoolSeries
from tests.sim.simkit import job, project_document


def test_pool_series_builds_each_pools_points_when_read() -> None:
    block = np.arange(4 * 3 * 3, dtype=float).reshape(4, 3, 3)  # 4 samples × 3 pools × 3 ratios
    series = PoolSeries(["<Root>", "a", "b", "late"], [0.0, 1.0, 2.0, 3.0], block)
    assert list(series) == ["<Root>", "a", "b"]  # a pool added after the samples has none
    assert len(series) == 3 and "a" in series and "late" not in series and series.get("late") is None
    assert series["a"] == [(float(t), *block[t, 1, :].tolist()) for t in range(4)]
    assert series == {pool: series[pool] for pool in series}


def test_a_runs_pool_series_are_its_sampled_values() -> None:
    result = Simulation(parse_scenario(project_document(until="5m"), source="test")).run()
    series = result.pool_series["physical"]
    assert isinstance(series, PoolSeries)
    points = series["project-batch"]
    assert len(points) > 100 and all(len(point) == 4 for point in points)
    assert [t for t, *_ in points] == sorted(t for t, *_ in points)
    mean_usage = result.summary["pools"]["project-batch"]["mean_usage_ratio"]
    assert 0.0 < mean_usage <= 1.0 and any(usage > 0 for _t, _fair, usage, _demand in points)


def test_replayed_backoff_beats_follow_the_chain_of_beats_one_by_one() -> None:
    """`_catch_up` writes the last timestamp of the backoff chain once: the same as skipping beat after beat."""
    simulation = Simulation(parse_scenario(project_document(until="5m"), source="test"))
    node = simulation.nodes[3]
    core = simulation.trees[node.tree].core
    exec_node = core.strategy.nodes[node.address]
    backoff = core.config.preemptive_scheduling_backoff
    for start_last, until_k in ((None, 40), (12.3, 200), (0.0, 1), (None, 500), (3.0, 49), (400.0, 300)):
        node.k_next = 0
        exec_node.last_preemptive_scheduling_time = start_last
        simulation._catch_up(node, core, until_k)
        replayed = exec_node.last_preemptive_scheduling_time
        expected = start_last
        for k in range(until_k):
            now = simulation.beat_time(node, k)
            if expected is None or now > expected + backoff:
                expected = now
        assert replayed == expected and node.k_next == until_k
        assert expected is None or not math.isnan(expected)


def test_beat_times_in_bulk_are_the_same_doubles() -> None:
    for phase, salt, period, jitter in (
        (0.37, 2**64 - 5, 1.0, 0.1),
        (1.9, 12345, 2.5, 2.4),
        (0.2, 7, 0.3, 0.0),
    ):
        start = 987_654
        bulk = beat_times(phase, salt, period, jitter, start, start + 300).tolist()
        assert bulk == [beat_time(phase, salt, period, jitter, k) for k in range(start, start + 300)]


def test_pool_records_read_in_bulk_equal_the_per_element_read(monkeypatch) -> None:
    """`_record_pools` (kept rows, column-wise maxima) records what the per-element path records, also while an
    ephemeral pool appears and goes (new pool ids: the kept layout is re-made)."""
    from pooltree.sim.metrics import SimulationMetrics

    document = project_document(until="12m")
    document["operations"].append(
        {
            "id": "eve-1",
            "submit_time": "200s",
            "user": "eve",
            "tasks": [{"job_count": 30, "resources": job(), "duration": "2m"}],
        }
    )
    bulk = SimulationMetrics._record_pools
    original = SimulationMetrics.record
    checked: list[int] = []

    def record(self, tree, now):  # type: ignore[no-untyped-def]
        original(self, tree, now)
        matrix, present, values = tree.matrix.copy(), tree.present.copy(), dict(self._held_values(tree))
        layout = tree.record_layout
        monkeypatch.setattr(SimulationMetrics, "_record_pools", lambda *_: False)
        try:
            original(self, tree, now)  # the per-element read
        finally:
            monkeypatch.setattr(SimulationMetrics, "_record_pools", bulk)
        assert np.array_equal(tree.matrix, matrix) and np.array_equal(tree.present, present)
        assert self._held_values(tree) == values
        checked.append(len(layout[2]) if layout is not None else 0)

    monkeypatch.setattr(SimulationMetrics, "record", record)
    result = Simulation(parse_scenario(document, source="test")).run()
    assert "eve" in result.summary["pools"]
    # the pool set changed during the run (the ephemeral pool came): the layout was re-made
    assert len(checked) > 100 and sorted(set(checked)) == [5, 6], set(checked)
