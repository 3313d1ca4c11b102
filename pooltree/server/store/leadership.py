"""Exactly one scheduler acts on a store: the leader lock.

- **SQLite**: an exclusive ``flock`` on the database file itself (its real path, symlinks resolved; created empty
  when missing), taken before the database is opened and held for the life of the process (the kernel drops it
  when the process dies, even by SIGKILL). A lock belongs to the file's inode, so a second path to the same
  database (a symlink, a hard link) meets the same lock, and no other file can be swapped in to take it; a
  database replaced under a running leader is noticed by the store's file watch. (Linux keeps ``flock`` apart from
  the POSIX locks SQLite takes, so they do not interfere.) ``<database>.lock`` beside it only *describes* the
  holder (pid, host, URL) so a second scheduler is refused with one line naming them; deleting it frees nothing.
- **PostgreSQL**: a session-level advisory lock (``pg_try_advisory_lock``) taken on the store's own connection, so
  every write the leader makes goes through the session that holds the lock: when the connection dies the lock
  dies with it, and the store refuses to reconnect (``PostgresStore.holds_lock``), so a deposed leader cannot write
  behind a new one. The server drops the lock as soon as the leader's connection closes (a killed process's socket
  is closed by the kernel). A standby polls the lock; the leader's pid, host and URL are kept in the store's
  ``kv`` table under ``leader`` for the standby's "not the leader" answer.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooltree.server.store.base import StoreError, StoreUnavailable

LEADER_KEY = "leader"
ADVISORY_LOCK_KEY = int.from_bytes(b"pooltree", "big") & 0x7FFF_FFFF_FFFF_FFFF
"""The advisory lock id (a bigint) every pooltree scheduler of one database competes for."""


@dataclass(frozen=True)
class LeaderInfo:
    """Who holds (or last held) the leader lock."""

    pid: int | None
    host: str | None
    url: str | None = None
    since: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "host": self.host, "url": self.url, "since": self.since}

    @classmethod
    def from_json(cls, value: Any) -> LeaderInfo | None:
        if not isinstance(value, dict):
            return None
        pid, host, url, since = (value.get(k) for k in ("pid", "host", "url", "since"))
        return cls(
            pid if isinstance(pid, int) else None,
            host if isinstance(host, str) else None,
            url if isinstance(url, str) else None,
            float(since) if isinstance(since, int | float) else None,
        )

    def describe(self) -> str:
        where = f" on {self.host}" if self.host else ""
        at = f" at {self.url}" if self.url else ""
        return f"pid {self.pid if self.pid is not None else '?'}{where}{at}"


def this_process(url: str | None = None) -> LeaderInfo:
    return LeaderInfo(os.getpid(), socket.gethostname(), url, time.time())


class LeaderLock(ABC):
    """The lock one scheduler holds while it leads a store."""

    @abstractmethod
    def try_acquire(self) -> bool:
        """Take the lock if it is free; True when this process holds it now."""

    @abstractmethod
    def holder(self) -> LeaderInfo | None:
        """Who holds the lock (best effort; None when unknown)."""

    @abstractmethod
    def announce(self, url: str) -> None:
        """Record this leader's URL where standbys and refused schedulers read it."""

    @abstractmethod
    def release(self) -> None: ...


class SqliteLeaderLock(LeaderLock):
    """``flock`` on the database file (real path); ``<database>.lock`` names the holder."""

    def __init__(self, database: Path) -> None:
        self.database = Path(os.path.realpath(database))
        self.path = self.database.with_name(self.database.name + ".lock")
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        try:
            self.database.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.database, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise StoreError(
                f"cannot open the SQLite store {self.database} to lock it: {error.strerror or error}",
                attributes={"path": str(self.database)},
            ) from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as error:
            os.close(fd)
            raise StoreError(
                f"cannot lock {self.database}: {error.strerror or error}",
                attributes={"path": str(self.database)},
            ) from error
        self._fd = fd
        self._write(this_process())
        return True

    def _write(self, info: LeaderInfo) -> None:
        """Describe the holder in ``<database>.lock`` (written whole, then renamed: readers never see half)."""
        data = json.dumps(info.to_json()).encode()
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()

    def holder(self) -> LeaderInfo | None:
        try:
            return LeaderInfo.from_json(json.loads(self.path.read_text() or "null"))
        except (OSError, ValueError):
            return None

    def announce(self, url: str) -> None:
        self._write(this_process(url))

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class PostgresLeaderLock(LeaderLock):
    """``pg_try_advisory_lock`` on the ``PostgresStore``'s own connection."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def try_acquire(self) -> bool:
        if self.store.holds_lock:
            return True
        acquired = bool(
            self.store.execute_autocommit("SELECT pg_try_advisory_lock(%s)", (ADVISORY_LOCK_KEY,))
        )
        if acquired:
            self.store.holds_lock = True
        return acquired

    def holder(self) -> LeaderInfo | None:
        try:
            with self.store._lock, self.store._conn.cursor() as cur:
                cur.execute("SELECT value FROM kv WHERE key = %s", (LEADER_KEY,))
                row = cur.fetchone()
                self.store._conn.rollback()
        except self.store.database_errors:
            with contextlib.suppress(self.store.database_errors):
                self.store._conn.rollback()
            return None
        return LeaderInfo.from_json(json.loads(row[0])) if row else None

    def announce(self, url: str) -> None:
        self.store.set_value(LEADER_KEY, this_process(url).to_json())

    def release(self) -> None:
        if self.store.holds_lock:
            with contextlib.suppress(StoreUnavailable):
                self.store.execute_autocommit("SELECT pg_advisory_unlock(%s)", (ADVISORY_LOCK_KEY,))
            self.store.holds_lock = False
