"""A store wrapper for tests of "acknowledged means stored": its job writes wait while the test holds them, or
fail while it says so; everything else goes to the wrapped store."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from pooltree.server.store import JobRecord, StoreUnavailable

WAIT = 30.0
"""Seconds a held write waits for ``release`` at most (a test that never releases fails instead of hanging)."""


class HeldStore:
    """A store whose ``put_jobs`` waits for ``release`` while ``hold`` is set (what a slow disk sync looks like;
    ``entered`` is set when one waits), or fails while ``fail`` is (the disk gone)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.entered = threading.Event()
        self.release = threading.Event()
        self.hold = False
        self.fail = False

    def put_jobs(self, records: Sequence[JobRecord]) -> None:
        if self.fail:
            raise StoreUnavailable("the test's disk is gone")
        if self.hold:
            self.entered.set()
            assert self.release.wait(WAIT)
        self._store.put_jobs(records)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
