"""Persistent state of the live scheduler behind one ``Store`` interface (SQLite default, PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from pooltree.security.sealing import Sealer
from pooltree.server.store.base import (
    STORE_UNAVAILABLE,
    JobRecord,
    Mutation,
    OperationFilter,
    OperationRecord,
    Store,
    StoreError,
    StoreHealth,
    StoreRefused,
    StoreUnavailable,
)
from pooltree.server.store.sqlite import SqliteStore

__all__ = [
    "STORE_UNAVAILABLE",
    "JobRecord",
    "Mutation",
    "OperationFilter",
    "OperationRecord",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreHealth",
    "StoreRefused",
    "StoreUnavailable",
    "open_store",
]


def open_store(url: str, *, key_file: Path | None = None) -> Store:
    """A store from a URL: ``sqlite:///relative.db``, ``sqlite:////abs/path.db``, ``postgresql://...``.

    A bare file path is taken as SQLite. ``key_file`` (mode 0600, created when missing) holds the key that seals
    the secrets the store keeps (``pooltree.security.sealing``); SQLite defaults to ``<file>.key`` beside it.
    """
    if not isinstance(url, str) or not url:
        raise StoreError(f"store URL must be a non-empty string, got {url!r}", attributes={"field": "store"})
    sealer = Sealer.from_file(key_file) if key_file is not None else None
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if scheme == "sqlite":
        path = unquote(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else ""
        if not path:
            raise StoreError(
                f"SQLite store URL must look like sqlite:///path/to/file.db, got {url!r}",
                attributes={"field": "store"},
            )
        return SqliteStore(Path(path), url=url, sealer=sealer)
    if scheme in ("postgresql", "postgres"):
        from pooltree.server.store.postgres import PostgresStore

        return PostgresStore(url, sealer=sealer)
    if scheme == "":
        return SqliteStore(Path(url), sealer=sealer)
    raise StoreError(
        f"unknown store URL scheme {scheme!r} in {url!r}; use sqlite:///path.db or postgresql://...",
        attributes={"field": "store"},
    )
