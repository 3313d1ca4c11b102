"""The persistence interface of the live scheduler: what survives a restart, independent of the database.

Everything is stored as JSON text (``inf`` included, which PostgreSQL ``jsonb`` would reject), so SQLite and
PostgreSQL keep byte-for-byte the same documents and one test suite pins both.
"""

from __future__ import annotations

import json
import math
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from pooltree.errors import PooltreeError

SCHEMA_VERSION = 1


STORE_UNAVAILABLE = 105
"""YTsaurus ``NRpc::EErrorCode::Unavailable``: answered with HTTP 503, which ``yt.wrapper`` retries."""


class StoreError(PooltreeError):
    """The store cannot be opened or used (bad URL, unreachable database, schema mismatch)."""


class StoreUnavailable(StoreError):
    """The store cannot take writes now (file gone, replaced or corrupted; connection lost; not the leader).

    Nothing is acknowledged while it lasts: commands and heartbeats answer this error (HTTP 503).
    """

    code = STORE_UNAVAILABLE


class StoreRefused(StoreError):
    """This scheduler, as configured, can never use the store: its key opens no value the store sealed, or the
    store's schema is another version. Waiting or retrying cannot help: a standby that finds it leaves rather
    than hold (or later take) the leader lock it could not lead with."""


@dataclass(frozen=True)
class StoreHealth:
    """What ``Store.health()`` reports: ``ok``, else the trouble (``error``) and when it was noticed."""

    ok: bool
    url: str
    error: str | None = None
    since: float | None = None
    transient: bool = False
    """The trouble clears by itself (the disk is full: writes are refused, reads served, until space returns)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "url": self.url,
            "error": self.error,
            "since": self.since,
            "transient": self.transient,
        }


@dataclass(frozen=True)
class Mutation:
    """A mutation id and the answer saved with it, written in the same transaction as the change itself."""

    id: str
    response: Any
    time: float


JOURNAL_BOUND = 8 << 20
"""How far SQLite's journal grows between checkpoints (2,048 pages of 4 KiB, SQLite's own checkpoint's bound; the
store sets ``journal_size_limit`` to it, so the journal shrinks back after a bigger transaction)."""


def disk_reserve(total: int) -> int:
    """Bytes kept free under a file store: twice the journal's bound or a twentieth of the filesystem, whichever
    is more, at most 64 MiB and at most half of a small filesystem."""
    return min(64 << 20, total // 2, max(2 * JOURNAL_BOUND, total // 20))


def mutation_key(user: str, mutation_id: str) -> str:
    """The stored id of a user's mutation: mutation ids are scoped to the user who sent them, so a retry is
    answered only to that user (another user's request with the same id is a new request of theirs)."""
    return dump_json([user, mutation_id])


def redact_url(url: str) -> str:
    """``url`` without its password (store URLs appear in errors and in the unauthenticated health endpoint)."""
    parts = urlsplit(url) if "://" in url else None
    if parts is None or parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()


def dump_json(value: Any) -> str:
    """Canonical JSON text of a stored document (sorted keys, ``Infinity`` allowed)."""
    return json.dumps(value, sort_keys=True, allow_nan=True, ensure_ascii=True, separators=(",", ":"))


_DOCUMENT_OPTIONS = orjson.OPT_SORT_KEYS


def dump_document(value: Any) -> str:
    """``dump_json`` for the documents written on every heartbeat (job records): orjson's text (about 2.5x
    faster with the check) when it reads back as ``value`` and is ASCII without DEL (which ``dump_json``
    escapes), else ``dump_json``'s. orjson writes what JSON cannot hold otherwise (``NaN`` and infinities as
    ``null``, datetimes and dataclasses as strings and maps, tuples as lists): those fail the read-back and take
    ``dump_json``, which keeps or refuses them as before. Keys sorted, no spaces, as ``dump_json``; only a
    float's spelling may differ (``1e-5`` for ``1e-05``), never its value (``tests/server/test_store_documents.py``)."""
    try:
        text = orjson.dumps(value, option=_DOCUMENT_OPTIONS)
    except TypeError:  # a key that is not a string, an integer past 64 bits, a type orjson does not know
        return dump_json(value)
    if text.isascii() and b"\x7f" not in text and (_flat(value) or orjson.loads(text) == value):
        return text.decode("ascii")
    return dump_json(value)


_FLAT_SCALARS = frozenset({str, int, bool, type(None)})


def _flat(value: Any) -> bool:
    """A map of strings, integers, booleans, nulls and empty maps or lists (a running job's record): orjson's text
    of it reads back as it, so the read-back check is not needed (an integer orjson could not write raised)."""
    if type(value) is not dict:
        return False
    for item in value.values():
        kind = type(item)
        if kind not in _FLAT_SCALARS and not ((kind is dict or kind is list) and not item):
            return False
    return True


_LONG_NUMBER = re.compile(r"[0-9](?=[0-9]{18})")
"""19 ASCII digits in a row (a digit followed by 18: the search is about twice as fast as ``[0-9]{19}``'s):
perhaps an integer past 64 bits, which orjson would read as a float."""


def load_json(text: str) -> Any:
    """A stored document, as ``json.loads`` reads it: by orjson where it reads the same, else by ``json.loads``.
    orjson reads an integer past 64 bits as a float (so a text with 19 digits in a row, anywhere, takes
    ``json.loads``) and refuses what only Python's parser takes (``NaN``, ``Infinity``, a number past the double
    range, a lone surrogate): its refusal takes ``json.loads`` too, which reads or refuses it as before
    (``tests/server/test_store_documents.py``). A running job's document reads in ~0.65 us against 1.4, a finished
    one's with statistics ~1.25 against 2.2 (the search for the digits is half of it); a restarted scheduler reads
    every job record."""
    if type(text) is str and _LONG_NUMBER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


@dataclass
class OperationRecord:
    """One operation as the scheduler persists it.

    ``start_time``/``finish_time`` are seconds since the epoch; ``document`` holds everything else the
    operations layer wants back (brief spec, result, events, progress, alerts, ...).
    """

    id: str
    type: str
    state: str
    user: str
    pool: str | None
    start_time: float
    finish_time: float | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    runtime_parameters: dict[str, Any] = field(default_factory=dict)
    document: dict[str, Any] = field(default_factory=dict)
    partial: bool = False
    """Listed without its body (``list_operations(known=...)``): spec, runtime parameters and document are empty."""

    def to_json(self) -> str:
        return dump_json(
            {"spec": self.spec, "runtime_parameters": self.runtime_parameters, "document": self.document}
        )


@dataclass
class JobRecord:
    """One job of an operation: state, the node it runs on and where its stderr can be read."""

    operation_id: str
    id: str
    state: str
    address: str = ""
    start_time: float = 0.0
    finish_time: float | None = None
    stderr_ref: str | None = None
    document: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OperationFilter:
    """Filters of ``list_operations``: every given field must match; times bound ``start_time``.

    ``cursor_time`` with ``cursor_direction`` (``past``: older than the cursor, newest first;
    ``future``: newer than the cursor, oldest first) pages through the history.
    """

    state: str | None = None
    user: str | None = None
    pool: str | None = None
    type: str | None = None
    from_time: float | None = None
    to_time: float | None = None
    cursor_time: float | None = None
    cursor_direction: str = "past"
    limit: int = 100

    def __post_init__(self) -> None:
        if self.cursor_direction not in ("past", "future"):
            raise PooltreeError(
                f"cursor_direction: expected 'past' or 'future', got {self.cursor_direction!r}",
                attributes={"field": "cursor_direction"},
            )
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 0:
            raise PooltreeError(
                f"limit: expected a non-negative integer, got {self.limit!r}", attributes={"field": "limit"}
            )
        for name in ("from_time", "to_time", "cursor_time"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int | float) or math.isnan(value)):
                raise PooltreeError(f"{name}: expected seconds, got {value!r}", attributes={"field": name})


class Store(ABC):
    """What the scheduler persists: Cypress nodes, key-value settings, operations, jobs and mutation ids.

    Implementations are safe to call from several threads; every method is one transaction.
    """

    url: str
    code_point_ids = False
    """Whether ``list_operations`` orders equal start times by id as Python compares strings (code points), so a
    listing's page may be taken in memory (``live/pages.py``); PostgreSQL orders text by the database's collation."""
    _trouble: StoreHealth | None = None
    _out_of_space: StoreHealth | None = None

    # Health: a store in trouble refuses every transaction until it is reopened (SQLite: the scheduler restarts;
    # PostgreSQL: the leader runner reconnects and revives from what the database holds). A full disk is not
    # trouble of that kind: the write that met it is refused, reads go on, and the first write that succeeds
    # again (or ``probe``) clears it.
    def health(self) -> StoreHealth:
        """``ok``, or the first trouble noticed (sticky for this store object), or a full disk (transient)."""
        return self._trouble or self._out_of_space or StoreHealth(ok=True, url=redact_url(self.url))

    def mark_out_of_space(self, message: str) -> StoreUnavailable:
        """A write met a full disk: remember it (the ``store_trouble`` alert) and the error to answer."""
        if self._out_of_space is None:
            self._out_of_space = StoreHealth(
                ok=False, url=redact_url(self.url), error=message, since=time.time(), transient=True
            )
        return StoreUnavailable(
            f"Scheduler store is out of disk space, the change was not made (reads are served; writes resume by "
            f"themselves when space returns): {message}",
            attributes={"store": redact_url(self.url), "reason": "out_of_space"},
        )

    def space_returned(self) -> None:
        self._out_of_space = None

    def mark_trouble(self, message: str) -> StoreHealth:
        """Record trouble (the first message wins); every later transaction raises ``StoreUnavailable``."""
        if self._trouble is None:
            self._trouble = StoreHealth(ok=False, url=redact_url(self.url), error=message, since=time.time())
        return self._trouble

    def check_writable(self) -> None:
        """Raise ``StoreUnavailable`` when the store is in trouble (before a command acts)."""
        trouble = self._trouble
        if trouble is not None:
            raise StoreUnavailable(
                f"Scheduler store is unavailable, nothing is acknowledged: {trouble.error}",
                attributes={"store": redact_url(self.url), "since": trouble.since},
            )

    def disk_space(self) -> tuple[int, int] | None:
        """``(free bytes, total bytes)`` of the filesystem under the store, when the store is a local file (None
        for a database server, whose disk the scheduler cannot see)."""
        return None

    def check_room_for(self, size: int) -> None:
        """Refuse a write of ``size`` bytes that would leave less than ``DISK_RESERVE`` free under the store: the
        disk never fills up from users' files, so ``remove`` and the scheduler's own small writes still have room
        (SQLite's journal grows by what they change until it is checkpointed), and nothing needs a restart."""
        space = self.disk_space()
        if space is None or size <= 0:
            return
        free, total = space
        reserve = disk_reserve(total)
        if free - size < reserve:
            raise StoreUnavailable(
                f"Scheduler store is out of disk space, the change was not made: writing {size} bytes would leave "
                f"{max(free - size, 0)} bytes free under the store, less than the {reserve} kept for removals "
                "(remove data or give the store more space; reads are served)",
                attributes={
                    "store": redact_url(self.url),
                    "reason": "out_of_space",
                    "free": free,
                    "size": size,
                },
            )

    def probe(self) -> StoreHealth:
        """Check the store actively (the watch calls it periodically); returns ``health()``."""
        return self.health()

    def checkpoint_journal(self) -> int | None:
        """Copy the store's write-ahead log into its database when enough is pending (SQLite:
        ``SqliteStore.checkpoint_journal``), called by the group commit after a batch's waiters were woken (on a
        thread of its own, beside the writes); the frames copied, or None when nothing was done (a database server
        checkpoints by itself)."""
        return None

    def checkpoint_due(self) -> bool:
        """Whether ``checkpoint_journal`` would copy something now (a cheap look: the group commit asks it after
        each batch, and wakes the checkpoint's thread only when it says so)."""
        return False

    # Cypress nodes: canonical path -> record (type, id, attributes, value, times).
    @abstractmethod
    def load_nodes(self) -> dict[str, dict[str, Any]]:
        """All stored Cypress node records."""

    @abstractmethod
    def save_nodes(self, upserts: Mapping[str, Mapping[str, Any]], deletes: Iterable[str]) -> None:
        """Write changed nodes and delete removed ones atomically (all or nothing)."""

    # Key-value settings.
    @abstractmethod
    def get_value(self, key: str, default: Any = None) -> Any: ...

    @abstractmethod
    def set_value(self, key: str, value: Any) -> None: ...

    @abstractmethod
    def delete_value(self, key: str) -> bool:
        """Remove a key; True if it existed."""

    # Operations.
    @abstractmethod
    def put_operation(
        self, record: OperationRecord, *, mutation: Mutation | None = None, jobs: Sequence[JobRecord] = ()
    ) -> None:
        """Insert or replace an operation; ``mutation`` (a start's id and answer) and ``jobs`` (job rows written
        with it: a finishing operation's last jobs) are saved in the same commit."""

    def put_operations(
        self, operations: Sequence[tuple[OperationRecord, Mutation | None]], jobs: Sequence[JobRecord] = ()
    ) -> None:
        """Several operations (each with its mutation) and ``jobs`` in one commit: the group commit's batch that
        holds starts (``live/commit.py``). SQL stores write one transaction; this default, one commit each."""
        last = len(operations) - 1
        for index, (record, mutation) in enumerate(operations):
            self.put_operation(record, mutation=mutation, jobs=jobs if index == last else ())

    @abstractmethod
    def get_operation(self, operation_id: str) -> OperationRecord | None: ...

    @abstractmethod
    def list_operations(
        self, query: OperationFilter = OperationFilter(), *, known: Container[str] = ()
    ) -> list[OperationRecord]:
        """Operations matching ``query``, ordered by start time (newest first for ``past``). Those whose id is in
        ``known`` (the caller holds them in memory) come ``partial``: their body is not decoded."""

    def list_operation_ids(self, query: OperationFilter = OperationFilter()) -> list[str]:
        """The ids of ``list_operations(query)``'s operations, in its order."""
        return [record.id for record in self.list_operations(query, known=_Everything())]

    @abstractmethod
    def count_operations(self, query: OperationFilter = OperationFilter()) -> int:
        """How many operations match ``query`` ignoring cursor and limit."""

    @abstractmethod
    def delete_operation(self, operation_id: str) -> bool:
        """Remove an operation and its jobs; True if it existed."""

    # Jobs.
    @abstractmethod
    def put_job(self, record: JobRecord) -> None: ...

    def put_jobs(self, records: Sequence[JobRecord]) -> None:
        """Several job upserts; SQL stores write them in one transaction (a heartbeat's starts and finishes)."""
        for record in records:
            self.put_job(record)

    @abstractmethod
    def get_job(self, operation_id: str, job_id: str) -> JobRecord | None: ...

    @abstractmethod
    def list_jobs(self, operation_id: str, state: str | None = None) -> list[JobRecord]:
        """Jobs of one operation ordered by start time, optionally of one state."""

    # Mutation ids (idempotent retries of volatile commands).
    @abstractmethod
    def get_mutation(self, mutation_id: str) -> tuple[bool, Any]:
        """``(True, saved response)`` if the mutation was already applied, else ``(False, None)``."""

    @abstractmethod
    def remember_mutation(self, mutation_id: str, response: Any, now: float) -> None: ...

    @abstractmethod
    def forget_mutations(self, older_than: float) -> int:
        """Drop mutation ids remembered before ``older_than``; returns how many were dropped."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Everything:
    """A container holding every operation id (``list_operations`` decodes no body)."""

    def __contains__(self, item: object) -> bool:
        return True


def operation_from_row(row: tuple[Any, ...], *, body: bool = True) -> OperationRecord:
    """An ``OperationRecord`` from a row ``(id, type, state, user, pool, start, finish, json)``; without ``body``
    the JSON is not decoded (a ``partial`` record)."""
    fields: dict[str, Any] = {
        "id": row[0],
        "type": row[1],
        "state": row[2],
        "user": row[3],
        "pool": row[4],
        "start_time": float(row[5]),
        "finish_time": None if row[6] is None else float(row[6]),
    }
    if not body:
        return OperationRecord(**fields, partial=True)
    document = load_json(row[7])
    return OperationRecord(
        **fields,
        spec=document.get("spec", {}),
        runtime_parameters=document.get("runtime_parameters", {}),
        document=document.get("document", {}),
    )


def job_from_row(row: tuple[Any, ...]) -> JobRecord:
    """A ``JobRecord`` from a row ``(operation_id, id, state, address, start, finish, stderr_ref, json)``."""
    return JobRecord(
        operation_id=row[0],
        id=row[1],
        state=row[2],
        address=row[3],
        start_time=float(row[4]),
        finish_time=None if row[5] is None else float(row[5]),
        stderr_ref=row[6],
        document=load_json(row[7]),
    )


def operation_where(query: OperationFilter, placeholder: str) -> tuple[str, list[Any]]:
    """SQL ``WHERE`` clause (without cursor) and its arguments for an operation filter."""
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (
        ("state", query.state),
        ("user_name", query.user),
        ("pool", query.pool),
        ("type", query.type),
    ):
        if value is not None:
            clauses.append(f"{column} = {placeholder}")
            args.append(value)
    if query.from_time is not None:
        clauses.append(f"start_time >= {placeholder}")
        args.append(float(query.from_time))
    if query.to_time is not None:
        clauses.append(f"start_time <= {placeholder}")
        args.append(float(query.to_time))
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", args


def operation_page_sql(
    query: OperationFilter, placeholder: str, *, body: bool = True, columns: str | None = None
) -> tuple[str, list[Any]]:
    """``SELECT`` of one page of operations for ``query`` in the store's common schema; without ``body`` the rows
    end before the ``body`` column; ``columns``: only those."""
    where, args = operation_where(query, placeholder)
    if query.cursor_time is not None:
        op = "<" if query.cursor_direction == "past" else ">"
        where += (" AND " if where else " WHERE ") + f"start_time {op} {placeholder}"
        args.append(float(query.cursor_time))
    order = "DESC" if query.cursor_direction == "past" else "ASC"
    if columns is None:
        columns = "id, type, state, user_name, pool, start_time, finish_time" + (", body" if body else "")
    sql = (
        f"SELECT {columns} FROM operations{where} ORDER BY start_time {order}, id {order} LIMIT {placeholder}"
    )
    args.append(query.limit)
    return sql, args


SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS cypress_nodes (path TEXT PRIMARY KEY, record TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS operations (id TEXT PRIMARY KEY, type TEXT NOT NULL, state TEXT NOT NULL,"
    " user_name TEXT NOT NULL, pool TEXT, start_time DOUBLE PRECISION NOT NULL,"
    " finish_time DOUBLE PRECISION, body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS operations_start ON operations (start_time)",
    # list_operations pages newest first by (start_time, id), optionally of one state / user / pool / type.
    "CREATE INDEX IF NOT EXISTS operations_start_id ON operations (start_time, id)",
    "CREATE INDEX IF NOT EXISTS operations_state_start ON operations (state, start_time, id)",
    "CREATE INDEX IF NOT EXISTS operations_user_start ON operations (user_name, start_time, id)",
    "CREATE INDEX IF NOT EXISTS operations_pool_start ON operations (pool, start_time, id)",
    "CREATE INDEX IF NOT EXISTS operations_type_start ON operations (type, start_time, id)",
    "CREATE TABLE IF NOT EXISTS jobs (operation_id TEXT NOT NULL, id TEXT NOT NULL, state TEXT NOT NULL,"
    " address TEXT NOT NULL, start_time DOUBLE PRECISION NOT NULL, finish_time DOUBLE PRECISION,"
    " stderr_ref TEXT, body TEXT NOT NULL, PRIMARY KEY (operation_id, id))",
    "CREATE TABLE IF NOT EXISTS mutations (id TEXT PRIMARY KEY, created DOUBLE PRECISION NOT NULL,"
    " response TEXT NOT NULL)",
)
