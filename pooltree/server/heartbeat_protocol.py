"""The heartbeat listener's HTTP/1.1 protocol: plain node heartbeats served past uvicorn's request machinery.

Measured on this VM with 300 keep-alive clients at 600 requests/s (``bench/heartbeat_transport.py``), uvicorn's
httptools protocol with a trivial ASGI app costs its server ~115 us of CPU per request, a bare httptools parser
answering the same bytes ~43 us and a length-prefixed frame protocol ~39 us: HTTP itself is not the cost, uvicorn's
per-request Python is (the scope and cycle objects, the ``asyncio.Event`` and task per request, the checks of every
response header, the keep-alive timer armed and cancelled per request).

``HeartbeatProtocol`` takes the requests every node sends, and only those: ``POST /internal/node_heartbeat
HTTP/1.1`` whose head is whole and well formed (token names, values without control characters), with one
``Content-Length`` within ``MAX_HEARTBEAT_BYTES`` and none of ``Transfer-Encoding``, ``Content-Encoding``,
``Expect``, ``Upgrade`` nor a ``Connection`` other than ``keep-alive``. It runs the same ASGI app as uvicorn would
(so the same handler gives the same answers, refusals included) with the body as its one message, and writes the
answer in one ``send``. Anything else (another path or method, a compressed or chunked body, a head it does not
take, a request still partial after ``PARTIAL_SECONDS``) hands the connection, with the bytes it holds of that
request onwards, to uvicorn's protocol (``BoundedHeadersProtocol``) for the rest of its life, as uvicorn hands a
connection to its WebSocket protocol: such requests get exactly the answers they got before.

An app that also offers ``direct_heartbeat`` (``DirectHeartbeats``: the scheduler's heartbeat listener's,
``leader.HeartbeatEntry``, and a node shard process's, ``shards/process.py``) gets the plain heartbeats this
protocol takes past ASGI: called with the head's headers, the whole body and the
connection's addresses, it answers through ``Answering`` (status, headers, body: written as ``_write_whole``
writes an ASGI answer), at once or later from the loop, with no task, scope or messages per request (in a shard
process the ASGI layers, the task and the future a forwarded heartbeat waited on were a quarter of its
instructions per forwarded heartbeat: ``bench/shard_forward.py``, ``bench/RESULTS.md`` session 33).
What it hands over still reaches the app's ASGI side, as before.

Idle keep-alive connections are closed after uvicorn's ``timeout_keep_alive``, as uvicorn closes them, by one timer
per connection re-armed lazily (not one per request).
"""

from __future__ import annotations

import asyncio
import http
import logging
import re
from functools import lru_cache
from typing import Any, Protocol
from urllib.parse import urlsplit

from starlette.responses import Response

from pooltree.node.wire import HEARTBEAT_PATH, MEDIA_TYPE
from pooltree.server.heartbeat_trace import TRACE, SpanCpu
from pooltree.server.http_protocol import ARRIVED, ARRIVED_CPU, BODY_WHOLE, BoundedHeadersProtocol

log = logging.getLogger(__name__)

MAX_HEARTBEAT_BYTES = 16 << 20
"""A body declared larger is handed to uvicorn's protocol (whose route answers 413), as ``heartbeats.py`` limits."""
MAX_HEAD_BYTES = 16 << 10
"""A request head not whole within this many bytes is handed over."""
PARTIAL_SECONDS = 1.0
"""A request still partial this long after its first byte is handed over (uvicorn then times its head and the
route its body, as before)."""
PAUSE_BYTES = 256 << 10
"""Reading pauses while a request is answered and this much of the next ones is held."""

_REQUEST_LINE = b"POST " + HEARTBEAT_PATH.encode("ascii") + b" HTTP/1.1"
_HEADER_LINES = re.compile(rb"(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t \x21-\x7e\x80-\xff]*\r\n)*")
"""Header lines as the protocol takes them: a token name, a colon, a value of visible characters, spaces and tabs
(obs-text allowed, as httptools allows it); no obs-fold."""
_HANDED_OVER = frozenset((b"transfer-encoding", b"content-encoding", b"expect", b"upgrade"))
_STATUS_LINES = {
    status.value: b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode("ascii"))
    for status in http.HTTPStatus
}


RawHeaders = list[tuple[bytes, bytes]]
_ANSWER_TYPE = MEDIA_TYPE.encode("latin-1")


class Answering:
    """One plain heartbeat given to an app's ``direct_heartbeat``: ``answer`` it once (now or later, on the loop),
    or ``fail`` (what a crashed ASGI app gets: logged, a 500 when nothing was written, the connection closed).
    ``arrived`` and ``arrived_cpu`` are the scope's ``ARRIVED`` and ``ARRIVED_CPU`` of the ASGI path, read while
    ``direct_heartbeat`` runs."""

    __slots__ = ("_protocol", "_serial")

    def __init__(self, protocol: HeartbeatProtocol, serial: int) -> None:
        self._protocol = protocol
        self._serial = serial

    @property
    def arrived(self) -> float:
        return self._protocol.arrived

    @property
    def arrived_cpu(self) -> SpanCpu | None:
        return self._protocol.arrived_cpu

    def answer(self, status: int, headers: RawHeaders, body: bytes) -> None:
        """The answer: ``status``, the app's ``headers`` (names lowercase; uvicorn's default ones are added) and
        ``body``; nothing when the connection is gone."""
        self._protocol._answered(self._serial, status, headers, body)

    def route_answer(self, result: bytes | Response) -> None:
        """``result`` as ``heartbeats.HeartbeatRoute`` sends it: an answer's body (200) with its length and the
        wire's media type, an error's ``Response`` as Starlette sends one (no background task)."""
        if isinstance(result, Response):
            self.answer(result.status_code, result.raw_headers, bytes(result.body))
            return
        self.answer(200, [(b"content-length", b"%d" % len(result)), (b"content-type", _ANSWER_TYPE)], result)

    def fail(self, error: BaseException) -> None:
        self._protocol._failed(self._serial, error)


def header_value(headers: RawHeaders, name: bytes) -> str:
    """Starlette's ``Headers(scope=scope).get(name, "")`` of a request whose header names are lowercase."""
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return ""


@lru_cache(maxsize=64)
def _host_name(scheme: str, netloc: str) -> str | None:
    return urlsplit(f"{scheme}://{netloc}").hostname


def hostname_of(headers: RawHeaders, server: tuple[str, int] | None, scheme: str = "http") -> str | None:
    """Starlette's ``Request(scope).url.hostname`` of a request with ``headers`` (names lowercase) that reached
    ``server`` (the host a node reached this listener at: its Host header, else the server's address), without
    building the request's whole URL; nodes send few distinct Host headers, so each is split once."""
    for key, value in headers:
        if key == b"host":
            return _host_name(scheme, value.decode("latin-1"))
    if server is None:
        return None
    host, port = server
    default = {"http": 80, "https": 443, "ws": 80, "wss": 443}.get(scheme)
    return _host_name(scheme, host if port == default else f"{host}:{port}")


class DirectHeartbeats(Protocol):
    """An ASGI app's way past ASGI for the plain heartbeats ``HeartbeatProtocol`` takes (its attribute
    ``direct_heartbeat``)."""

    def __call__(
        self,
        headers: RawHeaders,
        body: bytes,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        answering: Answering,
    ) -> None: ...


class HeartbeatProtocol(asyncio.Protocol):
    """``uvicorn.Config(app, http=HeartbeatProtocol)``: plain node heartbeats answered here, everything else by
    ``BoundedHeadersProtocol`` (see the module docstring). Constructed by uvicorn as its HTTP protocols are."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any], _loop: Any = None) -> None:
        if not config.loaded:
            config.load()
        self.config = config
        self.app = config.loaded_app
        self.direct: DirectHeartbeats | None = getattr(self.app, "direct_heartbeat", None)
        """The app's way past ASGI for plain heartbeats, if it has one."""
        self.after_reads = self.direct is not None and bool(getattr(self.app, "direct_after_reads", False))
        """The app's ``direct_after_reads``: requests are taken from the loop's ready queue (``call_soon``), in turn
        with its other callbacks, not in the read that completed them (see ``data_received``)."""
        self.taking = False
        """``after_reads``: a ``_take`` is queued on the loop."""
        self.answering_now = False
        """``direct`` is running: an answer it gives now leaves taking the next request to ``_next``."""
        self.loop = _loop or asyncio.get_event_loop()
        self.server_state = server_state
        self.app_state = app_state
        self.keep_alive_seconds = float(config.timeout_keep_alive)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self.buffer = bytearray()
        self.arrived = 0.0
        """Loop time of the last bytes received (a request's ``ARRIVED``)."""
        self.arrived_cpu: SpanCpu | None = None
        """The CPU clocks then (a request's ``ARRIVED_CPU``; only while ``heartbeat_trace`` is on)."""
        self.partial_since: float | None = None
        """Loop time of the first byte of a request not yet whole (None: none is)."""
        self.busy = False
        """A request is being answered (the next one waits in ``buffer``)."""
        self.closing = False
        """Close once the request being answered is answered (uvicorn's shutdown)."""
        self.disconnected = False
        self.handed_over = False
        self.paused = False
        self.write_paused = False
        """The transport's buffer is over its high-water mark (a client not reading its answers): no request is
        taken until it drains."""
        self.last_activity = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.serial = 0
        """Requests taken so far (the one being answered is the last)."""
        self.response_started = False
        self.response: list[bytes] = []
        self.status = 200
        self.headers: list[tuple[bytes, bytes]] = []

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.server_state.connections.add(self)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, (list, tuple)) and len(peer) >= 2:
            self.client = (str(peer[0]), int(peer[1]))
        local = transport.get_extra_info("sockname")
        if isinstance(local, (list, tuple)) and len(local) >= 2:
            self.server = (str(local[0]), int(local[1]))
        self.last_activity = self.loop.time()
        self._arm(self.last_activity + self.keep_alive_seconds)

    def data_received(self, data: bytes) -> None:
        now = self.loop.time()
        self.last_activity = self.arrived = now
        if TRACE.enabled:
            self.arrived_cpu = SpanCpu()
        if not self.buffer:
            self.partial_since = now
        self.buffer += data
        if self.busy or self.write_paused:
            if len(self.buffer) > PAUSE_BYTES and not self.paused:
                self.paused = True
                self.transport.pause_reading()
            return
        if self.after_reads:
            # An app whose heartbeat is real work (the scheduler's: the lock, a scheduling pass) takes it from the
            # loop's ready queue, as a task would: the loop's turn of reads stays short, and the group commit's
            # wake-ups of heartbeats already processed (queued meanwhile) are not held behind the turn's new
            # heartbeats; ``arrived`` to the take is the wait the throttle's ``queued`` limit reads.
            if not self.taking:
                self.taking = True
                self.loop.call_soon(self._take)
            return
        self._next()

    def _take(self) -> None:
        self.taking = False
        if not (self.busy or self.write_paused or self.closing or self.disconnected or self.handed_over):
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disconnected = True
        self.server_state.connections.discard(self)
        self._disarm()

    def eof_received(self) -> bool | None:
        return None  # close our side once the answer being written is written

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._continue()

    # ------------------------------------------------------------------ uvicorn's server

    def shutdown(self) -> None:
        """Called by uvicorn's server as it stops: close now when idle, else after the answer being written."""
        if self.busy:
            self.closing = True
        else:
            self.transport.close()

    # ------------------------------------------------------------------ requests

    def _next(self) -> None:
        """Take the next whole request held, if any; hand over what this protocol does not take. Heartbeats the
        app answers at once (``direct``) are followed by the next one held, in this call."""
        answered = False
        while True:
            buffer = self.buffer
            if not buffer:
                self.partial_since = None
                break
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES or not _REQUEST_LINE.startswith(
                    bytes(buffer[: len(_REQUEST_LINE)])
                ):
                    self._hand_over()
                    return
                self._wait_partial()
                break
            line_end = buffer.find(b"\r\n")
            if buffer[:line_end] != _REQUEST_LINE:
                self._hand_over()
                return
            headers = self._headers(buffer, line_end + 2, end + 2)
            length = _content_length(headers) if headers is not None else None
            if length is None:
                self._hand_over()
                return
            start = end + 4
            if len(buffer) < start + length:
                self._wait_partial()
                break
            body = bytes(buffer[start : start + length])
            del buffer[: start + length]
            self.partial_since = self.loop.time() if buffer else None
            if self.direct is None:
                self._run(headers, body)  # type: ignore[arg-type]
                return
            if not self._run_direct(headers, body):  # type: ignore[arg-type]
                return  # answered later (``_answered`` goes on from there), or failed
            if self.write_paused or self.closing or self.disconnected:
                return
            answered = True
            self.last_activity = self.loop.time()
        if answered and self.timer is None:
            self._arm(self.last_activity + self.keep_alive_seconds)

    def _headers(self, buffer: bytearray, begin: int, end: int) -> list[tuple[bytes, bytes]] | None:
        """The head's header lines (names lowercased, values stripped), None when it is not one this protocol
        takes."""
        block = bytes(buffer[begin:end])
        if _HEADER_LINES.fullmatch(block) is None:
            return None
        headers = []
        for line in block.split(b"\r\n")[:-1]:
            name, _, value = line.partition(b":")
            name = name.lower()
            value = value.strip(b" \t")
            if name in _HANDED_OVER or (name == b"connection" and value.lower() != b"keep-alive"):
                return None
            headers.append((name, value))
        return headers

    def _wait_partial(self) -> None:
        if self.partial_since is None:
            self.partial_since = self.loop.time()
        self._arm(self.partial_since + PARTIAL_SECONDS)

    def _run(self, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.busy = True
        self.serial += 1
        self.response_started = False
        self.response = []
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": "http",
            "root_path": "",
            "headers": headers,
            "state": self.app_state.copy(),
            "method": "POST",
            "path": HEARTBEAT_PATH,
            "raw_path": HEARTBEAT_PATH.encode("ascii"),
            "query_string": b"",
            ARRIVED: self.arrived,
            ARRIVED_CPU: self.arrived_cpu,
            BODY_WHOLE: True,
        }
        self.server_state.tasks.add(self.loop.create_task(self._answer(scope, body, self.serial)))

    def _run_direct(self, headers: RawHeaders, body: bytes) -> bool:
        """The heartbeat to the app's ``direct``; whether it was answered at once."""
        assert self.direct is not None
        self.busy = True
        self.serial += 1
        self.response_started = False
        self.answering_now = True
        try:
            self.direct(headers, body, self.client, self.server, Answering(self, self.serial))
        except BaseException as error:
            self.answering_now = False
            self._failed(self.serial, error)
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            return False
        self.answering_now = False
        return not self.busy

    def _answered(self, serial: int, status: int, headers: RawHeaders, body: bytes) -> None:
        """``Answering.answer``: written as an ASGI answer is (``_send``), then the next request held."""
        if self.disconnected or not self.busy or serial != self.serial:
            return
        self._write_whole(status, headers, body)
        self.busy = False
        self.server_state.total_requests += 1
        if self.closing:
            self.transport.close()
        elif not self.answering_now:
            self._continue()

    def _failed(self, serial: int, error: BaseException) -> None:
        """``Answering.fail``: what ``_answer`` does with a crashed app."""
        log.error("Exception in ASGI application", exc_info=error)
        self._end_unanswered(serial)

    async def _answer(self, scope: dict[str, Any], body: bytes, serial: int) -> None:
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            return messages.pop() if messages else {"type": "http.disconnect"}

        try:
            await self.app(scope, receive, self._send)
        except BaseException as error:  # what uvicorn's cycle does with a crashed app
            log.error("Exception in ASGI application", exc_info=error)
            self._end_unanswered(serial)
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            return
        finally:  # uvicorn's server waits for these as it stops (no done callback: one loop turn less)
            self.server_state.tasks.discard(asyncio.current_task())
        if self.busy and serial == self.serial:
            log.error("ASGI callable returned without completing its response.")
            self._end_unanswered(serial)
            return
        self._continue()

    def _end_unanswered(self, serial: int) -> None:
        """A request the app did not answer whole: a 500 when nothing of the answer was written, and nothing
        more on this connection."""
        if not self.busy or serial != self.serial:
            return
        self.closing = True
        if not self.disconnected:
            if not self.response_started:
                headers = [(b"content-type", b"text/plain; charset=utf-8")]
                self._write_whole(500, headers, b"Internal Server Error")
            self.transport.close()
        self.busy = False

    async def _send(self, message: dict[str, Any]) -> None:
        if self.disconnected or not self.busy:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
                )
            self.response_started = True
            self.status = int(message["status"])
            self.headers = list(message.get("headers", ()))
            return
        if message["type"] != "http.response.body":
            raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{message['type']}'.")
        self.response.append(bytes(message.get("body", b"")))
        if not message.get("more_body", False):
            body = self.response[0] if len(self.response) == 1 else b"".join(self.response)
            self._write_whole(self.status, self.headers, body)
            self.busy = False
            self.server_state.total_requests += 1
            if self.closing:
                self.transport.close()

    def _write_whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """The answer's head and body in one write: uvicorn's default headers (``date``, ``server``), the app's,
        ``content-length`` when the app gave none, ``connection: close`` when this connection ends with it."""
        content = [_STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status]
        length = None
        for name, value in (*self.server_state.default_headers, *headers):
            name = name.lower()
            if name == b"content-length":
                length = value
            elif name == b"connection" and b"close" in value.lower():
                self.closing = True
                continue
            content.append(b"%s: %s\r\n" % (name, value))
        if length is None:
            content.append(b"content-length: %d\r\n" % len(body))
        if self.closing:
            content.append(b"connection: close\r\n")
        content.append(b"\r\n")
        content.append(body)
        self.transport.write(b"".join(content))

    def _continue(self) -> None:
        """After an answer: the next request held, or the idle timer."""
        if self.busy or self.write_paused or self.closing or self.disconnected or self.handed_over:
            return
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        self.last_activity = self.loop.time()
        self._next()
        if not self.busy and not self.buffer and self.timer is None:
            self._arm(self.last_activity + self.keep_alive_seconds)

    # ------------------------------------------------------------------ timers and handing over

    def _arm(self, when: float) -> None:
        if self.timer is not None:
            if self.timer.when() <= when:
                return  # fires first; ``_expired`` arms again
            self.timer.cancel()
        self.timer = self.loop.call_at(when, self._expired)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self) -> None:
        self.timer = None
        if self.disconnected or self.handed_over:
            return
        now = self.loop.time()
        if self.busy:
            return  # armed again when the answer is written
        if self.buffer:
            since = self.partial_since if self.partial_since is not None else now
            if now >= since + PARTIAL_SECONDS:
                self._hand_over()
            else:
                self._arm(since + PARTIAL_SECONDS)
            return
        idle_until = self.last_activity + self.keep_alive_seconds
        if now >= idle_until:
            self.transport.close()
        else:
            self._arm(idle_until)

    def _hand_over(self) -> None:
        """uvicorn's protocol takes the connection from here, with the bytes held (a request's first byte on)."""
        self.handed_over = True
        self._disarm()
        self.server_state.connections.discard(self)
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        protocol = BoundedHeadersProtocol(
            config=self.config, server_state=self.server_state, app_state=self.app_state, _loop=self.loop
        )
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
        data, self.buffer = bytes(self.buffer), bytearray()
        if data:
            protocol.data_received(data)


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The one ``content-length`` of ``headers`` when it is digits within ``MAX_HEARTBEAT_BYTES``, else None."""
    found = None
    for name, value in headers:
        if name == b"content-length":
            if found is not None or not value.isdigit() or len(value) > 9:
                return None
            found = int(value)
    if found is None or found > MAX_HEARTBEAT_BYTES:
        return None
    return found
