"""SQLite store: the embedded default (one file, WAL journal; one connection under a lock writes, ``READERS`` others
read, each read on one of its own, so a listing waits neither for a start's commit nor for another read: WAL
readers see the last commit).

The file is watched: every transaction checks, before it commits, that the path still names the file the store
opened (same device and inode) and that its header is still SQLite's. A deleted, replaced or overwritten file
puts the store in trouble (``Store.health()``), so nothing more is acknowledged into a file nobody will read
again; the scheduler must be restarted on a good file. The write-ahead log (``<file>-wal``) is watched the same way:
commits not yet checkpointed live only there, so when it is deleted or replaced the store goes into trouble and
first checkpoints what SQLite still holds open into the database file (nothing acknowledged is lost).

Checkpoints: SQLite copies the log into the database file inside the commit that brings it to
``wal_autocheckpoint`` pages, so that commit (and whoever waits for it) waits for the copy. The group commit calls
``checkpoint_journal`` on a thread of its own after a batch's waiters were woken (``live/commit.py``), which copies
the log once it holds ``CHECKPOINT_FRAMES`` frames not yet copied, on a connection of its own beside the writes (no
commit waits for the copy and its syncs; a second pass with the writes held, when frames came meanwhile, lets
SQLite start the log again); SQLite's own checkpoint, at twice ``CHECKPOINT_FRAMES`` (at least
``AUTOCHECKPOINT_FRAMES``), stays as the bound for writes that come another way. A checkpoint runs after the same file check a commit makes.

The writer keeps its temporary files in memory (``temp_store=MEMORY``): a multi-row statement's statement journal
(the pages it changes, kept to undo the statement alone inside its transaction) no longer spills to a temporary file
past 64 KiB (live, in ~15% of the group commit's transactions, ~20 page writes and five file calls each;
``bench/RESULTS.md``, session 38).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import Any

from pooltree.security.sealing import Sealer
from pooltree.server.knobs import count_override
from pooltree.server.stalls import StallRing
from pooltree.server.store.base import (
    JOURNAL_BOUND,
    JobRecord,
    OperationFilter,
    StoreError,
    StoreHealth,
    StoreUnavailable,
    load_json,
    operation_page_sql,
)
from pooltree.server.store.sql import SqlStore

SQLITE_HEADER = b"SQLite format 3\x00"
READERS = 4
"""Reader connections: reads on different ones run at once (WAL: each sees the last commit). With one connection
under one lock, a listing that lost the GIL between two of its rows (``sqlite3`` lets it go at every row) held
every other read meanwhile: another listing, a start's mutation-id check (session 28's ``live_queue --split``)."""

CHECKPOINT_FRAMES = 1024
"""Frames of the log not yet copied into the database file past which ``checkpoint_journal`` copies them: ~4 MiB,
about 4 copies a second at 1,000 loaded heartbeats a second, each ~10-20 ms here (beside the writes). A job's rows
dirty the same pages again within a few seconds (the table's last page, the index's inner pages, a row's page at
its start and at its end), and a copy writes each page once, however many frames the log holds of it: at 256 (the
default until session 40, when a copy held the writes and had to be short) the store's CPU a job row was ~18%
higher in the replay of 1,000 nodes' rows (``bench/job_rows.py``; ``bench/RESULTS.md``, session 40).
``POOLTREE_CHECKPOINT_FRAMES`` (a whole number in [16, 16384]) overrides it, for comparisons
(``checkpoint_frames``)."""
AUTOCHECKPOINT_FRAMES = 1000
"""SQLite's own checkpoint inside the commit that brings the log to this many frames (its default), or twice
the store's checkpoint frames when that is more (2,048 at ``CHECKPOINT_FRAMES``), so that SQLite's never comes
first: the log's bound when ``checkpoint_journal`` is not called (writes outside the group commit's thread) or fell
behind; ``JOURNAL_BOUND`` is its size at ``CHECKPOINT_FRAMES``."""
PAGE_SIZE = 4096
"""SQLite's default page size, which the store keeps (other sizes cost more a job row: ``bench/RESULTS.md``,
session 39): the log's size per frame, near enough, for ``journal_size_limit``."""


def checkpoint_frames() -> int:
    """``POOLTREE_CHECKPOINT_FRAMES`` when it is a whole number in [16, 16384], else ``CHECKPOINT_FRAMES``."""
    return count_override("POOLTREE_CHECKPOINT_FRAMES", CHECKPOINT_FRAMES, 16, 16384)


WAL_INDEX_HEADER = 48
"""Bytes of one copy of the log's index header at the start of ``<file>-shm`` (SQLite keeps two, the second right
after the first); ``mxFrame`` (the log's last valid frame) is at offset 16, both in the host's byte order, and the
checkpoint's ``nBackfill`` (frames already copied) right after the two copies."""
WAL_INDEX_VERSION = 3007000

log = logging.getLogger(__name__)


class SqliteStore(SqlStore):
    """``Store`` in a SQLite file; ``path`` is created (with parent folders) if missing.

    Sealed secrets use ``sealer``; without one, the key file ``<path>.key`` beside the database (mode 0600,
    created when missing): outside the database, so a copy of the database alone holds no secret.
    """

    placeholder = "?"
    database_errors = (sqlite3.Error,)
    code_point_ids = True  # TEXT compares with BINARY collation: UTF-8 bytes, the code points' order

    def __init__(self, path: str | Path, *, url: str | None = None, sealer: Sealer | None = None) -> None:
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            sealer = sealer if sealer is not None else Sealer.from_file(path.with_name(path.name + ".key"))
        except OSError as error:
            raise StoreError(f"cannot open SQLite store {path}: {_reason(error)}") from error
        super().__init__(url or f"sqlite:///{path}", sealer=sealer)
        self.path = path
        self._fd: int | None = None
        self.long_commits = StallRing()
        """``COMMIT`` statements of at least ``STALL_SECONDS`` (a checkpoint of the WAL into the database file runs
        inside the commit that crosses ``wal_autocheckpoint``) and ``checkpoint_journal``'s checkpoints as long
        (``live/tail.py``)."""
        self.checkpoint_frames = checkpoint_frames()
        """Frames not yet copied past which ``checkpoint_journal`` copies the log (``CHECKPOINT_FRAMES``)."""
        self.autocheckpoint_frames = max(AUTOCHECKPOINT_FRAMES, 2 * self.checkpoint_frames)
        """SQLite's own checkpoint's bound (``wal_autocheckpoint``): ``AUTOCHECKPOINT_FRAMES``, or twice
        ``checkpoint_frames`` when that is more, so that SQLite's never comes before the store's."""
        self.checkpoints = 0
        """Checkpoints ``checkpoint_journal`` ran (each a ``PASSIVE`` one)."""
        self.checkpoint_failures = 0
        """Those that raised (logged; nothing is lost: the log holds what they did not copy)."""
        self.checkpoints_holding_writes = 0
        """Of the checkpoints, those that ran a second pass with the writes held, to let the log start again."""
        self._checkpoint_lock = threading.Lock()
        """Taken by ``checkpoint_journal`` (one at a time) and by ``close`` before the store's lock."""
        self._shm_fd: int | None = None
        """The log's index (``<file>-shm``), read for the count of frames not yet copied; None if it could not be
        opened (then only SQLite's own checkpoints run)."""
        try:
            if self.path.exists():
                mode = self.path.stat().st_mode
                if not stat.S_ISREG(mode):
                    raise StoreError(
                        f"cannot open SQLite store {self.path}: not a regular file",
                        attributes={"url": self.url},
                    )
                with self.path.open("rb") as handle:
                    header = handle.read(len(SQLITE_HEADER))
                if header and header != SQLITE_HEADER:
                    raise StoreError(
                        f"cannot open SQLite store {self.path}: the file is not a SQLite database (corrupted?)",
                        attributes={"url": self.url},
                    )
            self._conn = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=10.0
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            # shrink back after a big commit (a log its checkpoints keep bigger is not cut back after each one)
            limit = max(JOURNAL_BOUND, self.autocheckpoint_frames * PAGE_SIZE)
            self._conn.execute(f"PRAGMA journal_size_limit={limit}")
            self._conn.execute("PRAGMA busy_timeout=10000")
            self._conn.execute(f"PRAGMA wal_autocheckpoint={self.autocheckpoint_frames}")
            # a statement of many job rows inside a transaction keeps the pages it changes in a statement journal
            # (to undo the statement alone); SQLite spilled it past 64 KiB to a temporary file, opened, written a
            # page and a header at a time, unlinked and closed for each: in memory instead (the writer's temporary
            # files only; at most the pages of ``ROWS_PER_STATEMENT`` rows)
            self._conn.execute("PRAGMA temp_store=MEMORY")
        except (OSError, sqlite3.Error) as error:
            raise StoreError(
                f"cannot open SQLite store {self.path}: {_reason(error)}", attributes={"url": self.url}
            ) from error
        try:
            self._init_schema()
            self._fd = os.open(self.path, os.O_RDONLY)
            opened = os.fstat(self._fd)
        except (StoreError, OSError) as error:
            self._conn.close()
            if isinstance(error, StoreError) and not isinstance(error, StoreUnavailable):
                raise  # says what is wrong with the store (schema version, store key)
            reason = self._trouble.error if self._trouble is not None else _reason(error)
            raise StoreError(
                f"cannot open SQLite store {self.path}: {reason}", attributes={"url": self.url}
            ) from error
        self._identity = (opened.st_dev, opened.st_ino)
        self.wal_path = self.path.with_name(self.path.name + "-wal")
        self._wal_identity = _identity_of(self.wal_path)
        """The write-ahead log SQLite writes commits to (it exists once the schema is written): watched like the
        database file, since commits not yet checkpointed live only there."""
        self._readers: list[sqlite3.Connection] = []
        """Every reader connection, opened here with its first read (one opened, or reading first, later, on a deleted
        path would create a new file)."""
        self._checkpointer: sqlite3.Connection | None = None
        """The connection ``checkpoint_journal`` copies the log on, beside the writer's (see its doc)."""
        try:
            for _ in range(READERS + 1):
                reader = sqlite3.connect(
                    str(self.path), check_same_thread=False, isolation_level=None, timeout=10.0
                )
                if len(self._readers) < READERS:
                    self._readers.append(reader)
                else:
                    self._checkpointer = reader
                reader.execute("PRAGMA busy_timeout=10000")
                # a read now opens the journal (SQLite opens it at a connection's first read): a first read after
                # the journal was deleted would make a new empty one under its path and lose the commits it held
                reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as error:
            for reader in self._readers:
                reader.close()
            if self._checkpointer is not None:
                self._checkpointer.close()
            self._conn.close()
            os.close(self._fd)
            raise StoreError(
                f"cannot open SQLite store {self.path}: {_reason(error)}", attributes={"url": self.url}
            ) from error
        self._rows_per_statement = max(
            1,
            min(ROWS_PER_STATEMENT, self._conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // JOB_COLUMNS),
        )
        """Job rows one statement upserts at most (``_write_job_rows``): within the library's variable limit."""
        with suppress(OSError):  # the writer and the readers keep it open: the file SQLite maps
            self._shm_fd = os.open(self.path.with_name(self.path.name + "-shm"), os.O_RDONLY)
        self._idle = list(self._readers)
        """Reader connections no read holds now."""
        self._idle_changed = threading.Condition(threading.Lock())
        self._read_lock = contextlib.nullcontext()
        """Reads hold a reader connection of their own (``_reader``), not a lock shared with every other read."""

    def _verify(self) -> str | None:
        """Why the file can no longer be trusted (deleted, replaced, corrupted), or None."""
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            return f"SQLite store file {self.path} was deleted while the scheduler ran"
        except OSError as error:
            return f"SQLite store file {self.path} cannot be checked: {_reason(error)}"
        if (current.st_dev, current.st_ino) != self._identity:
            return f"SQLite store file {self.path} was replaced by another file (inode changed)"
        assert self._fd is not None
        try:
            header = os.pread(self._fd, len(SQLITE_HEADER), 0)
        except OSError as error:
            return f"SQLite store file {self.path} cannot be read: {_reason(error)}"
        if header != SQLITE_HEADER:
            return f"SQLite store file {self.path} is corrupted (its header is not SQLite's)"
        return self._verify_journal()

    def _verify_journal(self) -> str | None:
        """Why the journal can no longer be trusted (deleted, replaced), or None."""
        wal = _identity_of(self.wal_path)
        if self._wal_identity is None:
            self._wal_identity = wal
        elif wal is None:
            return f"SQLite journal {self.wal_path} was deleted while the scheduler ran"
        elif wal != self._wal_identity:
            return f"SQLite journal {self.wal_path} was replaced by another file (inode changed)"
        return None

    def _rescue_journal(self) -> None:
        """The journal was deleted or replaced under the open connection: commits not yet checkpointed live only
        in the file SQLite still holds open. Checkpoint them into the database file now (and sync it), so nothing
        acknowledged is lost when the process stops; the store stays in trouble (nothing more is acknowledged)."""
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if self._fd is not None:
                os.fsync(self._fd)
        except (OSError, sqlite3.Error) as error:
            log.error(
                "could not checkpoint the journal of %s into the database: %s", self.path, _reason(error)
            )
        else:
            log.error(
                "the journal of %s was deleted or replaced; acknowledged commits were checkpointed into the "
                "database file; restart the scheduler",
                self.path,
            )

    @contextmanager
    def _connection_transaction(self) -> Iterator[Any]:
        cur = self._conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
            self._check_before_commit()
        except BaseException as error:
            self._roll_back(cur, error)
            raise
        else:
            self._commit(cur)
        finally:
            cur.close()

    def _check_before_commit(self) -> None:
        """The file check of every write transaction before its commit: a problem puts the store in trouble and is
        raised (``_FileProblem``, a ``StoreUnavailable``)."""
        if self._fd is None:
            return
        problem = self._verify()
        if problem is not None:
            self.mark_trouble(problem)
            raise _FileProblem(problem, self.url)

    def _commit(self, cur: Any) -> None:
        """``COMMIT`` a write transaction, timed: a long one goes to ``long_commits`` (a checkpoint runs inside)."""
        began = time.perf_counter()
        cur.execute("COMMIT")
        self.long_commits.note(time.perf_counter() - began, "COMMIT")

    def _roll_back(self, cur: Any, error: BaseException) -> None:
        """A write transaction that failed with ``error``: rolled back (already, by SQLite, or the file is gone:
        the original error tells why); a journal gone under the file check is rescued."""
        with contextlib.suppress(sqlite3.Error):
            cur.execute("ROLLBACK")
        if isinstance(error, _FileProblem) and self._verify_journal() is not None:
            self._rescue_journal()

    def checkpoint_journal(self) -> int | None:
        """Copy the log into the database file when it holds ``checkpoint_frames`` frames not yet copied: the log's
        frames now in the database file, or None when none was due (or the store is in trouble, closed, or the
        check failed). Safe to call from any thread, beside the writes.

        The copy is a ``PASSIVE`` checkpoint on a connection of its own, without the store's lock: commits go on
        meanwhile (SQLite lets one checkpoint run beside the writer: it copies what was committed when it began),
        so no commit waits for the copy and its syncs (the group commit runs it on a thread of its own after a
        batch, ``live/commit.py``), and the commit that would have crossed ``autocheckpoint_frames`` never comes.
        SQLite starts the log again from its beginning only at a write that begins when everything in it was
        copied, which a copy made beside the writes seldom leaves: when frames came during the copy, a second pass
        copies them with the writes held (the store's lock: those few frames, the long copy done), so the next
        write starts the log again and the log stays within ``checkpoint_frames`` and what comes during a copy. The file is checked first as a
        commit checks it: a checkpoint writes the file's first page, which would put back a header overwritten
        under the store; a problem found here puts the store in trouble as the next commit's check would. A
        checkpoint that fails is logged and counted: what it did not copy stays in the log, and SQLite's own bound
        still holds."""
        with self._checkpoint_lock:
            checkpointer = self._checkpointer
            if self._trouble is not None or self._fd is None or checkpointer is None:
                return None
            if not self.checkpoint_due():
                return None
            problem = self._verify()
            if problem is not None:
                with self._lock:
                    if self._trouble is None:
                        self._notice(problem)
                return None
            began = time.perf_counter()
            try:
                row = _checkpoint(checkpointer)
                self.long_commits.note(time.perf_counter() - began, f"checkpoint of {_copied(row)} frames")
                after = self._journal_frames()  # (the row counts the log as the copy began)
                if after is None or after[0] > after[1]:
                    held = time.perf_counter()
                    with self._lock:  # the writes held: the rest copied, the next write starts the log again
                        if self._trouble is not None or self._fd is None:
                            return _copied(row)
                        row = _checkpoint(checkpointer)
                    self.checkpoints_holding_writes += 1
                    self.long_commits.note(
                        time.perf_counter() - held, f"checkpoint of {_copied(row)} frames, writes held"
                    )
            except sqlite3.Error as error:
                self.checkpoint_failures += 1
                log.warning("checkpoint of the journal of %s failed: %s", self.path, _reason(error))
                return None
            self.checkpoints += 1
            return _copied(row)

    def checkpoint_due(self) -> bool:
        """Whether the log holds ``checkpoint_frames`` frames not yet copied (its index's header read, no lock)."""
        frames = self._journal_frames()
        return frames is not None and frames[0] - frames[1] >= self.checkpoint_frames

    def _journal_frames(self) -> tuple[int, int] | None:
        """(the log's frames, those already copied into the database file) from its index's header; None when it
        cannot be read or its two copies differ (a commit beside this read was writing it: the next look sees)."""
        if self._shm_fd is None:
            return None
        try:
            head = os.pread(self._shm_fd, 2 * WAL_INDEX_HEADER + 4, 0)
        except OSError:
            return None
        if len(head) < 2 * WAL_INDEX_HEADER + 4 or head[:WAL_INDEX_HEADER] != head[WAL_INDEX_HEADER:-4]:
            return None
        version, last = struct.unpack_from("=I", head, 0)[0], struct.unpack_from("=I", head, 16)[0]
        if version != WAL_INDEX_VERSION or head[12] != 1:  # isInit
            return None
        return last, struct.unpack_from("=I", head, 2 * WAL_INDEX_HEADER)[0]

    def put_jobs(self, records: Sequence[JobRecord]) -> None:
        """``SqlStore.put_jobs``'s transaction written straight, without the two generator context managers of
        ``_transaction`` and ``_connection_transaction`` (the group commit's write of every heartbeat's job rows):
        the same statements, file check, roll-back, long-commit note and store trouble."""
        if not records:
            return
        with self._lock:
            self.check_writable()
            rows = [self._job_row(record) for record in records]
            try:
                cur = self._conn.cursor()
                try:
                    cur.execute("BEGIN IMMEDIATE")
                    try:
                        self._write_job_rows(cur, rows)
                        self._check_before_commit()
                    except BaseException as error:
                        self._roll_back(cur, error)
                        raise
                    self._commit(cur)
                finally:
                    cur.close()
            except sqlite3.Error as error:
                raise self._refused(error) from error
            if self._out_of_space is not None:
                self.space_returned()

    def _write_job_rows(self, cur: Any, rows: Sequence[tuple[Any, ...]]) -> None:
        """The rows in a few statements of many rows each (``job_row_chunks``), not one statement a row:
        ``sqlite3`` lets the interpreter go around every statement it steps, and a thread that lets it go while
        the heartbeat loop wants it waits up to a switch interval to get it back, so a batch of a few hundred rows
        written a statement a row took tens of milliseconds of other threads' turns (session 36, ``commitburst``).
        The same upserts in the same order: a later row of a job still wins."""
        begin = 0
        for count in job_row_chunks(len(rows), self._rows_per_statement):
            cur.execute(_put_jobs_sql(count), tuple(chain.from_iterable(rows[begin : begin + count])))
            begin += count

    @contextmanager
    def _read_transaction(self) -> Iterator[Any]:
        """A read: one SELECT in SQLite's autocommit mode (its own read transaction), without ``BEGIN IMMEDIATE``
        (which takes the write lock) and the file check of a commit: nothing is acknowledged by a read, a vanished
        or replaced file is noticed by the next write and by ``probe``, corruption by SQLite when it reads."""
        with self._reader() as reader:
            cur = reader.cursor()
            try:
                yield cur
            finally:
                cur.close()

    def list_operation_ids(self, query: OperationFilter = OperationFilter()) -> list[str]:
        """The page's ids as one row, a JSON array (``sqlite3`` lets the GIL go at every row it steps, and a thread
        that lets it go while other threads want it waits a switch interval or more to get it back: one row instead
        of a page's hundred)."""
        page, args = operation_page_sql(query, "?", columns="id")
        rows = self._rows(f"SELECT json_group_array(id) FROM ({page})", args)
        return list(load_json(rows[0][0])) if rows and rows[0][0] else []

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        """An idle reader connection for the block (waiting for one when every one is in use)."""
        with self._idle_changed:
            while not self._idle:
                self._idle_changed.wait()
            reader = self._idle.pop()
        try:
            yield reader
        finally:
            with self._idle_changed:
                self._idle.append(reader)
                self._idle_changed.notify()

    def disk_space(self) -> tuple[int, int] | None:
        """Free bytes under the store, counting the database's own free pages (removed data: SQLite reuses them
        without giving them back to the filesystem), and the filesystem's size."""
        try:
            info = os.statvfs(self.path.parent)
            with self._reader() as reader:
                pages = reader.execute("PRAGMA freelist_count").fetchone()[0]
                page_size = reader.execute("PRAGMA page_size").fetchone()[0]
        except (OSError, sqlite3.Error):
            return None
        return info.f_bavail * info.f_frsize + int(pages) * int(page_size), info.f_blocks * info.f_frsize

    def _is_out_of_space(self, error: BaseException) -> bool:
        return getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or (
            isinstance(error, sqlite3.Error) and "disk is full" in str(error)
        )

    def probe(self) -> StoreHealth:
        self.probe_space()
        with self._lock:
            if self._trouble is None and self._fd is not None:
                problem = self._verify()
                if problem is not None:
                    self._notice(problem)
                else:
                    with suppress(StoreUnavailable):
                        self._rows("SELECT value FROM meta WHERE key = ?", ("schema_version",))
            return self.health()

    def _notice(self, problem: str) -> None:
        """A file check outside a write found ``problem``: the store in trouble, a journal gone rescued."""
        self.mark_trouble(problem)
        if self._verify_journal() is not None:
            self._rescue_journal()

    def close(self) -> None:
        with self._checkpoint_lock, self._lock, self._idle_changed:  # a checkpoint under way ends first
            while len(self._idle) < len(self._readers):  # the reads in flight end first
                self._idle_changed.wait()
            for reader in self._readers:
                reader.close()
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
            self._conn.close()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._shm_fd is not None:
                os.close(self._shm_fd)
                self._shm_fd = None


ROWS_PER_STATEMENT = 256
"""Job rows upserted by one statement at most (8 parameters a row: 2,048, under SQLite's default limit of 32,766
variables; fewer where the library's limit is lower, ``SqliteStore._rows_per_statement``)."""
ROWS_STEP = 16
"""Statements of fewer rows than ``ROWS_PER_STATEMENT`` hold a multiple of this many, or fewer than this many: at
most two statements below the largest a batch, and at most 31 texts of them for the connection's statement cache."""
JOB_COLUMNS = 8
"""Parameters of one job row (``SqlStore._job_row``)."""


def job_row_chunks(count: int, largest: int = ROWS_PER_STATEMENT) -> list[int]:
    """How many rows each statement of a batch of ``count`` rows upserts: ``largest`` while that many are left,
    then the multiple of ``ROWS_STEP`` below what is left, then the rest (``largest`` at least 1)."""
    chunks = [largest] * (count // largest)
    left = count % largest
    if left >= ROWS_STEP:
        chunks.append(left - left % ROWS_STEP)
        left %= ROWS_STEP
    if left:
        chunks.append(left)
    return chunks


@lru_cache(maxsize=64)
def _put_jobs_sql(count: int) -> str:
    """``SqlStore._PUT_JOB`` for ``count`` rows in one statement (SQLite applies them in order)."""
    head, tail = SqlStore._PUT_JOB.split(" ON CONFLICT ", 1)
    values = "(" + ", ".join("?" * JOB_COLUMNS) + ")"
    return (
        head.replace(" VALUES " + values, " VALUES " + ", ".join([values] * count)) + " ON CONFLICT " + tail
    )


class _FileProblem(StoreUnavailable):
    """The file check before a commit found the file deleted, replaced or corrupted (the store in trouble)."""

    def __init__(self, problem: str, url: str) -> None:
        super().__init__(
            f"Scheduler store is unavailable, nothing is acknowledged: {problem}", attributes={"store": url}
        )


def _checkpoint(connection: sqlite3.Connection) -> Any:
    """A ``PASSIVE`` checkpoint on ``connection``: its row (busy, the log's frames, those copied), the statement run
    to its end (left open, it would keep a read of the log, and SQLite does not start a log again while one does)."""
    rows = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    return rows[0] if rows else None


def _copied(row: Any) -> int:
    """The frames a ``wal_checkpoint`` row says are in the database file (its third column; 0 without a row)."""
    return int(row[2]) if row is not None else 0


def _identity_of(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, None when it does not exist."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror}" + (f": {error.filename}" if error.filename else "")
    return str(error) or type(error).__name__
