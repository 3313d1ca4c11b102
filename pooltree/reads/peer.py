"""The scheduler's internal listener while a read process owns its port: connections that begin with the client's
address, answers stamped with the feed counter.

``peer_line_protocol(secret)`` is the listener's uvicorn protocol (``BoundedHeadersProtocol``, the API port's):
a connection's first line must be ``relay.peer_line`` with this run's secret (compared in constant time), and its
address and port become the connection's client (``scope["client"]``), which node authentication, ``bind_node``
and the operator routes read. A connection whose first line is anything else, or longer than
``MAX_PEER_LINE``, is closed unanswered. The secret is made per run by the scheduler and sent only over the read
process's pipe: a local process that can reach 127.0.0.1 cannot name another client. On the client-facing port
the line is not HTTP (answered 400 as any bad request), so there is no header to forge or strip.

``stamped(app, feed_of)`` is the listener's ASGI app: ``app`` with ``seam.FEED_HEADER`` added to every answer's
head, the feed counter read when the head is sent (``ReadFeed.stamp``); without a feed nothing is added.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from pooltree.reads.relay import PEER_LINE
from pooltree.reads.seam import FEED_HEADER, ReadFeed
from pooltree.server.http_protocol import BoundedHeadersProtocol

log = logging.getLogger(__name__)

MAX_PEER_LINE = 256
"""The longest first line a relayed connection may begin with (an IPv6 address and the secret fit)."""


def parse_peer_line(line: bytes, secret: bytes) -> tuple[str, int] | None:
    """The client's (address, port) named by ``line`` (without its CRLF) when it carries ``secret``; else None."""
    parts = line.split(b" ")
    if len(parts) != 4 or parts[0] != PEER_LINE:
        return None
    if not hmac.compare_digest(parts[1], secret):
        return None
    try:
        host = str(ipaddress.ip_address(parts[2].decode("ascii")))
        port = int(parts[3])
    except ValueError:
        return None
    if not 0 <= port <= 65535:
        return None
    return host, port


class PeerLineProtocol(BoundedHeadersProtocol):
    """``BoundedHeadersProtocol`` whose connections begin with the read process's peer line (``secret``: a
    subclass per run, ``peer_line_protocol``)."""

    secret: bytes = b""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.peer_named = False
        """The connection's first line was read and named its client."""
        self.first_line = b""
        """What came of the first line so far."""

    def data_received(self, data: bytes) -> None:
        if not self.peer_named:
            line = self.first_line + data
            end = line.find(b"\r\n")
            if end < 0:
                if len(line) > MAX_PEER_LINE:
                    self._refuse("no peer line")
                else:
                    self.first_line = line
                return
            client = parse_peer_line(line[:end], self.secret) if end <= MAX_PEER_LINE else None
            if client is None:
                self._refuse("a first line that is not the read process's")
                return
            self.client = client
            self.peer_named = True
            self.first_line = b""
            data = line[end + 2 :]
            if not data:
                return
        super().data_received(data)

    def _refuse(self, what: str) -> None:
        log.warning("closing a connection to the internal listener from %s: %s", self.client, what)
        self.first_line = b""
        self.transport.close()


def peer_line_protocol(secret: bytes) -> type[PeerLineProtocol]:
    """The internal listener's protocol class for this run's ``secret``."""
    return type("PeerLineProtocol", (PeerLineProtocol,), {"secret": secret})


def stamped(app: Any, feed_of: Callable[[], ReadFeed | None]) -> Any:
    """``app`` whose answers carry ``FEED_HEADER`` with the stamp of ``feed_of()`` (None: nothing added)."""

    async def stamped_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        feed = feed_of()
        if feed is None or scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def stamp_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), (FEED_HEADER, b"%d" % feed.stamp())]
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send=stamp_send)

    return stamped_app
