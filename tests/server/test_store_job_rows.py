"""The SQLite store's job rows written straight (``SqliteStore.put_jobs``, the group commit's write of every
heartbeat's rows) end as the generic transaction (``SqlStore.put_jobs`` through ``_transaction``) ends them: the
same rows stored, and the same refusal, store trouble, roll-back and rescued journal when the file is deleted,
replaced or corrupted under it, a statement fails or a row cannot be built."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pooltree.server.store import JobRecord, StoreUnavailable, open_store
from pooltree.server.store.sql import SqlStore
from pooltree.server.store.sqlite import SqliteStore

Writer = Callable[[SqliteStore, Sequence[JobRecord]], None]

WRITERS: dict[str, Writer] = {
    "straight": SqliteStore.put_jobs,
    "generic": SqlStore.put_jobs,
}


def _job(operation: str, job: str, state: str = "running", **document: Any) -> JobRecord:
    finish = None if state == "running" else 12.0
    return JobRecord(operation, job, state, "node-1", 2.0, finish, None, {"task_name": "main", **document})


def _stored(database: Path) -> list[tuple[Any, ...]]:
    store = open_store(f"sqlite:///{database}")
    try:
        return sorted(
            (job.operation_id, job.id, job.state, job.finish_time, tuple(sorted(job.document.items())))
            for operation in ("op-1", "op-2")
            for job in store.list_jobs(operation)
        )
    finally:
        store.close()


def _delete_journal(database: Path) -> None:
    database.with_name(database.name + "-wal").unlink()


def _replace_database(database: Path) -> None:
    database.rename(database.with_name("moved-away"))
    database.write_bytes(b"")


def _corrupt_header(database: Path) -> None:
    with open(database, "r+b") as handle:
        handle.write(b"not a database!!")
        handle.flush()
        os.fsync(handle.fileno())


def _outcome(
    tmp_path: Path, writer: Writer, late: Sequence[JobRecord], damage: Callable[[Path], None] | None
) -> tuple[tuple[str, str] | None, str | None, list[tuple[Any, ...]] | None]:
    """Write two batches, damage the file (or not), write ``late``: (what the late write raised, the store's
    health error, the rows a new store reads)."""
    database = tmp_path / "state" / "pooltree.db"
    store = open_store(f"sqlite:///{database}")
    assert isinstance(store, SqliteStore)
    raised: tuple[str, str] | None = None
    try:
        writer(store, [_job("op-1", "a"), _job("op-1", "b"), _job("op-2", "c")])
        writer(store, [_job("op-1", "a", "completed", exit_code=0), _job("op-2", "d")])
        if damage is not None:
            damage(database)
        try:
            writer(store, late)
        except Exception as error:  # compared between the writers below
            raised = (type(error).__name__, str(error))
        health = store.health().error
    finally:
        store.close()
    # the two writers' stores live in folders of their own: their messages compared without it
    if raised is not None:
        raised = (raised[0], raised[1].replace(str(tmp_path), "DIR"))
    health = health.replace(str(tmp_path), "DIR") if health is not None else None
    if damage is _corrupt_header or damage is _replace_database:  # the rows' file is no longer at the path
        return raised, health, None
    return raised, health, _stored(database)


LATE = [_job("op-1", "b", "failed", exit_code=1), _job("op-2", "e")]
SCENARIOS: dict[str, tuple[Sequence[JobRecord], Callable[[Path], None] | None]] = {
    "stored": (LATE, None),
    "journal_deleted": (LATE, _delete_journal),
    "database_replaced": (LATE, _replace_database),
    "header_corrupted": (LATE, _corrupt_header),
    # NOT NULL refused by SQLite after the first row went in: a database error, the batch rolled back
    "statement_fails": ([_job("op-2", "f"), JobRecord("op-2", "g", None, "node-1", 2.0)], None),  # type: ignore[arg-type]
    # a document that is no JSON: refused before any statement, the store not in trouble
    "row_not_built": ([_job("op-2", "h"), _job("op-2", "i", note=object())], None),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_straight_write_ends_as_the_generic_transaction(tmp_path: Path, scenario: str) -> None:
    late, damage = SCENARIOS[scenario]
    outcomes = {name: _outcome(tmp_path / name, writer, late, damage) for name, writer in WRITERS.items()}
    straight, generic = outcomes["straight"], outcomes["generic"]
    assert straight == generic
    raised, health, rows = straight
    if scenario == "stored":
        assert raised is None and health is None
        assert (
            rows is not None
            and ("op-1", "b", "failed", 12.0, (("exit_code", 1), ("task_name", "main"))) in rows
        )
        assert any(row[1] == "e" for row in rows)
        return
    assert raised is not None
    if scenario == "row_not_built":
        assert raised[0] != StoreUnavailable.__name__ and health is None
    else:
        assert raised[0] in (StoreUnavailable.__name__, "_FileProblem") and health is not None
    expected = {
        "journal_deleted": "journal",
        "database_replaced": "replaced",
        "header_corrupted": "corrupted",
        "statement_fails": "IntegrityError",
    }.get(scenario)
    if expected is not None:
        assert health is not None and expected in health, health
    if rows is not None:  # the late batch left nothing; what was acknowledged before is kept
        assert {row[1] for row in rows} == {"a", "b", "c", "d"}
        assert ("op-1", "b", "running", None, (("task_name", "main"),)) in rows
