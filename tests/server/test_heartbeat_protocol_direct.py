"""The heartbeat listener's protocol with an app that answers plain heartbeats past ASGI (``direct_heartbeat``, as a
node shard process's does): over real HTTP on 127.0.0.1, every request gets byte for byte the answer the same
protocol gives through the app's ASGI side (date aside), answered at once or later from the loop, refused, crashed
at once or later (500, the connection closed), pipelined, split, handed over (another method); idle keep-alive
connections still close; and the plain heartbeats never reach the ASGI side."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from loopback import ServerThread

from pooltree.node import wire
from pooltree.server.heartbeat_protocol import Answering, HeartbeatProtocol, RawHeaders

PATH = wire.HEARTBEAT_PATH
WAIT = 20.0


def _answer_of(headers: RawHeaders, body: bytes, client: Any) -> tuple[int, RawHeaders, bytes]:
    """What the app answers a heartbeat: 401 to a body starting ``deny``, else 200; the Host header and the
    client's address echoed."""
    host = dict(headers).get(b"host", b"-")
    status = 401 if body.startswith(b"deny") else 200
    content = b"echo " + body + b" from " + str(client[0]).encode()
    headers = [(b"content-length", b"%d" % len(content)), (b"content-type", b"application/json")]
    return status, [*headers, (b"x-yt-host", host)], content


class _Asgi:
    """The app's ASGI side: the same answers, ``later`` a few loop turns later, ``boom`` raises at once,
    ``fail-later`` after a turn."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.calls += 1
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        if body.startswith(b"boom"):
            raise RuntimeError("boom")
        if body.startswith((b"later", b"fail-later")):
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            if body.startswith(b"fail-later"):
                raise RuntimeError("late boom")
        status, headers, content = _answer_of(scope["headers"], body, scope["client"])
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})


class _Direct(_Asgi):
    """The same app with ``direct_heartbeat``."""

    def __init__(self) -> None:
        super().__init__()
        self.direct = 0

    def direct_heartbeat(
        self, headers: RawHeaders, body: bytes, client: Any, server: Any, answering: Answering
    ) -> None:
        self.direct += 1
        if body.startswith(b"boom"):
            raise RuntimeError("boom")
        loop = asyncio.get_running_loop()
        if body.startswith(b"fail-later"):
            loop.call_soon(loop.call_soon, answering.fail, RuntimeError("late boom"))
            return
        status, answer_headers, content = _answer_of(headers, body, client)
        if body.startswith(b"later"):
            loop.call_soon(loop.call_soon, answering.answer, status, answer_headers, content)
            return
        answering.answer(status, answer_headers, content)


def _server(app: Any, keep_alive: float = 5.0) -> ServerThread:
    server = ServerThread(app, http=HeartbeatProtocol)
    server.server.config.proxy_headers = False  # the app as it is (uvicorn's proxy middleware would wrap it)
    server.server.config.timeout_keep_alive = keep_alive  # type: ignore[assignment]
    return server


def _request(body: bytes, extra: str = "") -> bytes:
    head = f"POST {PATH} HTTP/1.1\r\nHost: shard.test\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=WAIT)


def _read(sock: socket.socket, held: bytearray) -> tuple[bytes, bytes]:
    """One answer's head (its ``date`` line taken out) and body."""
    while b"\r\n\r\n" not in held:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before an answer"
        held += chunk
    head, _, rest = bytes(held).partition(b"\r\n\r\n")
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"date:")]
    length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length:"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside an answer"
        rest += chunk
    held[:] = rest[length:]
    return b"\r\n".join(lines), rest[:length]


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _exchange(url: str) -> list[Any]:
    """Everything a connection sees of: single heartbeats of each kind on one keep-alive connection; five
    pipelined in one write (at once, later, refused); one split in its head and its body; a GET between
    heartbeats (handed over to uvicorn's protocol); a crash at once and one later (500, closed)."""
    seen: list[Any] = []
    kinds = [b"now:1", b"later:2", b"deny:3", b"now:4"]
    with _connect(url) as sock:
        held = bytearray()
        for body in kinds:
            sock.sendall(_request(body))
            seen.append(_read(sock, held))
        pipelined = [b"now:5", b"later:6", b"now:7", b"deny:8", b"later:9"]
        sock.sendall(b"".join(_request(body) for body in pipelined))
        seen += [_read(sock, held) for _ in pipelined]
        whole = _request(b"later:10")
        for cut in (7, len(whole) - 3):
            sock.sendall(whole[:cut])
            sock.sendall(whole[cut:])
            seen.append(_read(sock, held))
        assert not held
    with _connect(url) as sock:
        held = bytearray()
        sock.sendall(_request(b"now:11") + f"GET {PATH} HTTP/1.1\r\nHost: shard.test\r\n\r\n".encode())
        seen.append(_read(sock, held))
        seen.append(_read(sock, held))  # uvicorn's protocol answers the GET (the app's ASGI side)
    for crash in (b"boom", b"fail-later"):
        with _connect(url) as sock:
            sock.sendall(_request(b"now:12") + _request(crash) + _request(b"now:13"))
            held = bytearray()
            seen.append(_read(sock, held))
            seen.append(_read(sock, held))
            seen.append(_closed(sock))
    return seen


def test_a_direct_app_s_answers_are_its_asgi_side_s_byte_for_byte() -> None:
    direct, asgi = _Direct(), _Asgi()
    with _server(direct) as lean, _server(asgi) as plain:
        theirs = _exchange(plain.url)
        ours = _exchange(lean.url)
    assert ours == theirs
    statuses = [answer[0].split(b"\r\n")[0] for answer in ours if isinstance(answer, tuple)]
    assert statuses.count(b"HTTP/1.1 500 Internal Server Error") == 2
    assert statuses.count(b"HTTP/1.1 401 Unauthorized") == 2
    assert ours[-1] is True and ours[-4] is True  # each crash closed its connection
    # every plain heartbeat went past ASGI; only the GET reached the ASGI side
    assert direct.direct == 16 and direct.calls == 1
    assert asgi.calls == 17


def test_idle_keep_alive_connections_are_closed_after_direct_answers() -> None:
    direct = _Direct()
    with _server(direct, keep_alive=0.2) as server, _connect(server.url) as sock:
        held = bytearray()
        for body in (b"now:1", b"later:2", b"now:3"):
            sock.sendall(_request(body))
            head, _ = _read(sock, held)
            assert head.startswith(b"HTTP/1.1 200 OK") and b"connection" not in head.lower()
        began = time.monotonic()
        assert _closed(sock), "the idle connection was not closed"
        assert time.monotonic() - began < WAIT
    assert direct.direct == 3 and direct.calls == 0


@pytest.mark.parametrize("body", [b"later:1", b"now:1"])
def test_an_answer_after_the_client_left_is_dropped(body: bytes) -> None:
    """A client that closes before its answer: nothing is written, and the server goes on serving."""
    direct = _Direct()
    with _server(direct) as server:
        with _connect(server.url) as sock:
            sock.sendall(_request(body))
        with _connect(server.url) as sock:
            sock.sendall(_request(b"now:2"))
            head, content = _read(sock, bytearray())
            assert head.startswith(b"HTTP/1.1 200 OK") and content.startswith(b"echo now:2")
