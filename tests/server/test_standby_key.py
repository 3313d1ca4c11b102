"""A standby given another store key than its store's leaves, saying so, instead of waiting to take the lock.

Found in session 35: two schedulers of a PostgreSQL store each made their own key; the standby said only
"role: standby", and when the leader died it took the advisory lock, failed to open the store's sealed value and
kept the lock without leading: no scheduler led until it was stopped. Now a standby checks its key while it
waits (``SqlStore.verify_key``, which writes nothing), and a ``StoreRefused`` on taking over ends it at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pooltree.security.sealing import Sealer
from pooltree.server.leader import SchedulerRunner
from pooltree.server.service import SchedulerService
from pooltree.server.store import Store, StoreRefused
from pooltree.server.store.leadership import ADVISORY_LOCK_KEY
from pooltree.server.store.postgres import PostgresStore

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import NODE_SECRET, ROOT_TOKEN, Loop
from polling import wait_for

WAIT = 30.0


@pytest.fixture
def loop() -> Iterator[Loop]:
    started = Loop()
    try:
        yield started
    finally:
        started.close()


class Standby:
    """A ``SchedulerRunner`` on ``url`` with the key in ``key_file``, run in ``loop``, while a test connection
    holds the leader lock (a leader that is not a process of the test)."""

    def __init__(self, loop: Loop, url: str, key_file: Path) -> None:
        self.leader = psycopg.connect(url, autocommit=True)
        assert self.leader.execute("SELECT pg_try_advisory_lock(%s)", (ADVISORY_LOCK_KEY,)).fetchone() == (
            True,
        )
        self.roles: list[str] = []

        def factory(store: Store) -> SchedulerService:
            return SchedulerService(store, token=ROOT_TOKEN, node_secret=NODE_SECRET)

        self.runner = SchedulerRunner(
            url, service_factory=factory, on_role=self.roles.append, store_key_file=key_file
        )
        self._stop: asyncio.Event | None = None

        async def main() -> None:
            self._stop = asyncio.Event()
            await self.runner.run(self._stop)

        self.loop = loop
        self.task: concurrent.futures.Future[Any] = loop.submit(main())

    def leader_dies(self) -> None:
        self.leader.close()

    def outcome(self) -> BaseException | None:
        """What the runner ended with (fails if it runs on after ``WAIT`` seconds)."""
        return self.task.exception(timeout=WAIT)

    def close(self) -> None:
        if not self.leader.closed:
            self.leader.close()
        if self._stop is not None and not self.task.done():
            self.loop.loop.call_soon_threadsafe(self._stop.set)
            self.task.exception(timeout=WAIT)


@pytest.fixture
def standby_on(loop: Loop) -> Iterator[Any]:
    made: list[Standby] = []

    def make(url: str, key_file: Path) -> Standby:
        made.append(Standby(loop, url, key_file))
        return made[-1]

    yield make
    for standby in made:
        standby.close()


def _seal_with(url: str, key_file: Path) -> None:
    """What a leader with ``key_file`` leaves in a new store: its tables and the value sealed with its key."""
    PostgresStore(url, sealer=Sealer.from_file(key_file)).close()


def _refused_naming_the_fix(error: BaseException | None) -> None:
    assert isinstance(error, StoreRefused), repr(error)
    assert "another key" in error.message and "--store-key-file" in error.message


def test_a_standby_with_another_key_leaves_while_the_leader_leads(
    fresh_postgres_url: str, tmp_path: Path, standby_on: Any
) -> None:
    """The store was sealed before it started: it leaves at start, and never takes the lock."""
    _seal_with(fresh_postgres_url, tmp_path / "leader_key")
    standby = standby_on(fresh_postgres_url, tmp_path / "other_key")
    _refused_naming_the_fix(standby.outcome())
    assert "standby" not in " ".join(standby.roles)


def test_a_standby_started_before_the_store_was_sealed_leaves_once_it_is(
    fresh_postgres_url: str, tmp_path: Path, standby_on: Any
) -> None:
    """Nothing to check when it started (no tables): it waits as a standby, then leaves once the leader's key
    sealed the store, before the leader dies."""
    standby = standby_on(fresh_postgres_url, tmp_path / "other_key")
    wait_for(lambda: standby.roles and standby.roles[-1].startswith("standby"), timeout=WAIT)
    _seal_with(fresh_postgres_url, tmp_path / "leader_key")
    _refused_naming_the_fix(standby.outcome())


def test_a_standby_that_takes_the_lock_and_cannot_open_the_store_leaves(
    fresh_postgres_url: str, tmp_path: Path, standby_on: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store sealed between its last check and the leader's death (the check made to miss it): taking
    over, it is refused opening the store, and leaves instead of keeping the lock without leading."""
    monkeypatch.setattr(PostgresStore, "verify_key", lambda self: False)
    standby = standby_on(fresh_postgres_url, tmp_path / "other_key")
    wait_for(lambda: standby.roles and standby.roles[-1].startswith("standby"), timeout=WAIT)
    _seal_with(fresh_postgres_url, tmp_path / "leader_key")
    standby.leader_dies()
    _refused_naming_the_fix(standby.outcome())
    assert "leader" not in standby.roles
    right = PostgresStore(fresh_postgres_url, sealer=Sealer.from_file(tmp_path / "leader_key"))
    try:  # the lock is free for a scheduler with the right key
        assert right.execute_autocommit("SELECT pg_try_advisory_lock(%s)", (ADVISORY_LOCK_KEY,)) is True
    finally:
        right.close()
