"""The store watch, the leader locks and a refused start leaving no trace, on real SQLite files and a real
PostgreSQL server (issue 13)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from pooltree.server.live import LiveScheduler
from pooltree.server.store import Mutation, OperationRecord, StoreUnavailable, open_store
from pooltree.server.store.leadership import PostgresLeaderLock, SqliteLeaderLock
from pooltree.server.store.sqlite import SqliteStore

SPEC = {"tasks": {"main": {"command": "true", "job_count": 1}}}


def _op(op_id: str) -> OperationRecord:
    return OperationRecord(op_id, "vanilla", "running", "alice", "p", 1.0)


@pytest.mark.parametrize("fault", ["deleted", "replaced", "overwritten"])
def test_sqlite_file_faults_put_the_store_in_trouble(tmp_path: Path, fault: str) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    store.put_operation(_op("a"))
    if fault == "deleted":
        path.unlink()
    elif fault == "replaced":
        other = SqliteStore(tmp_path / "other.db")
        other.close()
        os.replace(tmp_path / "other.db", path)
    else:
        with path.open("r+b") as handle:
            handle.write(b"\0" * 100)
    with pytest.raises(StoreUnavailable) as refused:
        store.put_operation(_op("b"))
    assert refused.value.code == 105
    expected = {"deleted": "deleted", "replaced": "replaced", "overwritten": "corrupted"}[fault]
    assert expected in refused.value.message
    health = store.health()
    assert not health.ok and expected in (health.error or "") and health.since is not None
    with pytest.raises(StoreUnavailable):  # sticky: every later write is refused
        store.put_operation(_op("c"))
    # reads answer what was acknowledged, as the scheduler's in-memory reads do (list_operations included)
    if fault != "replaced":
        with contextlib.suppress(
            StoreUnavailable
        ):  # SQLite itself may refuse to read a deleted or damaged file
            store.get_operation("a")
    else:
        record = store.get_operation("a")
        assert record is not None and record.id == "a"
        assert [r.id for r in store.list_operations()] == ["a"]
    store.close()


def test_probe_notices_a_deleted_file_without_a_write(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    assert store.probe().ok
    (tmp_path / "s.db").unlink()
    assert not store.probe().ok
    store.close()


def test_mutation_is_saved_in_the_operation_commit(store_url: str) -> None:
    store = open_store(store_url)
    store.put_operation(_op("a"), mutation=Mutation("m1", {"operation_id": "a"}, 5.0))
    assert store.get_mutation("m1") == (True, {"operation_id": "a"})
    assert store.get_operation("a") is not None
    store.close()


def test_a_start_whose_commit_fails_leaves_no_trace(tmp_path: Path) -> None:
    from pooltree.config import parse_pool_trees

    store = SqliteStore(tmp_path / "s.db")
    live = LiveScheduler(store)
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), "default", 0.0)
    kept = live.start_operation("vanilla", SPEC, "alice", 0.0, mutation_id="ok")
    (tmp_path / "s.db").unlink()
    with pytest.raises(StoreUnavailable):
        live.start_operation("vanilla", SPEC, "alice", 1.0, operation_id="ghost", mutation_id="m")
    assert list(live.operations) == [kept.id]
    assert "ghost" not in live.registry.operations
    assert all("ghost" not in core.controllers for core in live.cores.values())
    store.close()


def test_a_suspend_whose_commit_fails_is_undone(tmp_path: Path) -> None:
    from pooltree.config import parse_pool_trees

    store = SqliteStore(tmp_path / "s.db")
    live = LiveScheduler(store)
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), "default", 0.0)
    op = live.start_operation("vanilla", SPEC, "alice", 0.0)
    (tmp_path / "s.db").unlink()
    with pytest.raises(StoreUnavailable):
        live.suspend_operation(op.id, 1.0)
    assert op.suspended is False and live.registry.operations[op.id].suspended is False
    store.close()


def test_sqlite_leader_lock_names_its_holder(tmp_path: Path) -> None:
    first, second = SqliteLeaderLock(tmp_path / "s.db"), SqliteLeaderLock(tmp_path / "s.db")
    assert first.try_acquire()
    first.announce("http://127.0.0.1:1")
    assert not second.try_acquire()
    holder = second.holder()
    assert holder is not None and holder.pid == os.getpid() and holder.url == "http://127.0.0.1:1"
    first.release()
    assert second.try_acquire()
    second.release()


def test_postgres_leader_lock_and_a_lost_session(fresh_postgres_url: str) -> None:
    import psycopg

    leader = open_store(fresh_postgres_url)
    other = open_store(fresh_postgres_url)
    lock, other_lock = PostgresLeaderLock(leader), PostgresLeaderLock(other)
    assert lock.try_acquire()
    lock.announce("http://127.0.0.1:2")
    assert not other_lock.try_acquire()
    holder = other_lock.holder()
    assert holder is not None and holder.url == "http://127.0.0.1:2"
    leader.put_operation(_op("a"))
    with psycopg.connect(fresh_postgres_url, autocommit=True) as admin:  # the leader's session dies
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND pid <> pg_backend_pid()"
        )
    with pytest.raises(StoreUnavailable):  # no silent reconnect without the lock
        leader.put_operation(_op("b"))
    assert not leader.health().ok
    assert other_lock.try_acquire()  # the lock died with the session
    assert other.get_operation("b") is None and other.get_operation("a") is not None
    other_lock.release()
    leader.close()
    other.close()
