"""A heartbeat that meets a stale tree publishes it computed without the scheduling lock
(`FairShareUpdates.publish_stale_apart`): a tree stale before the heartbeat is published before its hold, and a
tree its own reports make stale (an operation completed, a pending one activated in its slot) stops the heartbeat
after its reports (`DeferredHeartbeat`), is published apart, and the heartbeat schedules in a second hold. The
decisions are those of the whole heartbeat under one hold (what a caller holding the lock still gets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pooltree.config import parse_pool_trees
from pooltree.node import wire
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler, updates
from pooltree.server.live.jobs import DeferredHeartbeat
from pooltree.server.store import open_store
from pooltree.strategy import core as strategy_core

LIMITS = {"user_slots": 4, "cpu": 4, "memory": 16 << 30}
OPERATIONS = 6
SPEC = {"pool": "small", "tasks": {"main": {"command": "true", "job_count": 3, "cpu_limit": 1}}}


class _Node:
    """A node without processes: every job it was told to start completes by its next heartbeat."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.running: dict[str, dict[str, Any]] = {}

    def heartbeat(self, now: float) -> Any:
        finished = [
            wire.finished_job(job_id, job["operation_id"], "main", "completed", job["start_time"], now)
            for job_id, job in self.running.items()
        ]
        self.running = {}
        body = {"node_address": self.address, "resource_limits": LIMITS, "running_jobs": []}
        body["finished_jobs"] = finished
        return parse_heartbeat(body)

    def apply(self, answer: dict[str, Any], now: float, names: dict[str, tuple[str, int]]) -> list[Any]:
        """Take the answer; its decisions with job ids replaced by (operation, job index)."""
        started = []
        for spec in answer.get(wire.START, ()):
            self.running[spec["job_id"]] = {"operation_id": spec["operation_id"], "start_time": now}
            names[spec["job_id"]] = (spec["operation_id"], spec["job_index"])
            started.append(names[spec["job_id"]])
        acknowledged = sorted(names.get(job_id, ("?", -1)) for job_id in answer.get(wire.ACKNOWLEDGE, ()))
        return [self.address, sorted(started), acknowledged]


def _scheduler(tmp_path: Path, name: str) -> LiveScheduler:
    """Operations queued two at a time in pool ``small``: each one that completes activates the next."""
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / name}"))
    pools = {"small": {"max_running_operation_count": 2}}
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": pools}}), None, 0.0)
    for index in range(OPERATIONS):
        live.start_operation("vanilla", SPEC, "alice", 1.0, operation_id=f"1-2-3-{index}")
    live.update_fair_share("default", 1.0)
    return live


def _drive(live: LiveScheduler, beat: Any) -> list[Any]:
    """Two nodes heartbeat until every operation completed (bounded); every answer's decisions."""
    nodes = [_Node("n0"), _Node("n1")]
    names: dict[str, tuple[str, int]] = {}
    decisions: list[Any] = []
    now = 1.0
    for step in range(60):
        now += 0.25
        if step % 4 == 3:
            live.update_fair_share("default", now)
        for node in nodes:
            decisions.append(node.apply(beat(live, node.heartbeat(now), now), now, names))
        if not live.operations:
            break
    assert not live.operations, "the operations did not all complete"
    return decisions


def _whole(live: LiveScheduler, heartbeat: Any, now: float) -> dict[str, Any]:
    """The heartbeat in one hold: its caller holds the lock (what every heartbeat did before)."""
    with live.lock:
        return live.process_heartbeat(heartbeat, now)


def _on_thread(live: LiveScheduler, heartbeat: Any, now: float) -> dict[str, Any]:
    """As the service's heartbeat threads (and node shards' leader threads) call it."""
    return live.process_heartbeat(heartbeat, now)


def _on_loop(live: LiveScheduler, heartbeat: Any, now: float) -> dict[str, Any]:
    """As the service's event loop: ``try_process_heartbeat``, a deferred one finished as on a heartbeat thread."""
    attempt = live.try_process_heartbeat(heartbeat, now)
    if attempt is None:  # a stale tree waits: the service sends the heartbeat to a thread
        return live.process_heartbeat(heartbeat, now)
    if isinstance(attempt, DeferredHeartbeat):
        attempt = attempt.finish()
    response, ticket = attempt
    live.commits.wait(ticket)
    return response


@pytest.mark.parametrize("beat", [_on_thread, _on_loop], ids=["thread", "loop"])
def test_a_heartbeat_publishes_stale_trees_apart_with_the_same_decisions(
    tmp_path: Path, monkeypatch: Any, beat: Any
) -> None:
    computed: list[bool] = []  # per fair-share computation: whether the scheduling lock was free meanwhile
    driven: list[LiveScheduler] = []

    def recorded(original: Any) -> Any:
        def compute(*args: Any) -> Any:
            if driven:
                computed.append(driven[-1].lock._owner is None)
            return original(*args)

        return compute

    monkeypatch.setattr(updates, "compute_update", recorded(updates.compute_update))
    monkeypatch.setattr(strategy_core, "compute_update", recorded(strategy_core.compute_update))
    current = _scheduler(tmp_path, "whole.sqlite")
    driven.append(current)
    expected = _drive(current, _whole)
    whole_publishes = current.updates.fair_share_updates["default"]
    assert not all(computed)  # the heartbeats' publishes ran in their holds
    current = _scheduler(tmp_path, "apart.sqlite")
    driven.append(current)
    computed.clear()
    deferred: list[DeferredHeartbeat] = []
    finish = DeferredHeartbeat.finish
    monkeypatch.setattr(DeferredHeartbeat, "finish", lambda self: deferred.append(self) or finish(self))
    assert _drive(current, beat) == expected
    # two operations completing in one heartbeat are published once: the whole heartbeat published again,
    # after its first publish had finished the second operation, from the same state at the same time
    assert OPERATIONS // 2 < current.updates.fair_share_updates["default"] <= whole_publishes
    assert computed and all(computed)  # every publish computed without the lock
    assert deferred  # heartbeats whose own reports made the tree stale
    assert not current.updates.stale_trees and not current.updates.computing


def test_a_node_swept_between_the_two_holds_is_answered_without_a_pass(tmp_path: Path) -> None:
    live = _scheduler(tmp_path, "db.sqlite")
    node = _Node("n0")
    names: dict[str, tuple[str, int]] = {}
    now = 1.25
    node.apply(live.process_heartbeat(node.heartbeat(now), now), now, names)
    while True:  # until a heartbeat's reports complete an operation (two run at once, three jobs each)
        now += 0.25
        heartbeat = node.heartbeat(now)
        attempt = live.try_process_heartbeat(heartbeat, now)
        assert attempt is not None and now < 20.0
        if isinstance(attempt, DeferredHeartbeat):
            break
        node.apply(attempt[0], now, names)
    assert live.updates.stale_trees  # left to the heartbeat's publish apart
    del live.nodes["n0"]  # as the sweep would, between the holds
    response, ticket = attempt.finish()
    live.commits.wait(ticket)
    assert not response.get(wire.START)
    assert sorted(response[wire.ACKNOWLEDGE]) == sorted(job.job_id for job in heartbeat.finished)
    assert not live.updates.stale_trees  # published all the same


def test_then_runs_with_the_answer_at_the_end_of_the_hold_that_made_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """``process_heartbeat_unwaited``'s ``then`` (the node shards' proof of the node's next heartbeat) is called
    once per heartbeat with its answer, in the caller's hold of the lock after the state generation settled; for
    a heartbeat deferred by a stale tree, at the end of its second hold. The decisions are the whole heartbeat's."""
    expected = _drive(_scheduler(tmp_path, "whole.sqlite"), _whole)
    deferred: list[DeferredHeartbeat] = []
    finish = DeferredHeartbeat.finish
    monkeypatch.setattr(DeferredHeartbeat, "finish", lambda self: deferred.append(self) or finish(self))
    calls: list[tuple[dict[str, Any], bool, int]] = []

    def beat(live: LiveScheduler, heartbeat: Any, now: float) -> dict[str, Any]:
        def then(answer: dict[str, Any]) -> None:
            calls.append((answer, live.lock.held, live.generation.value))

        response, ticket = live.process_heartbeat_unwaited(heartbeat, now, then=then)
        assert [(answer is response, held, value) for answer, held, value in calls] == [
            (True, True, live.generation.value)
        ]
        calls.clear()
        live.commits.wait(ticket)
        return response

    assert _drive(_scheduler(tmp_path, "then.sqlite"), beat) == expected
    assert deferred  # heartbeats whose own reports made the tree stale
