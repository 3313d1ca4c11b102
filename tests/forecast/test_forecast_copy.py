"""The copy of a live scheduler a forecast starts from (`pooltree.forecast.live.take_state`): taken in short holds of
the scheduler's lock, it equals the copy taken in one hold, and between two holds other threads take the lock
(heartbeats, commands); an operation finished between two holds is left out, one changed is copied as it is then."""

from __future__ import annotations

import dataclasses
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pooltree.config import parse_pool_trees
from pooltree.forecast.live import CopyCost, DurationHistory, OperationCopies, SubmissionHistory, take_state
from pooltree.forecast.process import opened_state, state_parcel
from pooltree.forecast.state import NodeState, Submission, SubmittedTask
from pooltree.resources import vector
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

LIMITS = {"user_slots": 4, "cpu": 4, "memory": 8 << 30}
OPERATIONS = 6


def _plain(value: Any) -> Any:
    """``value`` (a state) as plain comparable data: numpy arrays as lists, dataclasses as dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | frozenset):
        return [_plain(item) for item in value]
    return value


def _heartbeat(live: LiveScheduler, node: str, now: float, finished: int = 0) -> dict[str, Any]:
    """One heartbeat of ``node`` reporting its running jobs, the first ``finished`` of them completed."""
    running = [
        {"job_id": job.id, "operation_id": op.id, "resource_usage": {"user_slots": 1, "cpu": 1}}
        for op in live.operations.values()
        for job in op.jobs.values()
        if job.state == "running" and job.address == node
    ]
    done = [{**job, "state": "completed"} for job in running[:finished]]
    body = {
        "node_address": node,
        "resource_limits": LIMITS,
        "running_jobs": running[finished:],
        "finished_jobs": done,
    }
    return live.process_heartbeat(parse_heartbeat(body), now)


@pytest.fixture
def live(tmp_path: Path) -> LiveScheduler:
    """Two nodes of four slots; ``OPERATIONS`` operations of 6 jobs (3 run at once, the rest wait in the pool's
    queue), jobs running and some completed."""
    scheduler = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    trees = {"default": {"config": {}, "pools": {"p": {"max_running_operation_count": 3}}}}
    scheduler.apply_pool_trees(parse_pool_trees(trees), None, 0.0)
    spec = {"pool": "p", "tasks": {"main": {"command": "true", "job_count": 6, "cpu_limit": 1}}}
    for index in range(OPERATIONS):
        scheduler.start_operation("vanilla", spec, "alice", 1.0 + index)
    for now in (10.0, 20.0, 30.0):
        for node in ("n1", "n2"):
            _heartbeat(scheduler, node, now, finished=1 if now > 10 else 0)
    return scheduler


def test_a_copy_in_short_holds_equals_one_in_a_single_hold(live: LiveScheduler) -> None:
    states = {op.state for op in live.operations.values()}
    assert states == {"running", "pending"}
    assert any(job.state == "completed" for op in live.operations.values() for job in op.jobs.values())
    single, sliced = CopyCost(), CopyCost()
    whole = take_state(live, DurationHistory(), 40.0, SubmissionHistory(0.0), single, hold=math.inf)
    parts = take_state(live, DurationHistory(), 40.0, SubmissionHistory(0.0), sliced, hold=0.0)
    assert _plain(parts) == _plain(whole)
    assert len(whole.operations) == OPERATIONS and whole.submissions
    # the trees and nodes, then one operation per hold, then the submissions
    assert len(single.holds) == 3
    assert len(sliced.holds) == 1 + OPERATIONS + 1


class _Released:
    """The scheduler's lock, running ``action`` on another thread after its ``n``-th release (and waiting for it:
    the other thread takes the lock, so it ends only if the copy let the lock go)."""

    def __init__(self, lock: Any, action: Any, n: int) -> None:
        self.lock = lock
        self.action = action
        self.n = n
        self.releases = 0
        self.ran = False

    def __enter__(self) -> None:
        self.lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.lock.release()
        self.releases += 1
        if self.releases == self.n:
            other = threading.Thread(target=self.action)
            other.start()
            other.join(timeout=30)
            assert not other.is_alive(), "the copy kept the scheduler's lock between two holds"
            self.ran = True


class _View:
    """The live scheduler as `take_state` reads it, with its lock replaced."""

    def __init__(self, live: LiveScheduler, lock: _Released) -> None:
        self._live = live
        self.lock = lock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._live, name)


def test_between_two_holds_others_take_the_lock_and_what_they_changed_is_copied(live: LiveScheduler) -> None:
    order = sorted(live.operations.values(), key=lambda op: (op.start_time, op.id))
    first, last = order[0], order[-1]
    assert first.state == "running"

    def meanwhile() -> None:
        with live.lock:  # a command and a heartbeat, each under the lock, while the copy waits between holds
            live.finish_operation(first.id, "aborted", 41.0)
            _heartbeat(live, "n1", 41.0)

    lock = _Released(live.lock, meanwhile, n=1)  # after the first hold (trees, nodes, the operations' order)
    state = take_state(_View(live, lock), DurationHistory(), 41.0, SubmissionHistory(0.0), hold=0.0)  # type: ignore[arg-type]
    assert lock.ran
    copied = {op.id: op for op in state.operations}
    assert first.id not in copied  # aborted between two holds: left out
    assert last.id in copied
    # the slots ``first`` left were given to queued operations: each copied as it was after that heartbeat
    now = {op.id: op for op in live.operations.values() if op.state in ("running", "pending")}
    assert set(copied) == set(now)
    for op_id, op in copied.items():
        running = sum(1 for job in now[op_id].jobs.values() if job.state == "running")
        assert sum(len(task.running) for task in op.tasks) == running
        assert op.state == now[op_id].state


def test_an_unchanged_operation_is_not_copied_again_and_the_copy_equals_a_fresh_one(
    live: LiveScheduler,
) -> None:
    copies, history = OperationCopies(), DurationHistory()
    first = take_state(live, history, 40.0, copies=copies)
    again = take_state(live, history, 41.0, copies=copies)
    assert copies.reused == len(first.operations) == OPERATIONS
    assert all(a is b for a, b in zip(first.operations, again.operations, strict=True))
    # a heartbeat completes a job of each running operation on n1 and starts queued ones: those are copied anew
    _heartbeat(live, "n1", 42.0, finished=2)
    kept = take_state(live, history, 43.0, copies=copies)
    assert 0 < copies.reused < len(kept.operations)
    fresh = take_state(live, DurationHistory(), 43.0)
    assert _plain(kept) == _plain(fresh)
    # pickled: an unchanged copy's bytes are reused, and the parcel opens to the same state
    pickled: dict[str, tuple[Any, bytes]] = {}
    state_parcel(kept, pickled)
    reused = dict(pickled)
    again = take_state(live, history, 44.0, copies=copies)
    parcel = state_parcel(again, pickled)
    assert all(pickled[op_id][1] is reused[op_id][1] for op_id in reused)
    assert _plain(opened_state(parcel)) == _plain(again)


def test_a_parcel_pickles_nodes_and_submissions_one_by_one(live: LiveScheduler) -> None:
    """A state crosses to the worker with its nodes and submissions pickled one by one, as its operations are: in
    one ``pickle.dumps`` a loaded cluster's thousand nodes and ten thousand submissions kept the GIL for 160 ms
    (session 28's ``live_queue --split``), every other thread of the scheduler stopped. The parcel opens to the
    same state, and its head does not grow with them."""
    state = take_state(live, DurationHistory(), 40.0)
    job = np.array(vector(user_slots=1, cpu=1))
    large = dataclasses.replace(
        state,
        nodes=tuple(NodeState(f"node-{i}", np.array(vector(user_slots=10, cpu=10))) for i in range(50)),
        submissions=tuple(
            Submission(float(i), "physical", "a", "bob", "vanilla", (SubmittedTask("main", job, 10),))
            for i in range(200)
        ),
    )
    for made in (state, large):
        for kept in (None, {}):
            head, items = state_parcel(made, kept)
            assert len(items) == len(made.operations) + len(made.nodes) + len(made.submissions)
            assert _plain(opened_state((head, items))) == _plain(made)
    assert len(state_parcel(large)[0]) == len(
        state_parcel(dataclasses.replace(large, nodes=(), submissions=()))[0]
    )
