"""The read process's HTTP: each client connection's requests answered by the replica when they may be, else relayed
byte for byte over a kept connection of its own to the scheduler's internal listener, and the answers back.

Request and answer boundaries are found by httptools (the parser uvicorn uses); nothing is rewritten. Per client
connection (``ClientSide``) one connection to the scheduler (``UpstreamSide``) is opened on its first relayed
request and kept while the client's is; its first line names the client (``peer_line``), so the scheduler reads the
client's address, not the read process's. A request that came whole in one read with nothing unanswered before
it on its connection is first asked of the replica (``Replica.answer``, ``seam.py``) with the floor: the largest
feed stamp (``seam.FEED_HEADER``) on any answer relayed since the replica was installed, read off the answer's
headers before the answer is written to its client.

What the relay does not parse it tunnels: a connection whose bytes the parser refuses (the scheduler answers them
as it would: 400 and close), an upgrade, a ``HEAD`` (its answer's length is not its body's) becomes a plain pipe of
bytes both ways, asked of the replica no more.

Slow readers hold back the other side (``pause_reading`` while the other transport's buffer is full), so neither a
slow client nor a large answer fills the read process's memory. A connection with nothing in flight closes after
``KEEP_ALIVE`` seconds (uvicorn's ``timeout_keep_alive``, which the scheduler's own port applies), one that never
sent a byte after ``FIRST_REQUEST_TIMEOUT`` (the scheduler's ``HEADER_TIMEOUT``); the scheduler's internal listener
keeps its connections longer (``UPSTREAM_KEEP_ALIVE``), so its close never races a request the relay just sent.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import httptools

from pooltree.reads.seam import FEED_HEADER, MAX_ANSWERABLE_BODY, NoReplica, ReadRequest, Replica

log = logging.getLogger(__name__)

KEEP_ALIVE = 5.0
"""Seconds a client connection with nothing in flight is kept (uvicorn's default ``timeout_keep_alive``)."""
FIRST_REQUEST_TIMEOUT = 20.0
"""Seconds a new client connection may take to send its first byte (``server.http_protocol.HEADER_TIMEOUT``)."""
TUNNEL_IDLE = 120.0
"""Seconds a tunnelled connection may pass without a byte either way."""
UPSTREAM_KEEP_ALIVE = KEEP_ALIVE + 60.0
"""The scheduler's internal listener's ``timeout_keep_alive``: longer than the relay keeps an idle client, so the
relay closes an idle pair first."""
HOLD_MAX = 0.02
"""Seconds at most a request is held in the read process for the replica's feed (``Replica.holds``: it would be
the replica's to answer but for the floor, the answer that carried the stamp having come before the tick's
message): it is asked again as each feed message is applied, and relayed when this passes first. About the
feed's ticks under load (the scheduler's ``feed.MIN_INTERVAL`` apart when owed, a tick's own time besides): a
held get costs its client at most this before the relay it would have had at once."""
SWEEP_PERIOD = 1.0
"""Seconds between looks for idle connections."""
PEER_LINE = b"POOLTREE-PEER"
"""The first word of a relayed connection's first line (``peer_line``)."""
_FEED_HEADER_LENGTH = len(FEED_HEADER)


def peer_line(secret: bytes, host: str, port: int) -> bytes:
    """The first line of a connection relayed for the client at ``host``:``port`` (``secret`` in hex, ASCII)."""
    return b"%s %s %s %d\r\n" % (PEER_LINE, secret, host.encode("ascii"), port)


class Relay:
    """The read process's relay: where to, the secret its connections carry, the installed replica, the floor and
    the counts; ``ClientSide`` is made per client connection with it."""

    def __init__(self, upstream: tuple[str, int], secret: bytes, loop: asyncio.AbstractEventLoop) -> None:
        self.upstream = upstream
        """The scheduler's internal listener."""
        self.secret = secret
        self.loop = loop
        self.replica: Replica = NoReplica()
        self.asks = False
        """The installed replica may answer (not a ``NoReplica``): requests are kept whole to ask it."""
        self.floor = 0
        """The largest feed stamp on an answer relayed since the replica was installed."""
        self.relayed = 0
        """Requests relayed to the scheduler."""
        self.answered = 0
        """Requests the replica answered."""
        self.tunnelled = 0
        """Connections that became plain pipes of bytes (not HTTP the relay parses, an upgrade, a HEAD)."""
        self.held: set[ClientSide] = set()
        """Connections whose request waits for the feed (``ClientSide.held``)."""
        self.holds = 0
        """Requests held for the feed, whether the replica then answered them or they were relayed."""
        self.connections: set[ClientSide] = set()

    def install(self, replica: Replica) -> None:
        """A fresh replica (a service began leading, or stopped: ``NoReplica``); the floor starts again, and what
        waited for the old replica's feed is relayed."""
        self.replica = replica
        self.asks = not isinstance(replica, NoReplica)
        self.floor = 0
        for client in list(self.held):
            client.release(relay=True)

    def fed(self) -> None:
        """The replica applied a feed message: each held request is asked again (answered, relayed, or held on
        while the replica is still behind its floor)."""
        for client in list(self.held):
            client.release()

    def holds_for(self, request: ReadRequest, floor: int) -> bool:
        """Whether the replica would have ``request`` wait for its feed to reach ``floor`` (``Replica.holds``); a
        replica that fails holds nothing."""
        try:
            return bool(self.replica.holds(request, floor))
        except Exception:
            log.exception("the replica failed to say whether %r waits for its feed", request.target)
            return False

    def raise_floor(self, value: bytes) -> None:
        try:
            stamp = int(value)
        except ValueError:
            return
        if stamp > self.floor:
            self.floor = stamp

    def ask(self, request: ReadRequest, floor: int | None = None) -> bytes | None:
        """The replica's answer to ``request`` at ``floor`` (None: the floor now; the result None: relay it); a
        replica that fails relays."""
        try:
            return self.replica.answer(request, self.floor if floor is None else floor)
        except Exception:
            log.exception(
                "the replica failed to answer %s %r; relayed", request.method.decode(), request.target
            )
            return None

    def protocol(self) -> ClientSide:
        return ClientSide(self)

    def sweep(self) -> None:
        """Close the client connections idle past their time (``KEEP_ALIVE``, ``FIRST_REQUEST_TIMEOUT``,
        ``TUNNEL_IDLE``)."""
        now = self.loop.time()
        for client in list(self.connections):
            if client.expired(now):
                client.close()

    async def sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_PERIOD)
            self.sweep()


@dataclass(frozen=True, slots=True)
class Held:
    """A request waiting for the replica's feed: it, the floor when it came, its bytes, its ``HOLD_MAX`` timer."""

    request: ReadRequest
    floor: int
    data: bytes
    timer: asyncio.TimerHandle


class ClientSide(asyncio.Protocol):
    """One client connection: requests parsed for their boundaries, answered by the replica or relayed."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] = ("", 0)
        self.parser = httptools.HttpRequestParser(self)
        self.begun = 0
        self.completed = 0
        self.ever = False
        """A byte came on this connection."""
        self.last_active = relay.loop.time()
        self.tunnel = False
        self.head = False
        """A ``HEAD`` was parsed: the connection becomes a tunnel once its bytes are relayed."""
        self.outstanding = 0
        """Relayed requests whose answers have not come back whole."""
        self.upstream: UpstreamSide | None = None
        self.waiting: list[bytes] | None = None
        """Bytes to relay while the upstream connection opens (None: not opening)."""
        self.closing = False
        """The client sent end of file."""
        self.held: Held | None = None
        """A request the replica holds for its feed (``Relay.holds_for``): reading paused until it is answered or
        relayed (``release``)."""
        # the request being parsed, kept only while the replica may answer (``Relay.asks``)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.body_size = 0
        self.keep_alive = True

    # ------------------------------------------------------------------ httptools callbacks

    def on_message_begin(self) -> None:
        self.begun += 1
        if self.relay.asks:
            self.url = b""
            self.headers = []
            self.body = []
            self.body_size = 0

    def on_url(self, url: bytes) -> None:
        if self.relay.asks:
            self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.relay.asks:
            self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self.parser.get_method() == b"HEAD":
            self.head = True

    def on_body(self, body: bytes) -> None:
        if self.relay.asks:
            self.body_size += len(body)
            if self.body_size <= MAX_ANSWERABLE_BODY:
                self.body.append(body)

    def on_message_complete(self) -> None:
        self.completed += 1
        if self.relay.asks:
            self.keep_alive = self.parser.should_keep_alive()

    # ------------------------------------------------------------------ asyncio

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = (str(peer[0]), int(peer[1]))
        self.relay.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self.last_active = self.relay.loop.time()
        self.ever = True
        if self.tunnel:
            self._relay(data, 0)
            return
        idle = self.outstanding == 0 and self.begun == self.completed
        begun, completed = self.begun, self.completed
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._become_tunnel()
        except httptools.HttpParserError:
            self._become_tunnel()
        new = self.begun - begun
        if (
            self.relay.asks
            and idle
            and new == 1
            and self.completed - completed == 1
            and not self.tunnel
            and not self.head
            and self.body_size <= MAX_ANSWERABLE_BODY
        ):
            request = self._request()
            relay = self.relay
            if relay.holds_for(request, relay.floor):
                self._hold(request, data)
                return
            answer = relay.ask(request)
            if answer is not None:
                self._answer(answer, request.keep_alive)
                return
        self._relay(data, new)
        if self.head and not self.tunnel:
            self._become_tunnel()

    def _request(self) -> ReadRequest:
        method = self.parser.get_method()
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        return ReadRequest(method, self.url, tuple(self.headers), body, self.peer, self.keep_alive)

    def _answer(self, answer: bytes, keep_alive: bool) -> None:
        self.relay.answered += 1
        transport = self.transport
        if transport is None:
            return
        transport.write(answer)
        if not keep_alive:
            transport.close()

    def _hold(self, request: ReadRequest, data: bytes) -> None:
        """``request`` (``data``: its bytes, all that came) waits for the feed: asked again at each feed message
        (``Relay.fed``), relayed after ``HOLD_MAX``; nothing more is read from the client meanwhile (what it
        sends next is answered after it, in order)."""
        relay = self.relay
        timer = relay.loop.call_later(HOLD_MAX, self.release, True)
        self.held = Held(request, relay.floor, data, timer)
        relay.held.add(self)
        relay.holds += 1
        if self.transport is not None:
            self.transport.pause_reading()

    def release(self, relay: bool = False) -> None:
        """The held request answered by the replica if it may now (its floor the one it came at: what the read
        process had relayed before it), else relayed when ``relay`` (its time is up, or a new replica came) or the
        replica no longer holds it; otherwise it waits on."""
        held = self.held
        if held is None:
            return
        if not relay and self.relay.holds_for(held.request, held.floor):
            return
        self._unhold(held)
        transport = self.transport
        if transport is None:
            return
        answer = None if relay else self.relay.ask(held.request, held.floor)
        if answer is not None:
            self._answer(answer, held.request.keep_alive)
        else:
            self._relay(held.data, 1)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _unhold(self, held: Held) -> None:
        self.held = None
        held.timer.cancel()
        self.relay.held.discard(self)

    def _become_tunnel(self) -> None:
        self.tunnel = True
        self.relay.tunnelled += 1

    def _relay(self, data: bytes, requests: int) -> None:
        self.relay.relayed += requests
        self.outstanding += requests
        upstream = self.upstream
        if upstream is not None and upstream.transport is not None:
            upstream.transport.write(data)
            return
        if self.waiting is not None:
            self.waiting.append(data)
            return
        self.waiting = [data]
        self.relay.loop.create_task(self._connect())

    async def _connect(self) -> None:
        relay = self.relay
        try:
            _, upstream = await relay.loop.create_connection(lambda: UpstreamSide(self), *relay.upstream)
        except OSError as error:
            log.warning("cannot reach the scheduler's internal listener %s:%d: %s", *relay.upstream, error)
            self.waiting = None
            self.close()
            return
        waiting, self.waiting = self.waiting or [], None
        if self.transport is None:  # the client went while the connection opened
            upstream.close()
            return
        self.upstream = upstream
        line = peer_line(relay.secret, *self.peer)
        upstream.write(line + b"".join(waiting))
        if self.closing and upstream.transport is not None and upstream.transport.can_write_eof():
            upstream.transport.write_eof()  # the client ended while the connection opened

    def upstream_answered(self) -> None:
        self.outstanding -= 1
        if self.outstanding == 0:
            self.last_active = self.relay.loop.time()

    def upstream_lost(self) -> None:
        """The scheduler closed the relayed connection: the client's closes too, after what was written to it
        (an answer with ``Connection: close``, an HTTP/1.0 answer delimited by the close, a request refused, the
        scheduler stopping; it keeps an idle connection longer than the relay does, ``UPSTREAM_KEEP_ALIVE``)."""
        self.upstream = None
        self.close()

    @property
    def busy(self) -> bool:
        """A request of this connection is unanswered (relayed, or held for the feed)."""
        return self.outstanding > 0 or self.held is not None

    def expired(self, now: float) -> bool:
        if self.tunnel:
            return now - self.last_active > TUNNEL_IDLE
        if self.busy or self.begun != self.completed or self.waiting is not None:
            return False
        limit = KEEP_ALIVE if self.ever else FIRST_REQUEST_TIMEOUT
        return now - self.last_active > limit

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        self.closing = True
        if self.outstanding == 0 and self.begun == self.completed and not self.tunnel:
            return False
        upstream = self.upstream
        if upstream is not None and upstream.transport is not None and upstream.transport.can_write_eof():
            upstream.transport.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.relay.connections.discard(self)
        if self.held is not None:
            self._unhold(self.held)
        if self.upstream is not None:
            self.upstream.close()

    def pause_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()


class UpstreamSide(asyncio.Protocol):
    """The relay's connection to the scheduler for one client connection: answers written back as they come,
    their boundaries counted, their feed stamps raising the floor before the client has them."""

    def __init__(self, client: ClientSide) -> None:
        self.client = client
        self.relay = client.relay
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.completed = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == _FEED_HEADER_LENGTH and name.lower() == FEED_HEADER:
            self.relay.raise_floor(value)

    def on_message_complete(self) -> None:
        if self.parser.get_status_code() < 200:  # 100 Continue: the answer follows
            return
        self.completed += 1

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        client = self.client.transport
        if client is not None and client.get_write_buffer_size() > client.get_write_buffer_limits()[1]:
            transport.pause_reading()

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        client = self.client
        completed = self.completed
        if not client.tunnel:
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                client._become_tunnel()  # the client reads what the scheduler wrote, as it would without a relay
        if client.transport is not None:
            client.transport.write(data)
        for _ in range(self.completed - completed):
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
