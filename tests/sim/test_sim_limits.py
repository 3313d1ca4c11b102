"""`TreeScheduler.limits_violated` checks only the published elements with limits, kept per structure: on the
simulator's paths (same-structure publishes, operation-change deltas, fresh trees) it answers exactly what a scan
of every element answers, and the list it keeps is exactly the elements with limits."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pooltree.sim import Simulation, parse_scenario
from pooltree.strategy.preemption import violated_limits
from pooltree.strategy.scheduler import TreeScheduler
from tests.sim.test_sim_engine import mixed_document
from tests.strategy.golden_trace import GoldenScenario


def _scan(strategy: TreeScheduler) -> bool:
    """The check before the kept list: every published element."""
    return any(
        violated_limits(element) is not None
        for element in strategy.state.elements.values()
        if element.limits is not None
    )


class _Checked:
    """Wraps `TreeScheduler.limits_violated`: every call compared with the full scan, outcomes counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.answers: list[bool] = []
        self.delta_trees = 0
        original = TreeScheduler.limits_violated
        checked = self

        def limits_violated(strategy: TreeScheduler) -> bool:
            answer = original(strategy)
            assert answer == _scan(strategy)
            kept = strategy._limited_elements()
            expected = [element for element in strategy.state.elements.values() if element.limits is not None]
            assert sorted(map(id, kept)) == sorted(map(id, expected))
            if getattr(strategy.tree, "delta", None) is not None:
                checked.delta_trees += 1
            checked.answers.append(answer)
            return answer

        monkeypatch.setattr(TreeScheduler, "limits_violated", limits_violated)


def limited_document() -> dict[str, Any]:
    """The engine tests' busy scenario with limited pools and operations; memory peaks push prod over its limit."""
    document = copy.deepcopy(mixed_document())
    pools = document["pool_trees"]["physical"]["pools"]
    pools["prod"]["resource_limits"] = {"memory": "3Gi"}  # memory peaks above the reserves go over it
    pools["adhoc"]["resource_limits"] = {"cpu": 20}
    operations = document["operations"]
    operations[0]["spec"]["resource_limits"] = {"cpu": 10}
    for index in range(6):
        operations.append(
            {
                "id": f"limited-{index}",
                "submit_time": f"{60 + 150 * index}s",
                "spec": {"pool": "adhoc", "resource_limits": {"cpu": 1 + index % 3}},
                "tasks": [
                    {
                        "job_count": 8,
                        "resources": {"cpu": 1, "memory": "1Gi", "user_slots": 1},
                        "duration": "90s",
                    }
                ],
            }
        )
    return document


def test_limits_violated_matches_the_full_scan_through_a_simulation(monkeypatch):
    checked = _Checked(monkeypatch)
    result = Simulation(parse_scenario(limited_document(), source="test")).run()
    assert result.summary["engine"]["fair_share_updates"] > 100
    assert checked.delta_trees > 0  # operation-change trees were published and checked
    assert True in checked.answers and False in checked.answers


def test_limits_violated_matches_the_full_scan_on_fresh_trees_with_changing_limits(monkeypatch):
    checked = _Checked(monkeypatch)
    scenario = GoldenScenario(7)
    for step in range(120):
        scenario.run_step(step)
        scenario.scheduler.limits_violated()
    assert True in checked.answers and False in checked.answers
