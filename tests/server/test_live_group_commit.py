"""Heartbeats' job records go to the store by group commit: never under the scheduling lock, and a heartbeat is
answered only once its records are durable (a started job stored before the node starts it, a finished one
before it is acknowledged). Also the per-node index of running jobs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from held_store import HeldStore
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from pooltree.config import parse_pool_trees
from pooltree.node import wire
from pooltree.node.wire import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.live.commit import GroupCommit
from pooltree.server.live.index import RunningJobs
from pooltree.server.live.model import LiveJob
from pooltree.server.metrics import make_registry
from pooltree.server.store import JobRecord, open_store

sys.path.insert(0, str(Path(__file__).parent))
from heartbeat_maps import node_heartbeat

WAIT = 30.0
LIMITS = {"user_slots": 2, "cpu": 2, "memory": 4 << 30}


def _record(job_id: str, state: str = "running") -> JobRecord:
    return JobRecord("op", job_id, state, "n1", 1.0, None, None, {})


def test_concurrent_waiters_share_batches_and_see_their_records_stored() -> None:
    stored: list[list[str]] = []
    gate = threading.Event()

    def write(records: Sequence[JobRecord]) -> None:
        gate.wait(WAIT)  # the first batch is held until every other caller has queued behind it
        stored.append([r.id for r in records])

    commits = GroupCommit(write)
    done: list[str] = []

    def caller(index: int) -> None:
        commits.wait(commits.submit([_record(f"j{index}")]))
        done.append(f"j{index}")  # returns only after its record was written

    first = threading.Thread(target=caller, args=(0,))
    first.start()
    while not commits._committing:  # the first caller is writing (held at the gate)
        threading.Event().wait(0.001)
    others = [threading.Thread(target=caller, args=(i,)) for i in range(1, 20)]
    for thread in others:
        thread.start()
    while commits._submitted < 20:
        threading.Event().wait(0.001)
    assert done == []
    gate.set()
    for thread in [first, *others]:
        thread.join(WAIT)
    assert sorted(done) == sorted(f"j{i}" for i in range(20))
    assert sorted(job for batch in stored for job in batch) == sorted(done)
    assert len(stored) == 2  # the held batch, then everyone who queued meanwhile in one


def test_the_group_commit_counts_its_transactions_and_the_submissions_they_stored(tmp_path: Path) -> None:
    """``/metrics`` says how many heartbeats' records one store transaction served (``live_nodes.py`` reports it
    per phase): two submissions queued before a wait go in one batch."""
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    commits = live.commits
    first = commits.submit([_record("a"), _record("b")])
    second = commits.submit([_record("c")])
    commits.wait(second)
    assert commits.wait(first) is None
    commits.wait(commits.submit([_record("d")]))
    assert (commits.batches, commits.tickets, commits.records) == (2, 3, 4)
    text = generate_latest(make_registry(live)).decode()
    assert "pooltree_scheduler_group_commit_batches_total 2.0" in text
    assert "pooltree_scheduler_group_commit_submissions_total 3.0" in text
    assert "pooltree_scheduler_group_commit_records_total 4.0" in text


def test_a_failed_batch_fails_every_waiter_in_it_and_the_next_batch_proceeds() -> None:
    calls: list[int] = []

    def write(records: Sequence[JobRecord]) -> None:
        calls.append(len(records))
        if len(calls) == 1:
            raise OSError("disk full")

    commits = GroupCommit(write)
    first, second = commits.submit([_record("a")]), commits.submit([_record("b")])
    with pytest.raises(OSError, match="disk full"):
        commits.wait(second)
    with pytest.raises(OSError, match="disk full"):
        commits.wait(first)
    commits.wait(commits.submit([_record("c")]))
    assert calls == [2, 1]


def test_after_batch_runs_on_its_thread_after_the_waiters_only_after_a_stored_batch() -> None:
    """``after_batch`` (the store's checkpoint) runs on a thread of its own (``group-commit-after``) once a batch
    written on the group commit's thread has woken its waiters: the waiter returns while it is held; never after a failed batch, never on a committer's own
    thread (``wait``, ``flush``: under the scheduling lock); one that raises leaves the thread writing."""
    calls: list[str] = []
    ran, release = threading.Event(), threading.Event()

    def write(records: Sequence[JobRecord]) -> None:
        if records[0].id == "bad":
            raise OSError("disk full")

    def after_batch() -> None:
        calls.append(threading.current_thread().name)
        ran.set()
        assert release.wait(WAIT)
        if len(calls) == 1:
            raise RuntimeError("the checkpoint failed")

    commits = GroupCommit(write, after_batch=after_batch)
    commits.wait(commits.submit([_record("a")]))
    commits.flush()
    assert calls == []  # a committer on the caller's thread

    async def heartbeat(job_id: str) -> None:
        await asyncio.wait_for(commits.wait_async(commits.submit([_record(job_id)])), WAIT)

    try:
        asyncio.run(heartbeat("b"))  # returns with after_batch held
        assert ran.wait(WAIT) and not release.is_set()
        release.set()
        with pytest.raises(OSError, match="disk full"):
            asyncio.run(heartbeat("bad"))
        ran.clear()
        asyncio.run(heartbeat("c"))  # the thread goes on after the one that raised
        assert ran.wait(WAIT)
        assert len(calls) == 2 and all(name == "group-commit-after" for name in calls)
    finally:
        release.set()
        commits.close()


def test_after_batch_runs_beside_the_next_batches_and_only_when_due() -> None:
    """While ``after_batch`` runs (held here), the next heartbeats' batches are written and their waiters woken
    (before, it ran on the writer's thread and they waited behind it); the requests made meanwhile come to one run
    after it; ``after_due`` saying no wakes nothing."""
    written: list[str] = []
    calls: list[int] = []
    ran, release, finished = threading.Event(), threading.Event(), threading.Event()
    due = [True]

    def after_batch() -> None:
        calls.append(len(written))
        ran.set()
        assert release.wait(WAIT)
        finished.set()

    commits = GroupCommit(
        lambda records: written.extend(r.id for r in records),
        after_batch=after_batch,
        after_due=lambda: due[0],
    )

    async def heartbeat(job_id: str) -> None:
        await asyncio.wait_for(commits.wait_async(commits.submit([_record(job_id)])), WAIT)

    try:
        asyncio.run(heartbeat("a"))
        assert ran.wait(WAIT)  # held from here
        for job_id in ("b", "c", "d"):
            asyncio.run(heartbeat(job_id))  # written while after_batch is held
        assert written == ["a", "b", "c", "d"] and calls == [1]
        ran.clear()
        finished.clear()
        release.set()
        assert ran.wait(WAIT)  # the three requests made meanwhile: one run
        assert finished.wait(WAIT)
        writer = commits._writer
        assert writer is not None and writer.after is not None
        assert calls == [1, 4] and not writer.after.due.is_set()  # none asked since: no third run
        due[0] = False
        asyncio.run(heartbeat("e"))
        assert written[-1] == "e" and not writer.after.due.is_set() and calls == [1, 4]
    finally:
        release.set()
        commits.close()


def test_later_records_of_a_job_replace_earlier_ones_in_a_batch() -> None:
    written: list[JobRecord] = []
    commits = GroupCommit(written.extend)
    commits.submit([_record("a", "running")])
    commits.submit([_record("a", "completed")])
    commits.flush()
    assert [(r.id, r.state) for r in written] == [("a", "completed")]


def test_event_loop_waiters_hand_their_batches_to_the_commit_thread_without_an_executor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``wait_async``'s committer hands its batch to the group commit's own thread through a queue: written there,
    in order, every waiter woken once stored, and no ``concurrent.futures.Future`` made per batch (the executor's
    submit made one with its ``Condition``, a work item and a semaphore round on the heartbeat loop's thread)."""
    made: list[int] = []
    original = concurrent.futures.Future.__init__

    def counted(self: concurrent.futures.Future[Any]) -> None:
        made.append(1)
        original(self)

    monkeypatch.setattr(concurrent.futures.Future, "__init__", counted)
    written: list[tuple[str, list[str]]] = []
    commits = GroupCommit(
        lambda records: written.append((threading.current_thread().name, [r.id for r in records]))
    )

    async def rounds() -> list[float | None]:
        ended: list[float | None] = []
        for round_ in range(5):
            tickets = [commits.submit([_record(f"j{round_}.{index}")]) for index in range(3)]
            ended += await asyncio.gather(*(commits.wait_async(ticket) for ticket in tickets))
            assert all(commits.settled(ticket) for ticket in tickets)
        return ended

    try:
        ended = asyncio.run(rounds())
    finally:
        commits.close()
    assert made == []
    assert written == [("group-commit", [f"j{r}.{i}" for i in range(3)]) for r in range(5)]
    assert all(isinstance(at, float) for at in ended)  # each waiter learns when its batch ended
    assert (commits.batches, commits.tickets, commits.records) == (5, 15, 15)


def test_closing_ends_the_commit_thread_after_the_batches_handed_to_it() -> None:
    gate = threading.Event()
    written: list[list[str]] = []

    def write(records: Sequence[JobRecord]) -> None:
        gate.wait(WAIT)
        written.append([r.id for r in records])

    commits = GroupCommit(write)

    async def main() -> None:
        waiting = asyncio.ensure_future(commits.wait_async(commits.submit([_record("a")])))
        while not commits._committing:  # handed to the thread, held at the gate
            await asyncio.sleep(0.001)
        writer = commits._writer
        assert writer is not None
        commits.close()  # while the batch is being written
        gate.set()
        await asyncio.wait_for(waiting, WAIT)  # still written, its waiter woken
        writer.thread.join(WAIT)
        assert not writer.thread.is_alive()
        await asyncio.wait_for(commits.wait_async(commits.submit([_record("b")])), WAIT)  # a new thread

    try:
        asyncio.run(main())
    finally:
        commits.close()
    assert written == [["a"], ["b"]]


def test_a_heartbeat_is_answered_after_its_jobs_are_stored_and_the_lock_is_free_meanwhile(
    tmp_path: Path,
) -> None:
    store = HeldStore(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live = LiveScheduler(store)  # type: ignore[arg-type]
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    op = live.start_operation("vanilla", {"tasks": {"main": {"command": "true", "job_count": 2}}}, "u", 1.0)
    store.hold = True
    answers: list[dict[str, Any]] = []
    heartbeat = parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS})
    thread = threading.Thread(target=lambda: answers.append(live.process_heartbeat(heartbeat, 2.0)))
    thread.start()
    assert store.entered.wait(WAIT)  # the heartbeat's job records are being written...
    assert live.lock.acquire(timeout=5)  # ...without the scheduling lock held
    live.lock.release()
    assert answers == []  # and the node has not been told to start anything yet
    store.release.set()
    thread.join(WAIT)
    started = [spec["job_id"] for spec in answers[0][wire.START]]
    assert len(started) == 2
    assert all(store.get_job(op.id, job_id) is not None for job_id in started)


def test_finished_jobs_are_acknowledged_only_once_stored(tmp_path: Path) -> None:
    store = HeldStore(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live = LiveScheduler(store)  # type: ignore[arg-type]
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    op = live.start_operation("vanilla", {"tasks": {"main": {"command": "true", "job_count": 3}}}, "u", 1.0)
    first = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS}), 2.0)
    spec = first[wire.START][0]
    report = wire.finished_job(spec["job_id"], op.id, "main", "completed", 2.0, 3.0)
    store.hold = True
    answers: list[dict[str, Any]] = []
    heartbeat = parse_heartbeat(node_heartbeat("n1", limits=LIMITS, finished=[report]))
    thread = threading.Thread(target=lambda: answers.append(live.process_heartbeat(heartbeat, 3.0)))
    thread.start()
    assert store.entered.wait(WAIT)
    assert answers == []
    assert store.get_job(op.id, spec["job_id"]).state == "running"  # type: ignore[union-attr]
    store.release.set()
    thread.join(WAIT)
    assert answers[0][wire.ACKNOWLEDGE] == [spec["job_id"]]
    assert store.get_job(op.id, spec["job_id"]).state == "completed"  # type: ignore[union-attr]


operations = st.lists(
    st.tuples(st.sampled_from(["add", "pop"]), st.integers(0, 12), st.sampled_from(["n1", "n2", "n3"])),
    max_size=60,
)


@settings(max_examples=100, deadline=None)
@given(steps=operations)
def test_running_jobs_by_node_matches_a_scan(steps: list[tuple[str, int, str]]) -> None:
    jobs = RunningJobs()
    for action, number, address in steps:
        job_id = f"j{number}"
        if action == "add":
            jobs[job_id] = LiveJob(job_id, "op", "main", number, address, "default", 0.0)
        else:
            jobs.pop(job_id, None)
        for node in ("n1", "n2", "n3"):
            expected = {j.id for j in jobs.values() if j.address == node}
            assert {j.id for j in jobs.on_node(node)} == expected
            assert {job_id: job.id for job_id, job in jobs.node_index(node).items()} == {
                i: i for i in expected
            }
            assert jobs.count_on_node(node) == len(expected)
