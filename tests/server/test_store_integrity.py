"""Store integrity: a deleted SQLite journal is noticed like a deleted database and loses no acknowledged commit
across a kill -9; the leader lock holds on the database itself (a symlink, a deleted ``.lock`` file or a second
path cannot make two leaders); a finishing operation's job rows are committed with its completion."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import JobRecord, Mutation, OperationRecord, StoreUnavailable, open_store
from pooltree.server.store.leadership import SqliteLeaderLock
from pooltree.server.store.sqlite import SqliteStore

WRITER = textwrap.dedent(
    """
    import sys
    from pooltree.server.store import OperationRecord, StoreUnavailable, open_store

    store = open_store(sys.argv[1])
    for index in range(50):
        store.put_operation(OperationRecord(f"op-{index}", "vanilla", "running", "alice", None, float(index)))
    print("acknowledged 50", flush=True)
    sys.stdin.readline()  # the test deletes the journal now
    if sys.argv[2:] == ["read-first"]:  # a read (a listing) comes before the next write
        try:
            print("read", len(store.list_operations()), flush=True)
        except StoreUnavailable as error:
            print("read refused:", error.message, flush=True)
    try:
        store.put_operation(OperationRecord("op-late", "vanilla", "running", "alice", None, 99.0))
        print("late write acknowledged", flush=True)
    except StoreUnavailable as error:
        print("refused:", error.message, flush=True)
    print("health:", store.health().error, flush=True)
    sys.stdin.readline()  # killed here with SIGKILL: no clean close
    """
)


@pytest.mark.parametrize("first", ["write", "read-first"])
def test_a_deleted_journal_puts_the_store_in_trouble_and_loses_no_acknowledged_commit(
    tmp_path: Path, first: str
) -> None:
    # read-first: a reader connection's first read after the deletion made a new empty journal under the path,
    # and every acknowledged commit was lost (the readers now read once when the store opens them)
    database = tmp_path / "state" / "pooltree.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, f"sqlite:///{database}", first],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdin is not None and writer.stdout is not None
        assert writer.stdout.readline().strip() == "acknowledged 50"
        journal = database.with_name(database.name + "-wal")
        assert journal.exists()
        journal.unlink()
        writer.stdin.write("go\n")
        writer.stdin.flush()
        if first == "read-first":
            assert writer.stdout.readline().strip() == "read 50"
        answer = writer.stdout.readline()
        health = writer.stdout.readline()
        assert answer.startswith("refused:") and "journal" in answer and "deleted" in answer, answer
        assert "deleted" in health, health
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=20)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=20)
    store = open_store(f"sqlite:///{database}")
    try:
        ids = {record.id for record in store.list_operations()}
        assert {f"op-{index}" for index in range(50)} <= ids  # every acknowledged start survived
        assert "op-late" not in ids
    finally:
        store.close()


def test_a_replaced_journal_is_noticed_by_the_watch(tmp_path: Path) -> None:
    database = tmp_path / "pooltree.db"
    store = open_store(f"sqlite:///{database}")
    try:
        store.set_value("k", 1)
        journal = database.with_name(database.name + "-wal")
        journal.rename(tmp_path / "moved-away")
        journal.write_bytes(b"")
        health = store.probe()
        assert not health.ok and health.error is not None and "replaced" in health.error
        with pytest.raises(StoreUnavailable):
            store.set_value("k", 2)
    finally:
        store.close()
    reopened = open_store(f"sqlite:///{database}")
    try:
        assert reopened.get_value("k") == 1
    finally:
        reopened.close()


def test_two_leaders_on_one_database_are_impossible(tmp_path: Path) -> None:
    real = tmp_path / "real" / "pooltree.db"
    link = tmp_path / "link.db"
    first = SqliteLeaderLock(real)
    assert first.try_acquire()
    try:
        link.symlink_to(real)
        assert not SqliteLeaderLock(link).try_acquire()  # another path to the same database
        lock_file = real.with_name(real.name + ".lock")
        assert lock_file.exists()
        holder = SqliteLeaderLock(link).holder()
        assert holder is not None and holder.pid == os.getpid()
        lock_file.unlink()  # deleting the description frees nothing
        assert not SqliteLeaderLock(real).try_acquire()
        assert not SqliteLeaderLock(link).try_acquire()
        os.link(real, tmp_path / "hard.db")
        assert not SqliteLeaderLock(tmp_path / "hard.db").try_acquire()
    finally:
        first.release()
    second = SqliteLeaderLock(link)
    assert second.try_acquire()  # free once the leader is gone
    second.release()


class CrashAfterOperationCommit(SqliteStore):
    """A store that "dies" (raises) at the first job write after an operation was committed completed, the place
    where a kill -9 lands between the two commits of a heartbeat that finishes an operation."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.completed_committed = False

    def put_operation(
        self, record: OperationRecord, *, mutation: Mutation | None = None, jobs: Sequence[JobRecord] = ()
    ) -> None:
        super().put_operation(record, mutation=mutation, jobs=jobs)
        if record.state == "completed":
            self.completed_committed = True

    def put_jobs(self, records: Sequence[JobRecord]) -> None:
        if self.completed_committed:
            raise SystemExit("killed")
        super().put_jobs(records)


def test_a_finishing_operations_jobs_are_committed_with_its_completion(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    store = CrashAfterOperationCommit(path)
    live = LiveScheduler(store)
    live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": {}}}), None, 0.0)
    op = live.start_operation(
        "vanilla", {"tasks": {"main": {"command": "true", "job_count": 2}}}, "alice", 1.0
    )
    limits = {"user_slots": 2, "cpu": 2, "memory": 4 << 30}
    started = live.process_heartbeat(parse_heartbeat({"node_address": "n1", "resource_limits": limits}), 2.0)
    assert len(started["start"]) == 2
    finished = [
        {
            "job_id": spec["job_id"],
            "operation_id": op.id,
            "state": "completed",
            "exit_code": 0,
            "finish_time": 3.0,
        }
        for spec in started["start"]
    ]
    with contextlib.suppress(SystemExit):  # raised only if a job row is written after the completion
        live.process_heartbeat(
            parse_heartbeat({"node_address": "n1", "resource_limits": limits, "finished_jobs": finished}), 3.0
        )
    store.close()
    reopened = open_store(f"sqlite:///{path}")
    try:
        record = reopened.get_operation(op.id)
        assert record is not None and record.state == "completed"
        states = {job.id: job.state for job in reopened.list_jobs(op.id)}
        assert states == {spec["job_id"]: "completed" for spec in started["start"]}
    finally:
        reopened.close()
