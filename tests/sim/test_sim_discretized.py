"""Discretized fair share in the simulator: the same core as the live service (``SchedulerCore``), with each
operation's per-job vector from its controller. YTsaurus's integration case: one node of 3 cpu, two operations of
three 1-cpu jobs in one pool get one job each (1/3), not 0.5, and every update's shares are whole jobs."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pooltree.sim import Simulation, parse_scenario
from pooltree.strategy.core import SchedulerCore

DOCUMENT: dict[str, Any] = {
    "seed": 1,
    "until": "2m",
    "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
    "cluster": {
        "nodes": [
            {"address": "n", "count": 1, "resource_limits": {"user_slots": 20, "cpu": 3, "memory": "10Gi"}}
        ]
    },
    "pool_trees": {"physical": {"config": {}, "pools": {"pool": {}}}},
    "operations": [
        {
            "id": name,
            "submit_time": 0,
            "spec": {"pool": "pool"},
            "tasks": [
                {"job_count": 3, "resources": {"cpu": 1, "memory": "1Gi", "user_slots": 1}, "duration": "10m"}
            ],
        }
        for name in ("op1", "op2")
    ],
}


def _updates(
    monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]
) -> list[tuple[dict[str, float], frozenset]]:
    """Every fair-share update's operations' cpu fair shares and staircase operations, in order."""
    seen: list[tuple[dict[str, float], frozenset]] = []
    original = SchedulerCore.update_fair_share

    def update_fair_share(core: SchedulerCore, now: float) -> Any:
        result = original(core, now)
        shares = {
            op: float(result.elements[op].fair_share[1]) for op in ("op1", "op2") if op in result.elements
        }
        seen.append((shares, result.discretized_fair_share_active))
        return result

    monkeypatch.setattr(SchedulerCore, "update_fair_share", update_fair_share)
    document = copy.deepcopy(DOCUMENT)
    document["pool_trees"]["physical"]["config"] = config
    summary = Simulation(parse_scenario(document, source="test")).run()
    assert summary is not None
    return seen


def test_simulated_operations_get_whole_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    updates = _updates(monkeypatch, {"enable_discretized_fair_share": True})
    both = [(shares, active) for shares, active in updates if len(shares) == 2]
    assert both
    first_shares, first_active = both[0]
    assert first_shares == pytest.approx({"op1": 1 / 3, "op2": 1 / 3}, abs=1e-12)
    assert first_active == {"op1", "op2"}
    for shares, _ in both:
        for share in shares.values():
            assert share * 3 == pytest.approx(round(share * 3), abs=1e-9)


def test_without_the_option_shares_are_continuous(monkeypatch: pytest.MonkeyPatch) -> None:
    updates = _updates(monkeypatch, {})
    both = [shares for shares, active in updates if len(shares) == 2 and not active]
    assert both[0] == pytest.approx({"op1": 0.5, "op2": 0.5}, abs=1e-12)
