"""PostgreSQL store (psycopg 3): the same schema and SQL as SQLite, for schedulers that share a database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pooltree.server.store.base import StoreError
from pooltree.server.store.sql import SqlStore


class PostgresStore(SqlStore):
    """``Store`` in a PostgreSQL database given by a libpq URL (``postgresql://user@host:port/db``)."""

    placeholder = "%s"

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        super().__init__(url)
        try:
            import psycopg
        except ImportError as error:
            raise StoreError(
                "the PostgreSQL store needs psycopg 3 (pip install 'pooltree[postgresql]')",
                attributes={"url": url},
            ) from error
        self._psycopg = psycopg
        self._connect_timeout = connect_timeout
        self._conn = self._connect()
        self._init_schema()

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.url, connect_timeout=max(1, int(self._connect_timeout)))
        except self._psycopg.Error as error:
            raise StoreError(
                f"cannot connect to PostgreSQL store: {error}", attributes={"url": self.url}
            ) from error

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        if self._conn.closed or self._conn.broken:
            self._conn = self._connect()
        with self._conn.transaction(), self._conn.cursor() as cur:
            yield cur

    def close(self) -> None:
        with self._lock:
            self._conn.close()
