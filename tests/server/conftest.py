"""Fixtures for the server tests: stores of each kind (real SQLite files, and databases on the session's PostgreSQL
server from ``tests/conftest.py``), free ports and uvicorn in a thread (``loopback``), the live ``cluster``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from loopback import (
    ServerThread as ServerThread,  # re-exported: tests/security/security_harness.py reads it here
)
from loopback import free_port as free_port  # re-exported likewise

if TYPE_CHECKING:
    from live_cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A live scheduler on a SQLite file with one node of 2 slots (``live_cluster.Cluster``), closed after the test."""
    from live_cluster import (
        Cluster,  # here: the security tests load this file without tests/server on sys.path
    )

    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh store of each kind: a real SQLite file and a real PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'pooltree.db'}"
    return str(request.getfixturevalue("fresh_postgres_url"))


@pytest.fixture
def serve() -> Iterator[object]:
    """``serve(app, http=...)`` starts uvicorn for ``app`` (with that HTTP protocol) and returns its base URL;
    stopped after the test."""
    started: list[ServerThread] = []

    def start(app: object, http: object = "auto") -> str:
        server = ServerThread(app, http).__enter__()
        started.append(server)
        return server.url

    yield start
    for server in started:
        server.__exit__()
