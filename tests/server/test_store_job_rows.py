"""The SQLite store's job rows written straight (``SqliteStore.put_jobs``, the group commit's write of every
heartbeat's rows) end as the generic transaction (``SqlStore.put_jobs`` through ``_transaction``) ends them, and
both, writing many rows a statement (``SqliteStore._write_job_rows``), as one statement a row
(``SqlStore._write_job_rows``, ``executemany``) ends them: the same rows stored, and the same refusal, store
trouble, roll-back and rescued journal when the file is deleted, replaced or corrupted under it, a statement fails
or a row cannot be built."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pooltree.server.store import JobRecord, StoreUnavailable, open_store
from pooltree.server.store.sql import SqlStore
from pooltree.server.store.sqlite import ROWS_PER_STATEMENT, ROWS_STEP, SqliteStore, job_row_chunks

Writer = Callable[[SqliteStore, Sequence[JobRecord]], None]


def _a_statement_a_row(store: SqliteStore, records: Sequence[JobRecord]) -> None:
    """The generic transaction with one statement a row (``SqlStore._write_job_rows``: ``executemany``)."""
    store._write_job_rows = SqlStore._write_job_rows.__get__(store)  # type: ignore[method-assign]
    try:
        SqlStore.put_jobs(store, records)
    finally:
        del store._write_job_rows


WRITERS: dict[str, Writer] = {
    "straight": SqliteStore.put_jobs,
    "generic": SqlStore.put_jobs,
    "a_statement_a_row": _a_statement_a_row,
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
    assert straight == generic == outcomes["a_statement_a_row"]
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


def _statements(store: SqliteStore) -> list[str]:
    """The job upserts the store's writer connection runs from now on (its trace callback)."""
    seen: list[str] = []
    store._conn.set_trace_callback(
        lambda sql: seen.append(sql) if sql.startswith("INSERT INTO jobs") else None
    )
    return seen


@pytest.mark.parametrize("largest", [256, 3])
def test_many_rows_a_statement_store_what_a_statement_a_row_stores(tmp_path: Path, largest: int) -> None:
    """A batch of a few hundred rows (a post-update burst's), with rows of one job repeated (the last wins) and
    every column's kinds, is stored as one statement a row stores it, in a few statements
    (``job_row_chunks``: 441 rows in 3 of at most 256; a library that allows fewer variables, fewer rows each)."""
    records = [
        JobRecord(
            f"op-{index % 300 % 7}",
            f"job-{index % 300}",
            "running" if index < 300 else "completed",
            f"node-{index}",
            1000.0 + index / 3,
            None if index < 300 else 2000.0 + index / 7,
            None if index % 2 else f"stderr-{index}",
            {"task_name": "main", "index": index, "ratio": index / 9, "nested": {"a": [index]}},
        )
        for index in range(441)
    ]
    stored: dict[str, list[JobRecord]] = {}
    for name, writer in (("many", SqliteStore.put_jobs), ("one", _a_statement_a_row)):
        store = open_store(f"sqlite:///{tmp_path / name / 'pooltree.db'}")
        assert isinstance(store, SqliteStore)
        store._rows_per_statement = largest
        statements = _statements(store)
        writer(store, records)
        expected = len(records) if name == "one" else len(job_row_chunks(len(records), largest))
        assert len(statements) == expected
        stored[name] = [job for operation in range(7) for job in store.list_jobs(f"op-{operation}")]
        store.close()
    assert stored["many"] == stored["one"] and len(stored["many"]) == 300
    if largest == 256:
        assert job_row_chunks(441) == [256, 176, 9]


def test_a_batch_s_statements_are_few_and_of_few_shapes() -> None:
    """Every batch size from 0 to 1,000 rows: the chunks add up, none passes the largest, at most two are below
    it, and all the sizes used are at most 31 (the statement texts the connection's cache holds)."""
    shapes: set[int] = set()
    for count in range(1001):
        chunks = job_row_chunks(count)
        assert sum(chunks) == count and all(0 < chunk <= ROWS_PER_STATEMENT for chunk in chunks)
        assert sum(1 for chunk in chunks if chunk < ROWS_PER_STATEMENT) <= 2
        shapes.update(chunks)
    assert len(shapes) <= 2 * ROWS_STEP - 1 and job_row_chunks(5, 1) == [1] * 5


def _write_calls() -> int:
    """The process's write system calls so far (``/proc/self/io``'s ``syscw``)."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("syscw:"))


def _log_frames(database: Path) -> tuple[int, int]:
    """(the log's frames, those copied into the database file), from the ``-shm`` index's header."""
    head = database.with_name(database.name + "-shm").read_bytes()[:100]
    return int.from_bytes(head[16:20], sys.byteorder), int.from_bytes(head[96:100], sys.byteorder)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts write calls in /proc/self/io (Linux)")
def test_a_batch_writes_its_log_frames_and_no_statement_journal(tmp_path: Path) -> None:
    """A statement of many rows inside the transaction keeps the pages it changes in a statement journal (to undo
    the statement alone); past 64 KiB SQLite spilled it to a temporary file (open, a write per page and its
    header, unlink, close: in ~15% of the live transactions, ``bench/RESULTS.md``, session 38). The
    writer keeps it in memory (``temp_store=MEMORY``): a batch's write calls are its log frames' (two a frame:
    header and page) and nothing else."""
    database = tmp_path / "store.sqlite"
    store = open_store(f"sqlite:///{database}")
    assert isinstance(store, SqliteStore)
    try:
        pad = "x" * 300
        for first in range(0, 2000, 200):
            store.put_jobs([_job("op-1", f"job-{k:05d}", pad=pad) for k in range(first, first + 200)])
        before, calls = _log_frames(database), _write_calls()
        # finishes of jobs spread over the table: one statement changes ~170 pages that existed before it
        store.put_jobs(
            [_job("op-1", f"job-{k:05d}", "completed", pad=pad) for k in range(0, 2000, 8)][
                :ROWS_PER_STATEMENT
            ]
        )
        calls, after = _write_calls() - calls, _log_frames(database)
    finally:
        store.close()
    assert after[1] == before[1] and after[0] > before[0], (before, after)  # no checkpoint, the log grew
    frames = after[0] - before[0]
    assert frames > 100
    assert calls <= 2 * frames, (calls, frames)
