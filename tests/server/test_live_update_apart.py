"""The live fair-share update computes the fair share and the strategy's tree outside the scheduling lock
(`FairShareUpdates.publish_computed_apart`): heartbeats and commands are served meanwhile; a change of the tree
meanwhile makes the update read and compute again; a stale tree's publish waits for it. That the steps decide as
the plain update does is `tests/sim/test_update_apart.py`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from pooltree.node import wire
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler, updates
from pooltree.server.metrics import make_registry
from tests.server.test_live_update_in_parts import LIMITS, WAIT, _busy, _Node

SPEC = {"tasks": {"main": {"command": "true", "job_count": 40, "cpu_limit": 1}}}


class _Paused:
    """The update's first computation stopped until ``go``: ``computing`` is set once it is there."""

    def __init__(self, live: LiveScheduler) -> None:
        self.live = live
        self.computing, self.go = threading.Event(), threading.Event()
        self.computations = 0
        self.failures: list[BaseException] = []
        self.error: BaseException | None = None
        """Raised by the first computation once let go, instead of its result."""
        self.thread = threading.Thread(target=self._update)

    def compute(self, update: Any, times: Any) -> Any:
        self.computations += 1
        assert self.live.lock._owner is None  # computed without the lock
        if self.computations == 1:
            self.computing.set()
            assert self.go.wait(WAIT)
            if self.error is not None:
                raise self.error
        return COMPUTE(update, times)

    def _update(self) -> None:
        try:
            self.live.update_fair_share("default", 10.0)
        except BaseException as error:  # reported by the test's thread
            self.failures.append(error)

    def finish(self) -> None:
        self.go.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive() and not self.failures


COMPUTE = updates.compute_update


@pytest.fixture
def paused(tmp_path: Path, monkeypatch: Any) -> Iterator[tuple[LiveScheduler, list[_Node], _Paused]]:
    live, nodes = _busy(tmp_path)
    pause = _Paused(live)
    monkeypatch.setattr(updates, "compute_update", pause.compute)
    pause.thread.start()
    try:
        assert pause.computing.wait(WAIT), "the update never computed"
        yield live, nodes, pause
    finally:
        pause.go.set()
        pause.thread.join(WAIT)


def _beat_all(live: LiveScheduler, nodes: list[_Node], now: float) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    beating = threading.Thread(target=lambda: answers.extend(node.beat(live, now) for node in nodes))
    beating.start()
    beating.join(WAIT)
    assert not beating.is_alive(), "a heartbeat waited for the update's computation"
    return answers


def test_heartbeats_are_served_while_the_update_is_computed(paused: Any) -> None:
    live, nodes, pause = paused
    core = live.cores["default"]
    before = core.strategy.last_update_time
    for node in nodes:
        node.finish(2, 10.0)
    answers = _beat_all(live, nodes, 10.1)
    assert len(answers) == len(nodes)
    assert any(answer.get(wire.START) for answer in answers)  # scheduled against the last snapshot
    assert core.strategy.last_update_time == before  # not published yet
    pause.finish()
    assert core.strategy.last_update_time == 10.0  # published: allocations alone do not move the tree
    assert pause.computations == 1 and live.updates.computes_overtaken == 0
    assert live.updates.fair_share_updates["default"] == 4 and not live.updates.computing


def test_an_update_whose_tree_changed_meanwhile_is_read_and_computed_again(paused: Any) -> None:
    live, _, pause = paused
    core = live.cores["default"]
    # runs at once (the pool runs 8): the tree's revision moves
    operation_id = live.start_operation("vanilla", SPEC, "alice", 10.05).id
    assert operation_id in core.pool_tree.operations and core.pool_tree.operations[operation_id].running
    assert "default" in live.updates.stale_trees  # left stale: the computation owns the tree's caches
    # heartbeats stay on the event loop's path meanwhile (they would go to threads to publish a stale tree)
    assert not live.heartbeats.publishing
    heartbeat = parse_heartbeat({"node_address": "n0", "resource_limits": LIMITS, "running_jobs": []})
    assert live.try_process_heartbeat(heartbeat, 10.06) is not None
    assert core.strategy.last_update_time != 10.0
    pause.finish()
    assert pause.computations == 2 and live.updates.computes_overtaken == 1
    assert core.strategy.last_update_time == 10.0
    assert operation_id in core.last_result.elements  # the second computation read it
    assert "default" not in live.updates.stale_trees
    text = generate_latest(make_registry(live)).decode()
    assert "pooltree_scheduler_fair_share_computes_overtaken_total 1.0" in text


def test_an_interrupt_of_the_computation_is_not_taken_for_a_change_of_the_tree(paused: Any) -> None:
    """A ``KeyboardInterrupt`` (or ``SystemExit``) ends the update even when the tree changed meanwhile: it is not
    counted as overtaken and computed again (it was, when every ``BaseException`` was taken for a change)."""
    live, _, pause = paused
    live.start_operation("vanilla", SPEC, "alice", 10.05)  # the tree changes under the computation
    pause.error = KeyboardInterrupt()
    pause.go.set()
    pause.thread.join(WAIT)
    assert not pause.thread.is_alive()
    assert len(pause.failures) == 1 and isinstance(pause.failures[0], KeyboardInterrupt)
    assert pause.computations == 1 and live.updates.computes_overtaken == 0
    assert not live.updates.computing  # a stale publish of the tree is not left waiting for it
