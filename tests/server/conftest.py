"""Fixtures for the server tests: stores of each kind (real SQLite files, and databases on the session's PostgreSQL
server from ``tests/conftest.py``), free ports, uvicorn in a thread, the live ``cluster``."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from live_cluster import Cluster


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


class ServerThread:
    """uvicorn serving an ASGI app on 127.0.0.1 in a background thread (bounded start and stop)."""

    def __init__(self, app: object, http: object = "auto") -> None:
        """``http``: uvicorn's HTTP protocol (a class such as ``http_protocol.BoundedHeadersProtocol``)."""
        import threading

        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", http=http
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start within 20 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


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
