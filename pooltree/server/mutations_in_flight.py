"""Requests with one mutation id run one at a time: a retry that comes while the first request is running waits
for it, then reads the answer it saved (``app.py``'s pipeline), as YTsaurus's response keeper answers a pending
mutation's retry with the first request's response.

Without it a retry that came between a command's commit and the saving of its answer ran the command again (an
abort retried answered "already finished"; a second ``set`` or ``create`` applied twice). A start saves its answer
in its own commit and claims its mutation id in the scheduler too (``live/start_claims.py``); this covers every
volatile command the pipeline runs, and each request of ``execute_batch`` with a mutation id. If the first request
failed, nothing is saved and the retry runs afresh.

A batch holds its own mutation id while its requests wait for theirs, so their waits are bounded: two batches each
holding the id the other's request waits for answer an error instead of waiting for ever.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from pooltree.server.protocol import YtError


class MutationsInFlight:
    """Mutation ids (``mutation_key``) of the requests running now."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._running: set[str] = set()

    @contextlib.contextmanager
    def held(self, key: str, timeout: float | None = None) -> Iterator[None]:
        """Wait until no request with ``key`` runs (at most ``timeout`` seconds, then a ``YtError``), then run
        with it held (released on leaving)."""
        with self._condition:
            if not self._condition.wait_for(lambda: key not in self._running, timeout):
                raise YtError("A request with this mutation id is still running; retry it later")
            self._running.add(key)
        try:
            yield
        finally:
            with self._condition:
                self._running.discard(key)
                self._condition.notify_all()
