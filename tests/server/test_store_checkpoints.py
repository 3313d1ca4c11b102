"""The SQLite store's log is copied into the database file off the heartbeats' path: the group commit runs the
store's checkpoint on a thread of its own after a batch's waiters were woken (``GroupCommit``'s ``after_batch``,
``SqliteStore.checkpoint_journal``), beside the next batches' writes (its own connection, not the store's lock),
never inside a commit a waiter waits for; the log stays bounded, by those checkpoints (a second pass with the
writes held lets it start again) and, for writes that come another way, by SQLite's own; the file check runs
before each checkpoint, so a checkpoint never puts back a header overwritten under the store."""

from __future__ import annotations

import asyncio
import sqlite3
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

import pooltree.server.store.sqlite as sqlite_store
from pooltree.server.live import LiveScheduler
from pooltree.server.store import JobRecord, open_store
from pooltree.server.store.sqlite import SQLITE_HEADER, SqliteStore

WAIT = 20.0
BODY = {"pad": "x" * 300}


def _rows(first: int, count: int) -> list[JobRecord]:
    return [
        JobRecord("op-1", f"job-{first + k}", "running", "node-1", 1.0, None, None, BODY)
        for k in range(count)
    ]


def _open(database: Path) -> SqliteStore:
    store = open_store(f"sqlite:///{database}")
    assert isinstance(store, SqliteStore)
    return store


def _frames(store: SqliteStore) -> tuple[int, int]:
    """(the log's frames, those copied into the database file), read here from the ``-shm`` index's header (its
    ``mxFrame`` and the checkpoint's ``nBackfill``, host byte order), not by the store's own reading."""
    with store.path.with_name(store.path.name + "-shm").open("rb") as handle:
        head = handle.read(100)
    return struct.unpack_from("=I", head, 16)[0], struct.unpack_from("=I", head, 96)[0]


def _grown(before: tuple[int, int], after: tuple[int, int]) -> int:
    """Frames one write added to the log (it restarts the log when everything in it was copied: no reader here)."""
    restarted = after[0] < before[0] or before[1] == before[0]
    return after[0] if restarted else after[0] - before[0]


def _fill(store: SqliteStore, pending: int, first: int = 0) -> int:
    """Direct writes (no group commit) until the log holds ``pending`` frames not yet copied; the next job number."""
    for _ in range(200):
        frames, copied = _frames(store)
        if frames - copied >= pending:
            return first
        store.put_jobs(_rows(first, 10))
        first += 10
    raise AssertionError("the log did not grow")


class Observed:
    """The store's ``put_jobs`` with the log's (frames, copied) read right after each call, on the calling thread
    (the group commit's): what the call left, before anything that runs after it."""

    def __init__(self, store: SqliteStore) -> None:
        self._write = store.put_jobs
        self._store = store
        self.after: list[tuple[int, int]] = []
        self.before: list[tuple[int, int]] = []

    def __call__(self, records: Sequence[JobRecord]) -> None:
        self.before.append(_frames(self._store))
        self._write(records)
        self.after.append(_frames(self._store))


def test_no_checkpoint_runs_inside_a_group_commit_write(tmp_path: Path) -> None:
    """Heartbeats' batches through the scheduler's group commit, past twice SQLite's automatic bound: the store's
    checkpoints run on the group commit's checkpoint thread, never on its writer's, and the log stays under the
    bound at which SQLite would copy it inside a commit (a waiter's). Before session 37, the commit that brought
    the log to 1,000 frames copied it inside itself, with every waiter of its batch waiting."""
    store = _open(tmp_path / "scheduler.db")
    observed = Observed(store)
    store.put_jobs = observed  # type: ignore[method-assign]  # the group commit's writer, observed
    threads: list[str] = []
    checkpoint = store.checkpoint_journal

    def named() -> int | None:
        threads.append(threading.current_thread().name)
        return checkpoint()

    store.checkpoint_journal = named  # type: ignore[method-assign]
    live = LiveScheduler(store)

    async def heartbeats() -> None:
        # twice SQLite's own bound (about 400 batches at its default), at most 20,000 batches
        for index in range(20_000):
            await live.commits.wait_async(live.commits.submit(_rows(100 * index, 20)))
            grown = (_grown(b, a) for b, a in zip(observed.before, observed.after, strict=True))
            if index % 50 == 49 and sum(grown) > 2 * store.autocheckpoint_frames + 100:
                return

    try:
        asyncio.run(heartbeats())
        grown = [_grown(before, after) for before, after in zip(observed.before, observed.after, strict=True)]
        written, largest = sum(grown), max(grown)
        assert written > 2 * store.autocheckpoint_frames
        assert max(frames for frames, _ in observed.after) < store.autocheckpoint_frames
        assert store.checkpoints >= 1 and store.checkpoint_failures == 0
        assert set(threads) == {"group-commit-after"}
        assert largest < store.checkpoint_frames
    finally:
        live.commits.close()
        store.close()


def test_a_checkpoint_copies_beside_a_write(tmp_path: Path) -> None:
    """A checkpoint does not wait for the store's lock (a write holding it, here the test): it copies what was
    committed, on its own connection. Before, it ran under the store's lock, so the group commit's next batch
    waited for the copy and its syncs (this test timed out there)."""
    store = _open(tmp_path / "scheduler.db")
    try:
        _fill(store, store.checkpoint_frames)
        frames = _frames(store)
        copied: list[int | None] = []
        with store._lock:  # a write under way
            thread = threading.Thread(target=lambda: copied.append(store.checkpoint_journal()))
            thread.start()
            thread.join(WAIT)
            assert not thread.is_alive(), "the checkpoint waited for the store's lock"
        assert copied == [frames[0]] and _frames(store) == (frames[0], frames[0])
        assert store.checkpoints_holding_writes == 0
    finally:
        store.close()


def test_the_log_starts_again_after_writes_beside_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frames the checkpoint's copy did not take (here: written while a reader held an older snapshot, which the
    copy may not pass, the reader gone right after the copy, as frames committed during a copy are left), SQLite's
    own checkpoint turned off. SQLite starts the log again only at a write that begins with everything in it
    copied, which a copy made beside the writes seldom leaves, so before the second pass the log grew without
    bound under steady writes (a probe of the mechanism: ~100 MB in 8 s); the second pass, with the writes held,
    copies the rest, and the next write starts the log again.

    Deterministic: the frames left behind are made so every time, not left to two threads' timing (a free-running
    writer and checkpointer, bounded by the log's largest size, failed on a loaded CI machine)."""
    monkeypatch.setenv("POOLTREE_CHECKPOINT_FRAMES", "64")
    store = _open(tmp_path / "scheduler.db")
    store._conn.execute("PRAGMA wal_autocheckpoint=0")
    copy = sqlite_store._checkpoint
    reader = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    passes: list[tuple[int, int]] = []

    def copy_then_release_the_reader(connection: sqlite3.Connection) -> object:
        row = copy(connection)
        passes.append(_frames(store))
        if reader.in_transaction:
            reader.execute("COMMIT")  # its snapshot no longer holds the copy back
        return row

    monkeypatch.setattr(sqlite_store, "_checkpoint", copy_then_release_the_reader)
    try:
        first = 0
        for _round in range(3):
            passes.clear()
            first = _fill(store, store.checkpoint_frames, first)
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM jobs").fetchall()  # a snapshot of the log as it is now
            store.put_jobs(_rows(first, 20))  # frames after the reader's snapshot
            first += 20
            assert store.checkpoint_journal() is not None
            frames, copied = passes[0]
            assert copied < frames, (passes, "the first copy passed the reader's snapshot")
            store.put_jobs(_rows(first, 10))
            first += 10
            after = _frames(store)
            assert after[0] < frames, (after, passes, "the log did not start again")
            assert after[1] == 0
        assert store.checkpoints_holding_writes == 3
    finally:
        reader.close()
        store.close()


def test_a_waiter_is_released_before_the_checkpoint_runs(tmp_path: Path) -> None:
    """The store's checkpoint held back (a gate the test opens only after the waiter returned): the heartbeat's
    wait returns anyway, then the checkpoint runs on the group commit's thread and copies the log. Before, no
    checkpoint ran after the batch (the log below SQLite's bound stayed uncopied) and this test failed at
    ``entered``."""
    store = _open(tmp_path / "scheduler.db")
    entered, release, done = threading.Event(), threading.Event(), threading.Event()
    copied: list[int | None] = []
    checkpoint = getattr(store, "checkpoint_journal", lambda: None)

    def gated() -> int | None:
        entered.set()
        assert release.wait(WAIT)
        copied.append(checkpoint())
        done.set()
        return copied[-1]

    store.checkpoint_journal = gated  # type: ignore[method-assign]
    live = LiveScheduler(store)
    try:
        first = _fill(store, store.checkpoint_frames)
        before = _frames(store)

        async def heartbeat() -> None:
            await asyncio.wait_for(live.commits.wait_async(live.commits.submit(_rows(first, 5))), WAIT)

        asyncio.run(heartbeat())
        assert not release.is_set()  # returned with the checkpoint not yet let run
        assert entered.wait(WAIT), "no checkpoint after the batch"
        assert _frames(store)[1] == before[1]  # nothing copied yet
        release.set()
        assert done.wait(WAIT)
        frames, done_frames = _frames(store)
        assert copied[0] is not None and copied[0] >= store.checkpoint_frames
        assert done_frames == frames  # the whole log is in the database file
        assert store.checkpoints == 1
    finally:
        release.set()
        live.commits.close()
        store.close()


def test_the_log_stays_bounded_under_a_burst(tmp_path: Path) -> None:
    """A burst of 3,000 heartbeats through the group commit with twenty waiting at any time, so the commits never
    pause (a batch is always queued behind the one being written, while the checkpoints run beside them): the log's
    length and its file stay under SQLite's own bound plus the largest batch, and the store's checkpoints ran."""
    database = tmp_path / "scheduler.db"
    store = _open(database)
    observed = Observed(store)
    store.put_jobs = observed  # type: ignore[method-assign]
    live = LiveScheduler(store)

    async def burst() -> None:
        in_flight = asyncio.Semaphore(20)

        async def heartbeat(index: int) -> None:
            async with (
                in_flight
            ):  # twenty waiting at any time: a batch is always queued behind the one written
                await live.commits.wait_async(live.commits.submit(_rows(10 * index, 3)))

        await asyncio.gather(*(heartbeat(index) for index in range(3000)))

    try:
        asyncio.run(burst())
        assert len(observed.after) > 10  # many batches
        largest = max(
            _grown(before, after) for before, after in zip(observed.before, observed.after, strict=True)
        )
        most = max(frames for frames, _ in observed.after)
        assert most < store.autocheckpoint_frames + largest  # SQLite's bound, whatever the checkpoints' pace
        page = 4096 + 24  # a frame: its header and the page
        assert database.with_name(database.name + "-wal").stat().st_size <= 32 + page * (
            store.autocheckpoint_frames + largest
        )
        assert store.checkpoints >= 1 and store.checkpoint_failures == 0
    finally:
        live.commits.close()
        store.close()


def test_writes_outside_the_group_commit_keep_sqlites_bound(tmp_path: Path) -> None:
    """Writes that do not come through the group commit's thread (no ``checkpoint_journal`` after them): SQLite's
    own checkpoint inside the commit that reaches ``AUTOCHECKPOINT_FRAMES`` still bounds the log."""
    store = _open(tmp_path / "scheduler.db")
    try:
        most, written = 0, 0
        for index in range(20_000):  # twice SQLite's own bound (about 300 writes at its default)
            if written > 2 * store.autocheckpoint_frames + 100:
                break
            before = _frames(store)
            store.put_jobs(_rows(20 * index, 20))
            after = _frames(store)
            written += _grown(before, after)
            most = max(most, after[0] - after[1])
        assert written > 2 * store.autocheckpoint_frames
        assert most < store.autocheckpoint_frames + 50
        assert store.checkpoints == 0
    finally:
        store.close()


def _overwrite_header(database: Path) -> None:
    with database.open("r+b") as handle:
        handle.write(b"\0" * 100)


def test_a_checkpoint_never_puts_back_an_overwritten_header(tmp_path: Path) -> None:
    """A checkpoint writes the file's first page: one run over a header overwritten under the store would hide it
    from the next commit's check. The check runs first: the store goes into trouble, the header stays as found,
    nothing is copied, and the next write is refused."""
    database = tmp_path / "scheduler.db"
    store = _open(database)
    try:
        first = _fill(store, store.checkpoint_frames)
        _overwrite_header(database)
        assert store.checkpoint_journal() is None
        assert store.checkpoints == 0
        assert database.read_bytes()[: len(SQLITE_HEADER)] == b"\0" * len(SQLITE_HEADER)
        assert not store.health().ok and "corrupted" in str(store.health().error)
        with pytest.raises(Exception, match="corrupted"):
            store.put_jobs(_rows(first, 1))
    finally:
        store.close()


def test_a_deleted_journal_is_rescued_not_checkpointed_over(tmp_path: Path) -> None:
    """The log deleted under the store, found by the check before a checkpoint: the store goes into trouble and
    rescues what the open log holds into the database file, as the next commit's check would; a new store reads
    every acknowledged row."""
    database = tmp_path / "scheduler.db"
    store = _open(database)
    try:
        first = _fill(store, store.checkpoint_frames)
        database.with_name(database.name + "-wal").unlink()
        assert store.checkpoint_journal() is None
        assert not store.health().ok and "deleted" in str(store.health().error)
        assert store.checkpoint_journal() is None  # nothing more while in trouble
        assert store.checkpoints == 0
    finally:
        store.close()
    reopened = _open(database)
    try:
        assert {job.id for job in reopened.list_jobs("op-1")} == {f"job-{k}" for k in range(first)}
    finally:
        reopened.close()


def test_no_checkpoint_below_the_threshold_or_after_close(tmp_path: Path) -> None:
    store = _open(tmp_path / "scheduler.db")
    store.put_jobs(_rows(0, 5))
    assert store.checkpoint_journal() is None
    _fill(store, store.checkpoint_frames, 5)
    store.close()
    assert store.checkpoint_journal() is None
    assert store.checkpoints == 0
