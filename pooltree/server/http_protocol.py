"""uvicorn's HTTP protocol with a deadline for request headers.

uvicorn (httptools) times a connection out only between requests (``timeout_keep_alive``): a client that sends
part of its request line or headers and then waits holds the connection, its buffers and a slot of the server for
ever, and many such clients starve everyone else (slowloris). ``BoundedHeadersProtocol`` gives every request
``HEADER_TIMEOUT`` seconds from its first byte to its last header; past that the connection is closed. Bodies are
bounded in ``pooltree.server.app.read_body`` (408 after ``BODY_IDLE_TIMEOUT``), where the answer can still be sent.

It also sends what one turn of the event loop writes to a connection in one piece (``CoalescedWrites``):
uvicorn writes an answer's head and its body separately, two ``send`` calls where one does, and on this
scheduler's hottest path (a node heartbeat, 1,000 a second) the second system call was a fifth of the work.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

HEADER_TIMEOUT = 20.0
"""Seconds a request's line and headers may take from its first byte."""
ARRIVED = "pooltree.arrived"
"""The ASGI scope key of the event loop's time when the request's headers were whole (how long a request then
waited for its handler is how far the loop is behind: ``live/throttle.py``'s ``queued`` limit)."""
ARRIVED_CPU = "pooltree.arrived_cpu"
"""The ASGI scope key of the loop thread's and the process's CPU clocks when ``ARRIVED`` was taken
(``heartbeat_trace.SpanCpu``; only while the trace is on)."""
BODY_WHOLE = "pooltree.body_whole"
"""The ASGI scope key set once the request's whole body is in the protocol's buffer (its last byte parsed): the
body is then read with no wait, so ``app.read_body`` arms no timer for it (a timer per request was a tenth of a
heartbeat's work with 1,000 nodes)."""


class CoalescedWrites:
    """A connection's transport whose writes within one turn of the event loop go out as one: the first write
    of a turn is held and the loop's next callback (``call_soon``) sends it with whatever followed it. ``close``
    sends what is held first; everything else is the transport's own."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self.held:
            self.loop.call_soon(self.flush)
        self.held.append(bytes(data))

    def flush(self) -> None:
        if self.held:
            data = b"".join(self.held) if len(self.held) > 1 else self.held[0]
            self.held = []
            if not self.transport.is_closing():
                self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class BoundedHeadersProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that closes a connection whose request headers are not whole within
    ``HEADER_TIMEOUT`` seconds (``uvicorn.Config(app, http=BoundedHeadersProtocol)``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_deadline: float | None = None
        """When the headers of the request being received must be whole (None: no request is being received)."""
        self.header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = CoalescedWrites(transport, self.loop)  # type: ignore[assignment]
        self._arm()  # a connection that sends nothing at all is timed out too

    def data_received(self, data: bytes) -> None:
        if self.header_deadline is None and (self.cycle is None or self.cycle.response_complete):
            self.header_deadline = self.loop.time() + HEADER_TIMEOUT  # the first bytes of a new request
        super().data_received(data)
        if self.header_deadline is not None:
            self._arm()

    def on_headers_complete(self) -> None:
        self.header_deadline = None
        self._disarm()
        super().on_headers_complete()
        self.scope[ARRIVED] = self.loop.time()  # type: ignore[literal-required]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        cycle = self.cycle
        if cycle is not None and not cycle.more_body:  # not an answered request's late bytes
            cycle.scope[BODY_WHOLE] = True  # type: ignore[literal-required]

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        deadline = (
            self.header_deadline if self.header_deadline is not None else self.loop.time() + HEADER_TIMEOUT
        )
        self.header_timer = self.loop.call_at(deadline, self._expired)

    def _disarm(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _expired(self) -> None:
        self.header_timer = None
        if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
            return  # a request is being answered: its body has its own timeout
        log.info(
            "closing a connection from %s: request headers not whole within %.0f s",
            self.client,
            HEADER_TIMEOUT,
        )
        self.transport.close()
