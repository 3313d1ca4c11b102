"""A fair-share update run in parts (`SchedulerCore.update_fair_share(in_parts=True)`, then `finish_update` one
operation's preemptible lists at a time, as the live service runs it between short holds of its lock) decides
exactly as the update run whole, when no heartbeat comes between the parts.

Each example runs a busy simulation (guarantees, graceful preemption, a node failure) twice and compares, after
every update, every element's published state and every operation's preemptible lists (`_state` of the
incremental publish's test), and at the end the simulation's results (summary, operation rows, preemptions).
"""

from __future__ import annotations

import copy
from typing import Any

from pooltree.sim import Simulation, parse_scenario
from pooltree.strategy.core import SchedulerCore
from tests.sim.test_publish_changes import BUSY_SEEDS, TWO_SIMULATIONS, _state
from tests.sim.test_sim_engine import mixed_document


def _run(document: dict[str, Any], monkeypatch: Any, in_parts: bool) -> tuple[list[Any], list[Any], int]:
    """The states after every update, the simulation's results, and how many updates needed several parts."""
    states: list[Any] = []
    cut = [0]
    update = SchedulerCore.update_fair_share

    def updated(self: SchedulerCore, now: float) -> Any:
        if not in_parts:
            result = update(self, now)
        else:
            result = update(self, now, in_parts=True)
            parts = 1
            while not self.finish_update(1):
                parts += 1
            cut[0] += parts > 2
        states.append(_state(self.strategy))
        return result

    return states, run_patched(document, monkeypatch, updated), cut[0]


def run_patched(document: dict[str, Any], monkeypatch: Any, updated: Any) -> list[Any]:
    """The simulation of ``document`` with ``updated`` as ``SchedulerCore.update_fair_share``: its summary (but
    the wall time), operation rows and preemptions (also `test_update_apart.py`)."""
    with monkeypatch.context() as patch:
        patch.setattr(SchedulerCore, "update_fair_share", updated)
        result = Simulation(parse_scenario(copy.deepcopy(document), source="test")).run()
    summary = copy.deepcopy(result.summary)
    del summary["global"]["wall_time"]  # how long the run took
    return [summary, result.operation_rows, result.preemptions_by_reason]


@TWO_SIMULATIONS
@BUSY_SEEDS
def test_an_update_in_parts_decides_as_the_whole_update(monkeypatch, seed, jitter):
    document = mixed_document(until="8m", seed=seed)
    document["scheduler"]["node_heartbeat_jitter"] = jitter
    whole, whole_results, _ = _run(document, monkeypatch, in_parts=False)
    parts, parts_results, cut = _run(document, monkeypatch, in_parts=True)
    assert cut > 0  # some updates left several operations' lists to configure
    assert len(whole) == len(parts)
    for number, (mine, theirs) in enumerate(zip(parts, whole, strict=True)):
        assert mine == theirs, f"update {number} differs"
    assert sum(whole_results[2].values()) > 0  # preemptions read the lists
    assert parts_results == whole_results
