"""Regression: a seeded scenario's full event sequence equals the golden file recorded before optimising."""

import json
import os
from pathlib import Path

import pytest
from golden_trace import bench_shaped_trace, golden_trace

GOLDEN = Path(__file__).parent / "golden"


def _canonical(trace: list) -> list:
    """JSON round trip: the same representation as the file (floats by repr, inf as Infinity)."""
    return json.loads(json.dumps(trace))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeded_scenario_matches_golden_event_sequence(seed):
    trace = _canonical(golden_trace(seed, steps=60))
    path = GOLDEN / f"scheduling_trace_seed{seed}.json"
    if os.environ.get("POOLTREE_RECORD_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(trace, indent=0, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    assert len(trace) == len(expected)
    for index, (got, want) in enumerate(zip(trace, expected, strict=True)):
        assert got == want, f"trace entry {index} differs"
    kinds = {entry.get("event") for entry in trace}
    # the scenario must keep exercising the interesting paths, or the comparison proves little
    assert {"allocation_started", "allocation_preempted", "allocation_finished"} <= kinds
    reasons = {p["reason"] for entry in trace for p in entry.get("preempt", ())}
    assert {"preemption", "graceful_preemption", "resource_overcommit"} <= reasons, reasons


def test_benchmark_scenario_matches_golden_decisions():
    """The benchmark's own fill and steady phases (no event sink: the hot path) at a small scale."""
    trace = _canonical(bench_shaped_trace(nodes=120, operations=240, pools=24, starving_pools=6))
    path = GOLDEN / "bench_trace.json"
    if os.environ.get("POOLTREE_RECORD_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(trace, indent=0, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    assert len(trace) == len(expected) == 240
    for index, (got, want) in enumerate(zip(trace, expected, strict=True)):
        assert got == want, f"heartbeat {index} differs"
    assert sum(len(entry["start"]) for entry in trace[:120]) > 1000
    assert sum(len(entry["preempt"]) for entry in trace[120:]) > 50
