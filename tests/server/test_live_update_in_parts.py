"""The live fair-share update holds the scheduling lock in parts (`live/updates.py`): heartbeats are served while it
runs, and heartbeats waiting on the event loop get the lock between its parts (`SchedulingLock.let_waiters_in`).
That the parts decide as the whole update does is `tests/sim/test_update_in_parts.py`."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from pooltree.config import parse_pool_trees
from pooltree.node import wire
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler, updates
from pooltree.server.live.lock import HOLD_BUCKETS, SchedulingLock
from pooltree.server.metrics import make_registry
from pooltree.server.store import open_store

WAIT = 30.0
LIMITS = {"user_slots": 16, "cpu": 16, "memory": 64 << 30}


class _Node:
    """A node without processes: it runs what it is told to start and reports it running."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.running: dict[str, dict[str, Any]] = {}
        self.finished: list[dict[str, Any]] = []

    def finish(self, count: int, now: float) -> None:
        """Its first ``count`` jobs complete (reported at the next heartbeat)."""
        for job_id in list(self.running)[:count]:
            job = self.running.pop(job_id)
            self.finished.append(
                wire.finished_job(job_id, job["operation_id"], "main", "completed", job["start_time"], now)
            )

    def beat(self, live: LiveScheduler, now: float) -> dict[str, Any]:
        running = [
            wire.running_job(
                job_id, job["operation_id"], "main", start_time=job["start_time"], resource_usage={}
            )
            for job_id, job in self.running.items()
        ]
        heartbeat = {"node_address": self.address, "resource_limits": LIMITS, "running_jobs": running}
        heartbeat["finished_jobs"], self.finished = self.finished, []
        answer = live.process_heartbeat(parse_heartbeat(heartbeat), now)
        for spec in answer.get(wire.START, ()):
            self.running[spec["job_id"]] = {"operation_id": spec["operation_id"], "start_time": now}
        return answer


def _busy(tmp_path: Path) -> tuple[LiveScheduler, list[_Node]]:
    """Seven operations sharing four 16-cpu nodes; then jobs end and others start in their places, so that the
    next update configures the lists of the operations whose usage moved."""
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    spec = {"tasks": {"main": {"command": "true", "job_count": 40, "cpu_limit": 1}}}
    for _ in range(7):  # one fewer than a pool runs at once (``max_running_operation_count`` 8)
        live.start_operation("vanilla", spec, "alice", 1.0)
    nodes = [_Node(f"n{i}") for i in range(4)]
    now = 1.0
    for _ in range(3):
        now += 1.0
        live.update_fair_share("default", now)
        for node in nodes:
            node.beat(live, now)
    for node in nodes:
        node.finish(6, now)
        node.beat(live, now + 0.5)  # ends reported, other jobs started
    return live, nodes


def test_heartbeats_are_served_between_the_parts_of_an_update(tmp_path: Path, monkeypatch: Any) -> None:
    live, nodes = _busy(tmp_path)
    core = live.cores["default"]
    monkeypatch.setattr(updates, "HOLD_BUDGET", 0.0)  # one part per `LISTS_PER_PART` operations
    paused, go = threading.Event(), threading.Event()
    pauses: list[bool] = []
    let_in = live.lock.let_waiters_in

    def between(timeout: float) -> None:
        """Between two holds of the update: stop there once its snapshot is published and lists are left."""
        assert live.lock._owner is None  # the update does not hold the lock here
        if core._unfinished is not None and not pauses:
            pauses.append(True)
            paused.set()
            assert go.wait(WAIT)
        let_in(timeout)

    monkeypatch.setattr(live.lock, "let_waiters_in", between)
    failures: list[BaseException] = []

    def update() -> None:
        try:
            live.update_fair_share("default", 10.0)
        except BaseException as error:  # reported by the test's thread
            failures.append(error)

    updater = threading.Thread(target=update)
    updater.start()
    try:
        assert paused.wait(WAIT), "the update never stopped between two holds with lists left"
        assert core.strategy.last_update_time == 10.0  # the new snapshot is published
        left = len(core.strategy.publisher.changes.unconfigured)
        assert left > 0
        answers: list[dict[str, Any]] = []
        for node in nodes:
            node.finish(2, 10.0)
        beating = threading.Thread(target=lambda: answers.extend(node.beat(live, 10.1) for node in nodes))
        beating.start()
        beating.join(WAIT)
        assert not beating.is_alive(), "a heartbeat waited for the update"
        assert len(answers) == len(nodes)
        assert any(answer.get(wire.START) for answer in answers)  # scheduled in place of the ended jobs
        assert core._unfinished is not None  # the update was still unfinished meanwhile
    finally:
        go.set()
        updater.join(WAIT)
    assert not updater.is_alive() and not failures
    assert core._unfinished is None and not core.strategy.publisher.changes.unconfigured
    assert live.lock.hold_max > 0 and sum(live.lock.holds) > 0


def test_an_update_of_a_tree_finishes_the_last_ones_parts_first(tmp_path: Path) -> None:
    """A publish that comes before the last update's parts ran (a stale tree, published under the lock by a
    heartbeat or a command) configures what that update left first."""
    live, _ = _busy(tmp_path)
    core = live.cores["default"]
    with live.lock:
        live.updates.update_tree("default", 10.0, in_parts=True)
        assert core._unfinished is not None and core.strategy.publisher.changes.unconfigured
        live.updates.update_tree("default", 10.5)
        assert core._unfinished is None and not core.strategy.publisher.changes.unconfigured


def test_the_loop_s_waiting_heartbeats_get_the_lock_between_two_holds() -> None:
    lock = SchedulingLock()
    order: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        holding, go = threading.Event(), threading.Event()

        def long_task() -> None:
            with lock:
                holding.set()
                assert go.wait(WAIT)
            lock.let_waiters_in(WAIT)
            with lock:
                order.append("task")

        async def heartbeat(name: str) -> None:
            while not lock.try_enter():
                await lock.released(loop)
            order.append(name)
            lock.release()

        thread = threading.Thread(target=long_task)
        thread.start()
        assert await loop.run_in_executor(None, holding.wait, WAIT)
        beats = [asyncio.ensure_future(heartbeat(f"hb{i}")) for i in range(5)]
        while len(lock._waiters) < 5:  # all parked on the held lock
            await asyncio.sleep(0)
        go.set()
        await asyncio.wait_for(asyncio.gather(*beats), WAIT)
        await loop.run_in_executor(None, thread.join, WAIT)

    asyncio.run(main())
    assert order == ["hb0", "hb1", "hb2", "hb3", "hb4", "task"]


@pytest.mark.parametrize("held", [0.0005, 0.03])
def test_lock_holds_are_counted_by_length(held: float) -> None:
    lock = SchedulingLock()
    clock = iter([100.0, 100.0 + held])
    monkey = pytest.MonkeyPatch()
    monkey.setattr("pooltree.server.live.lock.time.perf_counter", lambda: next(clock))
    try:
        with lock, lock:  # re-entered: one hold
            pass
    finally:
        monkey.undo()
    bucket = next(i for i, bound in enumerate(HOLD_BUCKETS) if held <= bound)
    assert lock.holds[bucket] == 1 and sum(lock.holds) == 1
    assert lock.hold_max == pytest.approx(held) and lock.hold_seconds == pytest.approx(held)


def test_lock_holds_are_in_the_metrics(tmp_path: Path) -> None:
    live, _ = _busy(tmp_path)
    text = generate_latest(make_registry(live)).decode()
    holds = sum(live.lock.holds)
    assert holds > 0
    assert f"pooltree_scheduler_lock_hold_seconds_count {float(holds)}" in text
    assert 'pooltree_scheduler_lock_hold_seconds_bucket{le="+Inf"}' in text
    longest = next(
        line for line in text.splitlines() if line.startswith("pooltree_scheduler_lock_hold_max_seconds ")
    )
    assert float(longest.split()[1]) == live.lock.hold_max > 0


def test_a_stale_publish_leaves_its_lists_to_the_loop_in_parts(tmp_path: Path, monkeypatch: Any) -> None:
    """A heartbeat that publishes a stale tree first (an operation that can run now) holds the lock for the
    snapshot only; the lists it leaves are configured by `finish_unfinished` (the service's loop), in parts."""
    live, nodes = _busy(tmp_path)
    core = live.cores["default"]
    for node in nodes:
        node.finish(3, 9.0)
    live.start_operation("vanilla", {"tasks": {"main": {"command": "true", "job_count": 4}}}, "alice", 9.0)
    assert live.publishing  # the next heartbeat publishes the tree first
    answer = nodes[0].beat(live, 9.5)
    assert answer.get(wire.START)
    assert not live.publishing and live.updates.unfinished == {"default"}
    assert core._unfinished is not None and core.strategy.publisher.changes.unconfigured
    monkeypatch.setattr(updates, "HOLD_BUDGET", 0.0)
    holds = sum(live.lock.holds)
    live.updates.finish_unfinished()
    assert core._unfinished is None and not core.strategy.publisher.changes.unconfigured
    assert not live.updates.unfinished
    assert sum(live.lock.holds) - holds > 2  # the first to take the set, then one per part
