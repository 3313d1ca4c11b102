"""SQLite store: the embedded default (one file, WAL journal, one shared connection under a lock)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pooltree.server.store.base import StoreError
from pooltree.server.store.sql import SqlStore


class SqliteStore(SqlStore):
    """``Store`` in a SQLite file; ``path`` is created (with parent folders) if missing."""

    placeholder = "?"

    def __init__(self, path: str | Path, *, url: str | None = None) -> None:
        super().__init__(url or f"sqlite:///{path}")
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=10.0
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA busy_timeout=10000")
        except (OSError, sqlite3.Error) as error:
            raise StoreError(
                f"cannot open SQLite store {self.path}: {error}", attributes={"url": self.url}
            ) from error
        self._init_schema()

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        cur = self._conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        else:
            cur.execute("COMMIT")
        finally:
            cur.close()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
