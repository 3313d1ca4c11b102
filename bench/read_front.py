"""A prototype read front for ``live_queue.py --front MODE`` (issue 25, session 33, ``readproc``): what a read process
that owns the client-facing port would cost and gain, measured before it is built into pooltree.

The front listens on its own port and relays every request of each client connection byte for byte to the
scheduler's API port over a keep-alive connection of its own (one upstream connection per client connection,
opened on its first relayed request), and the scheduler's answers back. Request and answer boundaries are found by
httptools (the parser uvicorn uses); nothing is rewritten. Two modes:

* ``relay``: every request goes to the scheduler (what the hop costs: the front's CPU, the scheduler's CPU per
  request, the listings' and starts' latency).
* ``cache``: a ``get_operation`` whole in one read, with nothing before it unanswered on its connection, is answered
  by the front with the bytes the scheduler answered the same request (same path, ``X-YT-Parameters`` and
  ``Authorization``) the last time it was relayed; a first read of an operation is relayed and its answer kept.
  **Not correct** (no freshness: an answer is served however stale, with its old ``Date``): an upper bound of what
  answering gets outside the scheduler's interpreter can gain, with the front's HTTP and a dictionary lookup as the
  get's whole cost. A real read process would add the replica's work (a template filled with the queue numbers,
  the token's and the ACL's checks), tens of microseconds.

A connection whose bytes the parser refuses, or that relays a ``HEAD`` or an upgrade, becomes a plain tunnel.

Usage: read_front.py --listen-port P --upstream HOST:PORT --mode relay|cache (runs until SIGTERM / SIGINT)
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections import deque
from typing import Any

import httptools
import uvloop

GET_PATHS = (b"/api/v4/get_operation", b"/api/v4/get_operation?")


class Front:
    """The relay's settings and, in ``cache`` mode, the kept answers (request key -> whole answer bytes)."""

    def __init__(self, upstream: tuple[str, int], mode: str) -> None:
        self.upstream = upstream
        self.mode = mode
        self.kept: dict[bytes, bytes] = {}
        self.answered_locally = 0
        self.relayed = 0


class ClientSide(asyncio.Protocol):
    """One client connection: requests parsed for their boundaries, relayed (or answered from ``Front.kept``)."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.begun = 0
        self.completed = 0
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.tunnel = False
        self.outstanding = 0
        """Relayed requests whose answers have not come back whole."""
        self.upstream: UpstreamSide | None = None
        self.waiting: list[bytes] | None = None
        """Bytes to relay while the upstream connection opens."""
        self.keys: deque[bytes | None] = deque()
        """Per outstanding relayed request, the key its answer is kept under (None: not kept)."""
        self.closing = False

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.begun += 1
        self.url = b""
        self.headers = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_message_complete(self) -> None:
        self.completed += 1

    # asyncio
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.tunnel:
            self._relay(data, 0, None)
            return
        idle = self.outstanding == 0 and self.begun == self.completed
        begun, completed = self.begun, self.completed
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.tunnel = True
        except httptools.HttpParserError:
            self.tunnel = True
        new = self.begun - begun
        whole = self.completed - completed == 1 and self.begun == self.completed
        key = None
        if self.front.mode == "cache" and idle and new == 1 and whole and not self.tunnel and self._is_get():
            key = self._key()
            found = self.front.kept.get(key)
            if found is not None:
                self.front.answered_locally += 1
                assert self.transport is not None
                self.transport.write(found)
                return
        if not self.tunnel and self.parser.get_method() == b"HEAD":
            self.tunnel = True
        self._relay(data, new, key if new == 1 and whole else None)

    def _is_get(self) -> bool:
        path = self.url.split(b"?", 1)[0]
        if path != GET_PATHS[0]:
            return False
        return not any(name == b"connection" and b"close" in value.lower() for name, value in self.headers)

    def _key(self) -> bytes:
        wanted = (b"x-yt-parameters", b"authorization", b"x-yt-header-format", b"accept")
        parts = [self.parser.get_method(), self.url]
        parts += [name + b":" + value for name, value in self.headers if name in wanted]
        return b"\n".join(parts)

    def _relay(self, data: bytes, requests: int, key: bytes | None) -> None:
        self.front.relayed += requests
        self.outstanding += requests
        for index in range(requests):
            self.keys.append(key if index == 0 else None)
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.write(data)
            return
        if self.waiting is not None:
            self.waiting.append(data)
            return
        self.waiting = [data]
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_connection(lambda: UpstreamSide(self), *self.front.upstream)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        self.upstream = upstream
        waiting, self.waiting = self.waiting or [], None
        assert upstream.transport is not None
        upstream.transport.write(b"".join(waiting))

    def upstream_answered(self) -> None:
        self.outstanding -= 1
        if self.keys:
            self.keys.popleft()

    def upstream_lost(self) -> None:
        self.upstream = None
        if (self.outstanding or self.tunnel or self.closing) and self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        self.closing = True
        if self.outstanding == 0 and self.begun == self.completed:
            return False
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def pause_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()


class UpstreamSide(asyncio.Protocol):
    """The front's connection to the scheduler for one client connection: answers relayed back as they come."""

    def __init__(self, client: ClientSide) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.begun = 0
        self.completed = 0
        self.kept = bytearray()

    def on_message_begin(self) -> None:
        self.begun += 1

    def on_message_complete(self) -> None:
        if self.parser.get_status_code() < 200:  # 100 Continue: the answer follows
            return
        self.completed += 1

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        client = self.client
        key = client.keys[0] if client.keys else None
        completed = self.completed
        if not client.tunnel:
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                client.tunnel = True
        if client.transport is not None:
            client.transport.write(data)
        if client.tunnel:
            return
        if key is not None:
            self.kept += data
        for _ in range(self.completed - completed):
            if key is not None and self.completed - completed == 1 and self.begun == self.completed:
                client.front.kept[key] = bytes(self.kept)
            key = None
            self.kept.clear()
            client.upstream_answered()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.client.upstream_lost()

    def pause_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.resume_reading()


async def serve(port: int, front: Front) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: ClientSide(front), "127.0.0.1", port, backlog=1024)
    stop = loop.create_future()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: stop.done() or stop.set_result(None))
    await stop
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the scheduler's API")
    parser.add_argument("--mode", choices=("relay", "cache"), default="relay")
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    uvloop.run(serve(args.listen_port, Front((host, int(port)), args.mode)))


if __name__ == "__main__":
    main()
