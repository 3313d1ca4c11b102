"""A fair-share update computed apart (`SchedulerCore.read_update`, then `update_steps.compute_update` on another
thread, then `SchedulerCore.publish_update`, as the live service runs it with the computation outside its lock)
decides exactly as the update run whole, when nothing changes the tree between the steps; and a publish whose
tree changed meanwhile is refused, leaving the core to read again, which then decides as a plain update would.

Each example runs a busy simulation (guarantees, graceful preemption, a FIFO pool over its schedulable element
limit, guarantee priority, the absolute starvation tolerance, a node failure) twice and compares, after every update,
every element's published state and every operation's preemptible lists, and at the end the simulation's results.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from pooltree.sim import Simulation, parse_scenario
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.update_steps import compute_update
from tests.sim.test_publish_changes import BUSY_SEEDS, TWO_SIMULATIONS, _state
from tests.sim.test_sim_engine import mixed_document
from tests.sim.test_update_in_parts import run_patched

_COMPUTE = ThreadPoolExecutor(1, thread_name_prefix="apart")


def _document(seed: int, jitter: str) -> dict[str, Any]:
    document = mixed_document(until="8m", seed=seed)
    document["scheduler"]["node_heartbeat_jitter"] = jitter
    config = document["pool_trees"]["physical"]["config"]
    config["enable_guarantee_priority_scheduling"] = True
    config["enable_absolute_fair_share_starvation_tolerance"] = True
    config["max_schedulable_element_count_in_fifo_pool"] = 1
    return document


def _run(document: dict[str, Any], monkeypatch: Any, apart: bool) -> tuple[list[Any], list[Any]]:
    """The states after every update and the simulation's results."""
    states: list[Any] = []
    update = SchedulerCore.update_fair_share

    def updated(self: SchedulerCore, now: float, *, in_parts: bool = False) -> Any:
        if not apart:
            result = update(self, now, in_parts=in_parts)
        else:
            read = self.read_update(now)
            computed = _COMPUTE.submit(compute_update, read, self.phase_times).result()
            assert self.publish_update(computed, in_parts=in_parts)
            result = computed.result
        states.append(_state(self.strategy))
        return result

    return states, run_patched(document, monkeypatch, updated)


@TWO_SIMULATIONS
@BUSY_SEEDS
def test_an_update_computed_apart_decides_as_the_whole_update(monkeypatch, seed, jitter):
    document = _document(seed, jitter)
    whole, whole_results = _run(document, monkeypatch, apart=False)
    apart, apart_results = _run(document, monkeypatch, apart=True)
    assert len(whole) == len(apart) > 0
    for number, (mine, theirs) in enumerate(zip(apart, whole, strict=True)):
        assert mine == theirs, f"update {number} differs"
    assert sum(whole_results[2].values()) > 0  # preemptions read the lists
    assert apart_results == whole_results


def _core_after(document: dict[str, Any], monkeypatch: Any, until: float) -> SchedulerCore:
    """The core of the simulation's tree after its updates up to ``until`` seconds (the simulation stopped there)."""
    cores: list[SchedulerCore] = []
    update = SchedulerCore.update_fair_share

    def updated(self: SchedulerCore, now: float, *, in_parts: bool = False) -> Any:
        if not cores:
            cores.append(self)
        return update(self, now, in_parts=in_parts)

    document = copy.deepcopy(document)
    document["until"] = f"{int(until)}s"
    with monkeypatch.context() as patch:
        patch.setattr(SchedulerCore, "update_fair_share", updated)
        Simulation(parse_scenario(document, source="test")).run()
    return cores[0]


@pytest.mark.parametrize("change", ["operation", "node", "another_update"])
def test_a_publish_whose_tree_changed_meanwhile_is_refused(monkeypatch, change):
    document = _document(7, "200ms")
    core = _core_after(document, monkeypatch, 120)
    twin = _core_after(document, monkeypatch, 120)  # the same core, updated plainly after the same change
    assert _state(core.strategy) == _state(twin.strategy)
    now = 121.0

    def make_change(target: SchedulerCore) -> None:
        if change == "operation":  # an operation leaves the tree (its revision moves)
            operation_id = next(iter(target.controllers))
            target.unregister_operation(operation_id, now)
        elif change == "node":  # a node joins (the total resources change)
            target.add_node("joined", next(iter(target.node_limits.values())).copy())
        else:  # a stale tree's publish read meanwhile
            target.update_fair_share(now)

    read = core.read_update(now)
    computed = _COMPUTE.submit(compute_update, read, core.phase_times).result()
    make_change(core)
    assert not core.update_is_current(read)
    published = _state(core.strategy)
    assert not core.publish_update(computed)
    assert _state(core.strategy) == published  # nothing of the refused update was published
    if change != "another_update":  # the core holds the read's failed state: the next build walks the tree
        assert core.kept.build is None
    core.update_fair_share(now)  # read again: decides as the plain update after the same change
    make_change(twin)
    twin.update_fair_share(now)
    assert _state(core.strategy) == _state(twin.strategy)


def test_a_change_of_usage_alone_does_not_refuse_the_publish(monkeypatch):
    """What heartbeats change without moving the tree's revision (allocations started or finished) leaves the
    computed update current: it is published, on the usage it read."""
    core = _core_after(_document(7, "200ms"), monkeypatch, 120)
    read = core.read_update(121.0)
    computed = compute_update(read, core.phase_times)
    allocation = next(iter(core.strategy.state.allocations.values()))
    assert core.report_usage(allocation.id, allocation.resources * 2)
    assert core.update_is_current(read)
    assert core.publish_update(computed)
    assert core.last_result is computed.result
