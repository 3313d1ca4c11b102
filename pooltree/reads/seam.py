"""The seam between the read process's shell (``process.py``, ``relay.py``, ``host.py``) and what it knows and
answers (the replica, the feed, the access checks): the interface both sides are written against.

The read process calls ``Replica.answer(request, floor)`` for a request that came whole in one read with nothing
unanswered before it on its connection; ``None`` relays it to the scheduler, bytes are written to the client as the
whole HTTP response. First it asks ``Replica.holds(request, floor)``: True (a request ``answer`` would answer but
for the floor) holds the request until the next feed message brings the replica up to it (at most
``relay.HOLD_MAX``), then ``answer`` is asked with the floor the request came at. ``floor`` is the largest feed counter the scheduler stamped on an answer the read process
relayed (``FEED_HEADER``): the replica answers only when it has applied the feed at least that far, so a client
never reads older state through the read process than the scheduler already showed it (read-your-writes after a
start, no going backwards). Every message the scheduler's ``ReadFeed`` sends goes, in order, to the replica's
``apply``. With no replica (``NoReplica``) every request is relayed and nothing a client sees changes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

FEED_HEADER = b"x-pooltree-feed"
"""The response header the scheduler stamps on every answer it writes on its internal listener: its feed counter
(``ReadFeed.stamp``) when the answer was sent, a decimal integer. Absent when the scheduler has no feed."""


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """One whole HTTP request as the client sent it (nothing rewritten)."""

    method: bytes
    """``b"GET"``, ``b"POST"``, ..."""
    target: bytes
    """The request target as sent: path and query, percent-encoded (``/api/v4/get_operation?...``)."""
    headers: tuple[tuple[bytes, bytes], ...]
    """Header names lower-cased, values as sent, in order (repeated names repeated)."""
    body: bytes
    """The whole body (at most ``MAX_ANSWERABLE_BODY`` bytes: a longer request is relayed without asking)."""
    client: tuple[str, int]
    """The client's address and port (the connection's peer)."""
    keep_alive: bool
    """The client keeps the connection open after the answer (HTTP/1.1 without ``Connection: close``); when False
    the read process closes it after writing the answer."""


MAX_ANSWERABLE_BODY = 64 * 1024
"""The longest request body the read process hands to ``Replica.answer``; longer ones are relayed at once."""


class Replica(Protocol):
    """What the read process knows (readreplica's ``replica.py``): fed by ``apply``, asked by ``answer``.

    Both are called on the read process's event loop, one at a time; neither may block. An exception from either is
    logged and the request relayed (``answer``) or the replica dropped for ``NoReplica`` until the next ``Install``
    (``apply``): a replica that failed to apply a message can no longer say how far it has applied."""

    def apply(self, message: Any) -> None:
        """One message of the scheduler's feed, in the order ``ReadFeed`` sent them."""
        ...

    def answer(self, request: ReadRequest, floor: int) -> bytes | None:
        """The whole HTTP/1.1 response to ``request`` (status line, headers with ``Content-Length``, body), or
        None to relay it to the scheduler. Answers only if what it has applied reaches ``floor``."""
        ...

    def holds(self, request: ReadRequest, floor: int) -> bool:
        """Whether ``request`` should wait for the feed: it is of the kind ``answer`` may answer, and what the
        replica applied is below ``floor``. The read process then asks ``answer`` again (with that floor) after
        each feed message it applies, and relays the request after ``relay.HOLD_MAX`` seconds at most. Cheap: it
        is asked before ``answer`` for every request ``answer`` would be."""
        ...


class NoReplica:
    """The read process without a replica: it knows nothing, answers nothing (every request is relayed)."""

    def apply(self, message: Any) -> None:
        return None

    def answer(self, request: ReadRequest, floor: int) -> bytes | None:
        return None

    def holds(self, request: ReadRequest, floor: int) -> bool:
        return False


class ReadFeed(Protocol):
    """The scheduler's side of the feed (readreplica's publisher), held by the leading service as
    ``SchedulerService.read_feed`` (None: no feed, nothing stamped, the read process relays everything).

    The runner (``server/leader.py``) attaches it when the service leads and a read process runs, and detaches it
    when either ends. Each attach is a fresh replica in the read process (``replica`` names its maker), so the
    first messages after ``attach`` must make the replica whole (a snapshot), the rest bring it forward."""

    replica: str
    """``"module:function"``: the function the read process calls with no arguments to make the ``Replica`` that
    applies this feed's messages (``make_replica``)."""

    def stamp(self) -> int:
        """The feed counter now: every message sent so far has a counter at most this. Called on the scheduler's
        event loop for every answer it writes on its internal listener; must be cheap and thread-safe."""
        ...

    def attach(self, send: Callable[[Any], None]) -> None:
        """A read process listens from now on: ``send(message)`` carries a picklable message to its replica's
        ``apply`` (never blocks; callable from any thread; messages arrive in the order sent)."""
        ...

    def detach(self) -> None:
        """The read process is gone (or the service stops leading): stop calling ``send``."""
        ...


def make_replica(spec: str | None) -> Replica:
    """The replica named by ``spec`` (``"module:function"``, ``ReadFeed.replica``); ``NoReplica`` for None."""
    if spec is None:
        return NoReplica()
    module, _, name = spec.partition(":")
    maker: Callable[[], Replica] = getattr(importlib.import_module(module), name)
    return maker()
