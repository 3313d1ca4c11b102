"""Fixtures for the server tests: a real PostgreSQL server in a temp dir, real SQLite files, free ports."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    return None


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """Start a throwaway PostgreSQL server on 127.0.0.1 (as user ``postgres`` when running as root)."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not found in PATH or /usr/lib/postgresql/*/bin")
    prefix: list[str] = []
    user = pwd.getpwuid(os.getuid()).pw_name
    root = Path(tempfile.mkdtemp(prefix="pooltree-pg-"))
    if os.getuid() == 0:
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            pytest.skip("running as root and there is no 'postgres' user to run the PostgreSQL server")
        runuser = shutil.which("runuser")
        if not runuser:
            shutil.rmtree(root, ignore_errors=True)
            pytest.skip("running as root and runuser is not available to drop privileges for PostgreSQL")
        os.chown(root, entry.pw_uid, entry.pw_gid)
        prefix = [runuser, "-u", "postgres", "--"]
        user = "postgres"
    data, port = root / "data", free_port()

    def run(*args: str, timeout: float = 60) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=timeout, cwd=root)

    try:
        run(initdb, "-D", str(data), "-U", user, "--auth=trust", "--no-sync", "-E", "UTF8")
        run(
            pg_ctl, "-D", str(data), "-w", "-t", "30", "-l", str(root / "log.txt"),
            "-o", f"-h 127.0.0.1 -p {port} -k {root} -F",
            "start",
        )  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        log = (root / "log.txt").read_text(errors="replace") if (root / "log.txt").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"cannot start PostgreSQL: {error}; {getattr(error, 'stderr', b'')!r} {log[-500:]}")
    try:
        yield f"postgresql://{user}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "-t", "30", "stop"],
                       capture_output=True, timeout=60, cwd=root)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> Iterator[str]:
    """A new empty database on the session server, dropped after the test."""
    import psycopg

    name = f"t{time.time_ns()}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = postgres_url.rsplit("/", 1)[0] + "/" + name
    yield url
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh store of each kind: a real SQLite file and a real PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'pooltree.db'}"
    return str(request.getfixturevalue("fresh_postgres_url"))


class ServerThread:
    """uvicorn serving an ASGI app on 127.0.0.1 in a background thread (bounded start and stop)."""

    def __init__(self, app: object) -> None:
        import threading

        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
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
    """``serve(app)`` starts uvicorn for ``app`` and returns its base URL; stopped after the test."""
    started: list[ServerThread] = []

    def start(app: object) -> str:
        server = ServerThread(app).__enter__()
        started.append(server)
        return server.url

    yield start
    for server in started:
        server.__exit__()
