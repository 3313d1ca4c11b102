"""SQLite reads do not wait for each other: a read in flight (a listing whose thread lost the GIL between two of
its rows: ``sqlite3`` lets it go at every row) holds its own reader connection, not a lock every read takes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pooltree.server.store import OperationRecord, open_store

WAIT = 10.0
"""Seconds a read may take while another is paused (bounded waits, no fixed sleeps)."""


def _record(operation_id: str, start_time: float) -> OperationRecord:
    return OperationRecord(
        id=operation_id,
        type="vanilla",
        state="pending",
        user="alice",
        pool="queue",
        start_time=start_time,
        spec={"tasks": {}},
    )


def test_a_read_is_answered_while_another_read_is_paused(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        for i in range(3):
            store.put_operation(_record(f"op-{i}", float(i)))
        plain = store._read_transaction
        paused, resume = threading.Event(), threading.Event()
        holder_ident: list[int] = []

        @contextmanager
        def pausing() -> Iterator[Any]:
            with plain() as cur:
                if threading.get_ident() == holder_ident[0]:  # the first read stops half-way
                    paused.set()
                    resume.wait(3 * WAIT)  # longer than the other read is given
                yield cur

        store._read_transaction = pausing  # type: ignore[method-assign]
        results: list[Any] = []

        def hold() -> None:
            holder_ident.append(threading.get_ident())
            results.append(store.list_operations())

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert paused.wait(WAIT)
            answered: list[Any] = []
            reader = threading.Thread(target=lambda: answered.append(store.get_operation("op-1")))
            reader.start()
            reader.join(WAIT)
            assert answered, "a read waited for another read in flight"
            assert answered[0] is not None and answered[0].id == "op-1"
        finally:
            resume.set()
            holder.join(WAIT)
        assert [record.id for record in results[0]] == ["op-2", "op-1", "op-0"]
    finally:
        store.close()
