"""One SQL implementation of ``Store`` shared by SQLite and PostgreSQL; subclasses supply the connection."""

from __future__ import annotations

import threading
import time
from abc import abstractmethod
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

from pooltree.security.sealing import Sealer, SealError, is_sealed
from pooltree.security.vault import open_secure_vault, seal_secure_vault
from pooltree.server.store.base import (
    SCHEMA,
    SCHEMA_VERSION,
    JobRecord,
    Mutation,
    OperationFilter,
    OperationRecord,
    Store,
    StoreRefused,
    StoreUnavailable,
    dump_document,
    dump_json,
    job_from_row,
    load_json,
    operation_from_row,
    operation_page_sql,
    operation_where,
    redact_url,
)

KEY_CHECK = "store_key_check"
"""``meta`` row holding a value sealed with the store's key (``SqlStore._check_key``)."""
BODY_CHUNK = 500
"""Operation ids per ``IN`` list when a page's bodies are read (SQLite allows 999 parameters in old builds)."""


class SqlStore(Store):
    """``Store`` over a DB-API connection; every public method runs in one transaction under a lock."""

    placeholder = "?"
    table_exists_sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    """One row when the table named by the parameter exists (``verify_key`` creates nothing)."""
    database_errors: tuple[type[BaseException], ...] = ()
    """The driver's errors: any of them inside a transaction puts the store in trouble."""

    def __init__(self, url: str, *, sealer: Sealer | None = None) -> None:
        self.url = url
        self.sealer = sealer if sealer is not None else Sealer.ephemeral()
        """Seals what must come back but is secret (``secure_vault``, mutation answers); its key is outside."""
        self._lock = threading.RLock()
        self._read_lock: AbstractContextManager[Any] = self._lock
        """Held by reads (``_rows``): the store's lock, unless the store reads on a connection of its own."""

    @abstractmethod
    def _connection_transaction(self) -> AbstractContextManager[Any]:
        """A context manager yielding a cursor inside one transaction (commit on success)."""

    def _read_transaction(self) -> AbstractContextManager[Any]:
        """A context manager yielding a cursor for reads only (by default a full transaction)."""
        return self._connection_transaction()

    @contextmanager
    def _transaction(self, *, read: bool = False) -> Iterator[Any]:
        """One transaction (writes refused while the store is in trouble); a database error puts it in trouble,
        except a full disk (``mark_out_of_space``: the write is refused, the store is not in trouble).

        A failed commit is never retried here: the caller answers an error and leaves no trace in memory.
        ``read``: the statements only read (``_read_transaction``).
        """
        # a store in trouble still answers reads (what it acknowledged), as the in-memory ones do
        if not read:
            self.check_writable()
        try:
            with self._read_transaction() if read else self._connection_transaction() as cur:
                yield cur
        except self.database_errors as error:
            raise self._refused(error) from error
        if not read and self._out_of_space is not None:
            self.space_returned()

    def _refused(self, error: BaseException) -> StoreUnavailable:
        """What a transaction that met the driver's ``error`` raises: a full disk refuses the write
        (``mark_out_of_space``), anything else puts the store in trouble."""
        if self._is_out_of_space(error):
            return self.mark_out_of_space(self._describe(error))
        self.mark_trouble(self._describe(error))
        return StoreUnavailable(
            f"Scheduler store is unavailable, nothing is acknowledged: {self._describe(error)}",
            attributes={"store": redact_url(self.url)},
        )

    def _is_out_of_space(self, error: BaseException) -> bool:
        """The driver's error says the disk (or the database server's) is full."""
        return False

    def probe_space(self) -> None:
        """While out of space: one small write; when it commits, space is back and the alert clears."""
        if self._out_of_space is None or self._trouble is not None:
            return
        with suppress(StoreUnavailable), self._lock, self._transaction() as cur:
            cur.execute(
                self._q(
                    "INSERT INTO meta (key, value) VALUES (?, ?)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ),
                ("space_probe", repr(time.time())),
            )

    def _describe(self, error: BaseException) -> str:
        return f"{type(error).__name__}: {str(error).strip() or 'no details'}"

    def _init_schema(self) -> None:
        with self._lock, self._transaction() as cur:
            for statement in SCHEMA:
                cur.execute(statement)
            cur.execute(self._q("SELECT value FROM meta WHERE key = ?"), ("schema_version",))
            row = cur.fetchone()
            if row is None:
                cur.execute(
                    self._q("INSERT INTO meta (key, value) VALUES (?, ?)"),
                    ("schema_version", str(SCHEMA_VERSION)),
                )
            elif int(row[0]) != SCHEMA_VERSION:
                raise StoreRefused(
                    f"store {self.url} has schema version {row[0]}, this pooltree expects {SCHEMA_VERSION}",
                    attributes={"url": self.url},
                )
            self._check_key(cur)

    def _check_key(self, cur: Any) -> None:
        """The store keeps a value sealed with the key of the scheduler that first used it: a scheduler given
        another key is refused at start, naming the fix, instead of failing later on every sealed secret (a
        retried mutation's answer, a revived operation's vault). A key of this process only is not checked."""
        if self.sealer.source == "ephemeral":
            return
        cur.execute(self._q("SELECT value FROM meta WHERE key = ?"), (KEY_CHECK,))
        row = cur.fetchone()
        if row is None:
            cur.execute(
                self._q("INSERT INTO meta (key, value) VALUES (?, ?)"),
                (KEY_CHECK, self.sealer.seal(KEY_CHECK)),
            )
            return
        self._open_key_check(row[0])

    def verify_key(self) -> bool:
        """``_check_key`` without writing, for a standby (which creates nothing before it holds the lock): raises
        ``StoreRefused`` when the store's sealed value does not open with this key. True when it opened (the
        answer cannot change while the store lives), False when there is nothing to check yet (no tables, no
        value sealed, or a key of this process only)."""
        if self.sealer.source == "ephemeral":
            return False
        with self._read_lock, self._transaction(read=True) as cur:
            cur.execute(self._q(self.table_exists_sql), ("meta",))
            if cur.fetchone() is None:
                return False
            cur.execute(self._q("SELECT value FROM meta WHERE key = ?"), (KEY_CHECK,))
            row = cur.fetchone()
        if row is None:
            return False
        self._open_key_check(row[0])
        return True

    def _open_key_check(self, sealed: str) -> None:
        try:
            self.sealer.open(sealed)
        except SealError:
            raise StoreRefused(
                f"store {redact_url(self.url)} keeps secrets sealed with another key than the one in "
                f"{self.sealer.source}: give every scheduler of this store the same --store-key-file "
                "(the first scheduler's DATA/store_key)",
                attributes={"url": redact_url(self.url), "store_key_file": self.sealer.source},
            ) from None

    def _q(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def _rows(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._read_lock, self._transaction(read=True) as cur:
            cur.execute(self._q(sql), tuple(args))
            return [tuple(row) for row in cur.fetchall()]

    # Cypress nodes.
    def load_nodes(self) -> dict[str, dict[str, Any]]:
        return {
            path: load_json(record) for path, record in self._rows("SELECT path, record FROM cypress_nodes")
        }

    def save_nodes(self, upserts: Mapping[str, Mapping[str, Any]], deletes: Iterable[str]) -> None:
        with self._lock, self._transaction() as cur:
            for path in deletes:
                cur.execute(self._q("DELETE FROM cypress_nodes WHERE path = ?"), (path,))
            for path, record in upserts.items():
                cur.execute(
                    self._q(
                        "INSERT INTO cypress_nodes (path, record) VALUES (?, ?)"
                        " ON CONFLICT (path) DO UPDATE SET record = excluded.record"
                    ),
                    (path, dump_json(dict(record))),
                )

    # Key-value settings.
    def get_value(self, key: str, default: Any = None) -> Any:
        rows = self._rows("SELECT value FROM kv WHERE key = ?", (key,))
        return load_json(rows[0][0]) if rows else default

    def set_value(self, key: str, value: Any) -> None:
        with self._lock, self._transaction() as cur:
            cur.execute(
                self._q(
                    "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ),
                (key, dump_json(value)),
            )

    def delete_value(self, key: str) -> bool:
        with self._lock, self._transaction() as cur:
            cur.execute(self._q("DELETE FROM kv WHERE key = ?"), (key,))
            return bool(cur.rowcount)

    # Operations.
    def put_operation(
        self, record: OperationRecord, *, mutation: Mutation | None = None, jobs: Sequence[JobRecord] = ()
    ) -> None:
        self.put_operations([(record, mutation)], jobs)

    def put_operations(
        self, operations: Sequence[tuple[OperationRecord, Mutation | None]], jobs: Sequence[JobRecord] = ()
    ) -> None:
        with self._lock, self._transaction() as cur:
            for _, mutation in operations:
                if mutation is not None:
                    self._remember(cur, mutation)
            if jobs:
                self._write_job_rows(cur, [self._job_row(job) for job in jobs])
            for record, _ in operations:
                self._put_operation_row(cur, record)

    def _put_operation_row(self, cur: Any, record: OperationRecord) -> None:
        cur.execute(
            self._q(
                "INSERT INTO operations (id, type, state, user_name, pool, start_time, finish_time, body)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET type = excluded.type,"
                " state = excluded.state, user_name = excluded.user_name, pool = excluded.pool,"
                " start_time = excluded.start_time, finish_time = excluded.finish_time, body = excluded.body"
            ),
            (
                record.id,
                record.type,
                record.state,
                record.user,
                record.pool,
                float(record.start_time),
                None if record.finish_time is None else float(record.finish_time),
                dump_json(
                    {
                        "spec": seal_secure_vault(record.spec, self.sealer),
                        "runtime_parameters": record.runtime_parameters,
                        "document": record.document,
                    }
                ),
            ),
        )

    def get_operation(self, operation_id: str) -> OperationRecord | None:
        rows = self._rows(
            "SELECT id, type, state, user_name, pool, start_time, finish_time, body FROM operations WHERE id = ?",
            (operation_id,),
        )
        return self._opened(operation_from_row(rows[0])) if rows else None

    def _opened(self, record: OperationRecord) -> OperationRecord:
        """``record`` with its ``secure_vault`` opened (left sealed when this key cannot open it)."""
        if not record.partial:
            record.spec = open_secure_vault(record.spec, self.sealer)
        return record

    def list_operations(
        self, query: OperationFilter = OperationFilter(), *, known: Container[str] = ()
    ) -> list[OperationRecord]:
        if not known:
            sql, args = operation_page_sql(query, "?")
            return [self._opened(operation_from_row(row)) for row in self._rows(sql, args)]
        # the page without bodies, then the bodies of the rows the caller does not hold (a live operation's
        # body is never decoded: reading its text was a third of a page of live operations)
        sql, args = operation_page_sql(query, "?", body=False)
        rows = self._rows(sql, args)
        missing = [row[0] for row in rows if row[0] not in known]
        bodies = self._bodies(missing)
        return [
            self._opened(
                operation_from_row(row, body=False)
                if row[0] not in bodies
                else operation_from_row((*row, bodies[row[0]]))
            )
            for row in rows
        ]

    def list_operation_ids(self, query: OperationFilter = OperationFilter()) -> list[str]:
        sql, args = operation_page_sql(query, "?", columns="id")
        return [row[0] for row in self._rows(sql, args)]

    def _bodies(self, operation_ids: list[str]) -> dict[str, str]:
        """``operation id -> body`` of those of ``operation_ids`` that are stored (in chunks of ``IN`` lists)."""
        found: dict[str, str] = {}
        for begin in range(0, len(operation_ids), BODY_CHUNK):
            chunk = operation_ids[begin : begin + BODY_CHUNK]
            marks = ", ".join("?" * len(chunk))
            found.update(self._rows(f"SELECT id, body FROM operations WHERE id IN ({marks})", chunk))
        return found

    def count_operations(self, query: OperationFilter = OperationFilter()) -> int:
        where, args = operation_where(query, "?")
        return int(self._rows(f"SELECT COUNT(*) FROM operations{where}", args)[0][0])

    def delete_operation(self, operation_id: str) -> bool:
        with self._lock, self._transaction() as cur:
            cur.execute(self._q("DELETE FROM jobs WHERE operation_id = ?"), (operation_id,))
            cur.execute(self._q("DELETE FROM operations WHERE id = ?"), (operation_id,))
            return bool(cur.rowcount)

    # Jobs.
    _PUT_JOB = (
        "INSERT INTO jobs (operation_id, id, state, address, start_time, finish_time, stderr_ref, body)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (operation_id, id) DO UPDATE SET"
        " state = excluded.state, address = excluded.address, start_time = excluded.start_time,"
        " finish_time = excluded.finish_time, stderr_ref = excluded.stderr_ref, body = excluded.body"
    )

    @staticmethod
    def _job_row(record: JobRecord) -> tuple[Any, ...]:
        return (
            record.operation_id,
            record.id,
            record.state,
            record.address,
            float(record.start_time),
            None if record.finish_time is None else float(record.finish_time),
            record.stderr_ref,
            dump_document(record.document),
        )

    def _write_job_rows(self, cur: Any, rows: Sequence[tuple[Any, ...]]) -> None:
        """Upsert job rows (``_job_row``'s) in the open transaction of ``cur``, in order (a later row of the same
        job wins)."""
        cur.executemany(self._q(self._PUT_JOB), rows)

    def put_job(self, record: JobRecord) -> None:
        with self._lock, self._transaction() as cur:
            cur.execute(self._q(self._PUT_JOB), self._job_row(record))

    def put_jobs(self, records: Sequence[JobRecord]) -> None:
        if not records:
            return
        with self._lock, self._transaction() as cur:
            self._write_job_rows(cur, [self._job_row(record) for record in records])

    def get_job(self, operation_id: str, job_id: str) -> JobRecord | None:
        rows = self._rows(
            "SELECT operation_id, id, state, address, start_time, finish_time, stderr_ref, body FROM jobs"
            " WHERE operation_id = ? AND id = ?",
            (operation_id, job_id),
        )
        return job_from_row(rows[0]) if rows else None

    def list_jobs(self, operation_id: str, state: str | None = None) -> list[JobRecord]:
        sql = (
            "SELECT operation_id, id, state, address, start_time, finish_time, stderr_ref, body FROM jobs"
            " WHERE operation_id = ?"
        )
        args: list[Any] = [operation_id]
        if state is not None:
            sql += " AND state = ?"
            args.append(state)
        return [job_from_row(row) for row in self._rows(sql + " ORDER BY start_time, id", args)]

    # Mutation ids.
    def get_mutation(self, mutation_id: str) -> tuple[bool, Any]:
        rows = self._rows("SELECT response FROM mutations WHERE id = ?", (mutation_id,))
        if not rows:
            return False, None
        text = rows[0][0]
        return True, self.sealer.open(text) if is_sealed(text) else load_json(text)

    def remember_mutation(self, mutation_id: str, response: Any, now: float) -> None:
        with self._lock, self._transaction() as cur:
            self._remember(cur, Mutation(mutation_id, response, now))

    def _remember(self, cur: Any, mutation: Mutation) -> None:
        cur.execute(
            self._q(
                "INSERT INTO mutations (id, created, response) VALUES (?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET created = excluded.created, response = excluded.response"
            ),
            (
                mutation.id,
                float(mutation.time),
                self.sealer.seal(mutation.response),
            ),  # answers may hold tokens
        )

    def forget_mutations(self, older_than: float) -> int:
        with self._lock, self._transaction() as cur:
            cur.execute(self._q("DELETE FROM mutations WHERE created < ?"), (float(older_than),))
            return int(cur.rowcount)
