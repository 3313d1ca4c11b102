"""A start commits its operation outside the scheduling lock (#25): its record goes through the group commit after
the lock is released, so a heartbeat is never held by a start's store sync; commit-before-act stays: the start
returns only once the operation is stored, and a job of it is stored (and its node told) only with or after it.

The stores are real (SQLite and PostgreSQL), instrumented in place: each operation write notes whether the
scheduling lock was free at that moment (another thread could take it) and can be held at a gate.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from polling import wait_for

from pooltree.config import parse_pool_trees
from pooltree.errors import PooltreeError
from pooltree.server.commands import CommandContext
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.live.lock import SchedulingLock
from pooltree.server.live.model import LiveOperation
from pooltree.server.operations import OperationCommands
from pooltree.server.store import JobRecord, Mutation, OperationRecord, Store, StoreUnavailable, open_store

WAIT = 30.0
SPEC = {"tasks": {"main": {"command": "true", "job_count": 2}}}
LIMITS = {"user_slots": 2, "cpu": 2, "memory": 4 << 30}


def _free(lock: SchedulingLock) -> bool:
    """Whether another thread can take ``lock`` now (nobody holds it)."""
    taken: list[bool] = []

    def attempt() -> None:
        got = lock.acquire(blocking=False)
        taken.append(got)
        if got:
            lock.release()

    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join(WAIT)
    return taken == [True]


class Writes:
    """The store's writes in order: ("operation", id, state, lock free) and ("jobs", operation ids, lock free)."""

    def __init__(self, store: Store) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.lock: SchedulingLock | None = None
        self.gate: threading.Event | None = None
        """When set up, an operation write waits for it (``holding`` is set meanwhile)."""
        self.holding = threading.Event()
        put_operation, put_operations, put_jobs = store.put_operation, store.put_operations, store.put_jobs
        depth = [0]

        def note_operations(records: Sequence[tuple[OperationRecord, Mutation | None]]) -> None:
            free = self.lock is not None and _free(self.lock)
            for record, _ in records:
                self.log.append(("operation", record.id, record.state, free))
            if self.gate is not None:
                self.holding.set()
                assert self.gate.wait(WAIT)

        def operation(record: OperationRecord, **kwargs: Any) -> None:
            depth[0] += 1
            try:
                if depth[0] == 1:
                    note_operations([(record, kwargs.get("mutation"))])
                put_operation(record, **kwargs)
            finally:
                depth[0] -= 1

        def operations(records: Sequence[tuple[OperationRecord, Mutation | None]], *args: Any) -> None:
            depth[0] += 1
            try:
                if depth[0] == 1:
                    note_operations(records)
                put_operations(records, *args)
            finally:
                depth[0] -= 1

        def jobs(records: Sequence[JobRecord]) -> None:
            self.log.append(("jobs", {record.operation_id for record in records}))
            put_jobs(records)

        # on the instance, before the scheduler takes its bound methods
        store.put_operation = operation  # type: ignore[method-assign]
        store.put_operations = operations  # type: ignore[method-assign]
        store.put_jobs = jobs  # type: ignore[method-assign]


@contextlib.contextmanager
def _scheduler(store_url: str) -> Iterator[tuple[LiveScheduler, Store, Writes]]:
    """A live scheduler over an instrumented store; at the end a held write is let go, then both are closed."""
    store = open_store(store_url)
    writes = Writes(store)
    live = LiveScheduler(store)
    writes.lock = live.lock
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), "default", 0.0)
    try:
        yield live, store, writes
    finally:
        if writes.gate is not None:
            writes.gate.set()
        live.commits.close()
        store.close()


def _in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(work()), daemon=True)
    thread.start()
    return thread, result


def test_a_start_is_stored_without_the_scheduling_lock_and_before_it_returns(store_url: str) -> None:
    with _scheduler(store_url) as (live, store, writes):
        op = live.start_operation("vanilla", SPEC, "alice", 1.0, mutation_id="m1")
        assert [entry for entry in writes.log if entry[0] == "operation"] == [
            ("operation", op.id, "running", True)
        ]
        reader = open_store(store_url)  # another connection: it is committed, not only written
        try:
            stored = reader.get_operation(op.id)
            assert stored is not None and stored.state == "running"
        finally:
            reader.close()
        assert store.get_mutation("m1") == (True, {"operation_id": op.id})  # sealed with this store's key


def test_a_heartbeat_beside_a_start_being_stored_schedules_it_but_answers_after_it_is_stored(
    store_url: str,
) -> None:
    with _scheduler(store_url) as (live, _store, writes):
        writes.gate = threading.Event()
        starting, started = _in_thread(lambda: live.start_operation("vanilla", SPEC, "alice", 1.0))
        assert writes.holding.wait(WAIT)  # the start's record is being written, the lock released
        submitted = live.commits._submitted
        beating, answered = _in_thread(
            lambda: live.process_heartbeat(
                parse_heartbeat({"node_address": "n1", "resource_limits": LIMITS}), 2.0
            )
        )
        # the heartbeat took the lock and queued its started jobs (on the old code it waits for the lock)
        wait_for(lambda: live.commits._submitted > submitted or not beating.is_alive(), WAIT, 0.01)
        assert live.commits._submitted > submitted
        assert beating.is_alive() and answered == []  # not answered while the operation is not stored
        assert starting.is_alive() and started == []  # nor the start acknowledged
        writes.gate.set()
        starting.join(WAIT)
        beating.join(WAIT)
        op = started[0]
        assert len(answered[0]["start"]) == 2
        kinds = [entry[0] for entry in writes.log]
        assert kinds.index("operation") < kinds.index("jobs")
        assert op.id in writes.log[kinds.index("jobs")][1]


def test_a_start_whose_group_commit_fails_is_undone_and_leaves_the_counts(store_url: str) -> None:
    with _scheduler(store_url) as (live, store, _):
        kept = live.start_operation("vanilla", SPEC, "alice", 1.0)
        before = live.counts.groups()

        def failing(records: Any, *args: Any) -> None:
            raise StoreUnavailable(
                "Scheduler store is unavailable, nothing is acknowledged: injected failure"
            )

        live.commits._write_operations = failing
        with pytest.raises(StoreUnavailable):
            live.start_operation("vanilla", SPEC, "alice", 2.0, operation_id="ghost")
        assert list(live.operations) == [kept.id]
        assert "ghost" not in live.registry.operations
        assert all("ghost" not in core.controllers for core in live.cores.values())
        assert sorted(live.counts.groups()) == sorted(before)
        assert store.get_operation("ghost") is None


def _claims_noted(live: LiveScheduler) -> threading.Event:
    """Set once a start finds its mutation id claimed by a start in flight (on code without claims: never)."""
    noted = threading.Event()
    claims = getattr(live.commands, "start_claims", None)
    if claims is not None:
        claim = claims.claim

        def noting(mutation_id: str) -> Any:
            found = claim(mutation_id)
            if found is not None and not isinstance(found, LiveOperation):
                noted.set()
            return found

        claims.claim = noting  # type: ignore[method-assign]
    return noted


def test_a_retry_while_the_start_is_being_stored_answers_the_first_operation(store_url: str) -> None:
    with _scheduler(store_url) as (live, store, writes):
        in_flight = _claims_noted(live)
        writes.gate = threading.Event()
        starting, started = _in_thread(
            lambda: live.start_operation("vanilla", SPEC, "alice", 1.0, mutation_id="m")
        )
        assert writes.holding.wait(WAIT)  # the first start's record is being written, the lock released
        submitted = live.commits._submitted
        retrying, retried = _in_thread(
            lambda: live.start_operation("vanilla", SPEC, "alice", 2.0, mutation_id="m")
        )
        # the retry waits for the first start (or, on code without claims, queues a start of its own)
        wait_for(lambda: in_flight.is_set() or live.commits._submitted > submitted, WAIT, 0.01)
        assert retrying.is_alive() and retried == []  # not answered before the first start is stored
        writes.gate.set()
        starting.join(WAIT)
        retrying.join(WAIT)
        first, retry = started[0], retried[0]
        assert retry.id == first.id, f"the retry started a second operation {retry.id} beside {first.id}"
        assert list(live.operations) == [first.id]
        assert [entry[1] for entry in writes.log if entry[0] == "operation"] == [first.id]
        assert store.get_mutation("m") == (True, {"operation_id": first.id})
        # a retry after the first start was stored answers it too
        again = live.start_operation("vanilla", SPEC, "alice", 3.0, mutation_id="m")
        assert again.id == first.id and list(live.operations) == [first.id]


def test_a_retry_of_a_start_whose_commit_failed_starts_afresh(store_url: str) -> None:
    with _scheduler(store_url) as (live, store, writes):
        in_flight = _claims_noted(live)
        writes.gate = threading.Event()
        write_operations = live.commits._write_operations
        assert write_operations is not None
        failed: list[bool] = []

        def failing_once(records: Any, *args: Any) -> None:
            if not failed:
                failed.append(True)
                writes.holding.set()
                assert writes.gate is not None and writes.gate.wait(WAIT)
                raise StoreUnavailable(
                    "Scheduler store is unavailable, nothing is acknowledged: injected failure"
                )
            write_operations(records, *args)

        live.commits._write_operations = failing_once
        errors: list[BaseException] = []

        def first_start() -> LiveOperation | None:
            try:
                return live.start_operation(
                    "vanilla", SPEC, "alice", 1.0, operation_id="ghost", mutation_id="m"
                )
            except StoreUnavailable as error:
                errors.append(error)
                return None

        starting, started = _in_thread(first_start)
        assert writes.holding.wait(WAIT)
        submitted = live.commits._submitted
        retrying, retried = _in_thread(
            lambda: live.start_operation("vanilla", SPEC, "alice", 2.0, operation_id="kept", mutation_id="m")
        )
        wait_for(lambda: in_flight.is_set() or live.commits._submitted > submitted, WAIT, 0.01)
        writes.gate.set()
        starting.join(WAIT)
        retrying.join(WAIT)
        assert started == [None] and len(errors) == 1  # the first start failed
        assert [op.id for op in retried] == ["kept"]
        assert list(live.operations) == ["kept"] and "ghost" not in live.registry.operations
        assert store.get_operation("ghost") is None
        assert store.get_mutation("m") == (True, {"operation_id": "kept"})


class _NotedLock:
    """A lock whose ``with`` notes each thread that comes to take it (before it waits)."""

    def __init__(self, lock: Any, entering: list[str]) -> None:
        self.lock, self.entering = lock, entering

    def __enter__(self) -> None:
        self.entering.append(threading.current_thread().name)
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_a_retry_of_a_start_with_an_alias_while_it_is_being_stored_answers_its_operation(
    store_url: str,
) -> None:
    """Through the start command (``server/operations.py``): the retry waits for the first start behind the
    aliases' lock and must answer it, not find the alias taken by the operation it is retrying."""
    with _scheduler(store_url) as (live, _store, writes):
        commands = OperationCommands(live, lambda: 1.0)
        spec = {**SPEC, "alias": "*service"}
        entering: list[str] = []
        commands.aliases.lock = _NotedLock(commands.aliases.lock, entering)

        def start() -> Any:
            parameters = {"operation_type": "vanilla", "spec": spec, "mutation_id": "m", "retry": True}
            try:
                return commands.start_operation(CommandContext("start_operation", parameters, user="alice"))
            except PooltreeError as error:
                return str(error)

        writes.gate = threading.Event()
        starting, started = _in_thread(start)
        assert writes.holding.wait(WAIT)
        retrying, retried = _in_thread(start)
        wait_for(lambda: len(entering) == 2, WAIT, 0.01)  # the retry waits for the aliases' lock
        writes.gate.set()
        starting.join(WAIT)
        retrying.join(WAIT)
        assert retried == started and len(started) == 1, f"the retry answered {retried}, the first {started}"
        assert list(live.operations) == [started[0]["operation_id"]]


def test_a_start_without_an_alias_being_stored_holds_neither_alias_reads_nor_its_retry(
    store_url: str,
) -> None:
    """Through the start command: a start without an alias takes no aliases' lock, so an alias is resolved while
    it is being stored (it held every alias read for its store write), and its retry is answered by the
    scheduler's claim once it is stored."""
    with _scheduler(store_url) as (live, _store, writes):
        commands = OperationCommands(live, lambda: 1.0)

        def start() -> Any:
            parameters = {"operation_type": "vanilla", "spec": SPEC, "mutation_id": "m", "retry": True}
            return commands.start_operation(CommandContext("start_operation", parameters, user="alice"))

        in_flight = _claims_noted(live)
        writes.gate = threading.Event()
        starting, started = _in_thread(start)
        assert writes.holding.wait(WAIT)
        resolving, resolved = _in_thread(lambda: commands.aliases.operation_id("*nobody"))
        resolving.join(10.0)
        assert resolved == [None], "an alias read waited for a start without an alias to be stored"
        retrying, retried = _in_thread(start)
        wait_for(in_flight.is_set, WAIT, 0.01)
        writes.gate.set()
        starting.join(WAIT)
        retrying.join(WAIT)
        assert retried == started and len(started) == 1
        assert list(live.operations) == [started[0]["operation_id"]]


def test_a_second_start_with_the_mutation_id_not_marked_retry_is_refused(store_url: str) -> None:
    """As the pipeline refuses one whose answer is stored: while the first start is stored and after it."""
    with _scheduler(store_url) as (live, _store, writes):
        writes.gate = threading.Event()
        starting, started = _in_thread(
            lambda: live.start_operation("vanilla", SPEC, "alice", 1.0, mutation_id="m")
        )
        assert writes.holding.wait(WAIT)
        with pytest.raises(PooltreeError, match='Duplicate request is not marked as "retry"'):
            live.start_operation("vanilla", SPEC, "alice", 2.0, mutation_id="m", retry=False)
        writes.gate.set()
        starting.join(WAIT)
        with pytest.raises(PooltreeError, match='Duplicate request is not marked as "retry"'):
            live.start_operation("vanilla", SPEC, "alice", 3.0, mutation_id="m", retry=False)
        assert list(live.operations) == [started[0].id]
        assert (
            live.start_operation("vanilla", SPEC, "alice", 4.0, mutation_id="m", retry=True).id
            == started[0].id
        )
