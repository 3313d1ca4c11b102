"""Test-suite root: this folder is on ``sys.path`` (pytest's prepend import mode), so shared helpers such as
``polling`` import from every test folder. The PostgreSQL fixtures live here so that every folder (server store
tests, live process tests) shares one throwaway server per session (``pg_server.PgServer``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from bwrap_hiding import path_without_system_bwrap
from hypothesis import settings
from pg_server import PgServer, PgUnavailable

from pooltree.node.bubblewrap import find_bubblewrap

# No property test has a time limit per example: hypothesis's default deadline (200 ms) made a timed unit test of
# every one of them, and they failed on a loaded machine (tests/node/test_wire.py's resource parse did, once, with
# 14 other processes on 2 cores). Speed is measured by bench/, never by a test.
settings.register_profile("pooltree", deadline=None)
settings.load_profile("pooltree")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server on 127.0.0.1 for the session (as user ``postgres`` when running as root);
    skipped with the reason where PostgreSQL cannot run."""
    try:
        server = PgServer.create()
    except PgUnavailable as error:
        pytest.skip(str(error))
    try:
        yield server.url
    finally:
        server.destroy()


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


@pytest.fixture
def system_bwrap_hidden(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The distribution's ``bwrap`` is not on ``PATH`` for this test and its child processes (``bwrap_hiding``);
    yields that ``PATH``."""
    path = path_without_system_bwrap(tmp_path_factory.mktemp("path-without-bwrap") / "bin")
    monkeypatch.setenv("PATH", path)
    find_bubblewrap.cache_clear()
    try:
        yield path
    finally:
        find_bubblewrap.cache_clear()
