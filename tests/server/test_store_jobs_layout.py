"""The SQLite store keeps job rows in one b-tree by their key (``WITHOUT ROWID``, ``SQLITE_SCHEMA``); a store file
made before, with a rowid table and its key's index, opens with its rows intact and keeps being written."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pooltree.server.store import JobRecord, open_store
from pooltree.server.store.base import SCHEMA
from pooltree.server.store.sqlite import SqliteStore


def _job(operation: str, job: str, state: str = "running", start: float = 2.0) -> JobRecord:
    finish = None if state == "running" else start + 10.0
    return JobRecord(
        operation, job, state, "node-1", start, finish, None, {"task_name": "main", "job_index": 3}
    )


def _jobs_sql(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("SELECT sql FROM sqlite_master WHERE name = 'jobs'").fetchone()[0])


def test_a_new_store_keeps_job_rows_without_rowid(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    store = open_store(f"sqlite:///{path}")
    store.put_jobs([_job("op-1", "job-1"), _job("op-1", "job-2")])
    store.put_jobs([_job("op-1", "job-1", "completed")])
    store.close()
    assert _jobs_sql(path).endswith("WITHOUT ROWID")
    with sqlite3.connect(path) as conn:
        # one b-tree: no index of its own beside the table (the key's is the table)
        assert (
            conn.execute(
                "SELECT name FROM sqlite_master WHERE tbl_name = 'jobs' AND type = 'index'"
            ).fetchall()
            == []
        )
    reopened = open_store(f"sqlite:///{path}")
    assert [(job.id, job.state) for job in reopened.list_jobs("op-1")] == [
        ("job-1", "completed"),
        ("job-2", "running"),
    ]
    reopened.close()


def test_a_store_made_with_a_rowid_jobs_table_opens_with_its_rows_and_takes_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.sqlite"
    with monkeypatch.context() as old_build:
        old_build.setattr(SqliteStore, "schema", SCHEMA)  # the schema every store was made with before
        old = open_store(f"sqlite:///{path}")
        old.put_jobs([_job("op-1", f"job-{index}", start=float(index)) for index in range(5)])
        old.put_jobs([_job("op-1", "job-0", "completed", start=0.0), _job("op-2", "job-9")])
        old.close()
    made = _jobs_sql(path)
    assert "WITHOUT ROWID" not in made

    store = open_store(f"sqlite:///{path}")
    assert [(job.id, job.state) for job in store.list_jobs("op-1")] == [
        ("job-0", "completed"),
        *((f"job-{index}", "running") for index in range(1, 5)),
    ]
    assert store.get_job("op-2", "job-9") == _job("op-2", "job-9")
    store.put_jobs([_job("op-1", "job-1", "failed", start=1.0), _job("op-1", "job-5", start=5.0)])
    assert [job.state for job in store.list_jobs("op-1")] == [
        "completed",
        "failed",
        "running",
        "running",
        "running",
        "running",
    ]
    assert store.delete_operation("op-2") is False  # no operation row, but its jobs go
    assert store.get_job("op-2", "job-9") is None
    store.close()
    assert _jobs_sql(path) == made  # the table is left as it was made
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
