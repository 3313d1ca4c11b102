"""PostgreSQL store (psycopg 3): the same schema and SQL as SQLite, for schedulers that share a database.

A lost connection puts the store in trouble at once (every later transaction raises ``StoreUnavailable``); it is
never silently reconnected while the store holds the leader lock, because the session-level advisory lock died
with the connection (``pooltree.server.store.leadership``): the leader runner opens a new store, takes the lock
again and revives from what the database holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from pooltree.security.sealing import Sealer
from pooltree.server.store.base import StoreError, StoreHealth, StoreUnavailable
from pooltree.server.store.sql import SqlStore


class PostgresStore(SqlStore):
    """``Store`` in a PostgreSQL database given by a libpq URL (``postgresql://user@host:port/db``).

    ``init_schema=False`` defers creating the tables (a standby creates nothing before it holds the lock).
    Sealed secrets use ``sealer``; schedulers sharing a database must share its key file (``--store-key-file``);
    without one the key lives only in this process (vaults of operations revived elsewhere cannot be opened).
    """

    placeholder = "%s"
    table_exists_sql = "SELECT 1 WHERE to_regclass(%s) IS NOT NULL"

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = 10.0,
        init_schema: bool = True,
        sealer: Sealer | None = None,
    ) -> None:
        super().__init__(url, sealer=sealer)
        try:
            import psycopg
        except ImportError as error:
            raise StoreError(
                "the PostgreSQL store needs psycopg 3 (pip install 'pooltree[postgresql]')",
                attributes={"url": url},
            ) from error
        self._psycopg = psycopg
        self.database_errors = (psycopg.Error,)
        self._connect_timeout = connect_timeout
        self.holds_lock = False
        """True once the leader's advisory lock is held on this store's connection (no reconnecting then)."""
        self._conn = self._connect()
        if init_schema:
            self.init_schema()

    def init_schema(self) -> None:
        try:
            self._init_schema()
        except StoreUnavailable as error:
            raise StoreError(
                f"cannot use PostgreSQL store: {error.message}", attributes={"url": self.url}
            ) from error

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.url, connect_timeout=max(1, int(self._connect_timeout)))
        except self._psycopg.Error as error:
            raise StoreError(
                f"cannot connect to PostgreSQL store: {' '.join(str(error).split())}",
                attributes={"url": self.url},
            ) from error

    @contextmanager
    def _connection_transaction(self) -> Iterator[Any]:
        if self._conn.closed or self._conn.broken:
            if self.holds_lock:
                self.mark_trouble("the connection to PostgreSQL was lost (and the leader lock with it)")
                self.check_writable()
            self._conn = self._connect()
        with self._conn.transaction(), self._conn.cursor() as cur:
            yield cur

    def execute_autocommit(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        """One statement outside the store's transactions (the leader lock); returns the first column of the row."""
        with self._lock:
            self.check_writable()
            try:
                with self._conn.cursor() as cur:
                    cur.execute(sql, args)
                    row = cur.fetchone()
                self._conn.commit()
            except self._psycopg.Error as error:
                self.mark_trouble(self._describe(error))
                self.check_writable()
                raise  # unreachable: check_writable raised
            return None if row is None else row[0]

    def _is_out_of_space(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == "53100"  # disk_full on the database server

    def probe(self) -> StoreHealth:
        self.probe_space()
        with self._lock:
            if self._trouble is None:
                with suppress(StoreUnavailable):
                    self._rows("SELECT 1")
            return self.health()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
