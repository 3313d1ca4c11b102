"""``app.read_body`` over the scheduler's HTTP protocol: a body the protocol holds whole is read without a timer
(``http_protocol.BODY_WHOLE``), one still arriving is read piece by piece under the idle timeout; both give the
same bytes, and a client hanging up mid-body is ``ClientGone``."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from pooltree.server import http_protocol
from pooltree.server.app import ClientGone, read_body

seen_bodies: list[tuple[bool, bytes | str]] = []
started_handlers: list[bool] = []


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers the body's length; records whether the body was whole when the handler began, and what it read."""
    request = Request(scope, receive)
    whole = bool(scope.get(http_protocol.BODY_WHOLE))
    started_handlers.append(whole)
    try:
        body = await read_body(request, 1 << 20)
    except ClientGone as error:
        seen_bodies.append((whole, str(error)))
        return
    seen_bodies.append((whole, body))
    await Response(str(len(body)).encode())(scope, receive, send)


@pytest.fixture
def url(serve: Callable[..., str]) -> str:
    """host:port of uvicorn serving ``_app`` with the scheduler's HTTP protocol (``serve``: tests/server/conftest.py)."""
    return serve(_app, http=http_protocol.BoundedHeadersProtocol).removeprefix("http://")


def _head(length: int) -> bytes:
    return f"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()


def _answer(sock: socket.socket) -> bytes:
    """One whole answer (head and ``Content-Length`` bytes of body)."""
    data = b""
    while True:
        head, _, body = data.partition(b"\r\n\r\n")
        if _:
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(body) >= length:
                return data
        piece = sock.recv(65536)
        if not piece:
            return data
        data += piece


def _connect(url: str) -> socket.socket:
    host, port = url.split(":")
    return socket.create_connection((host, int(port)), timeout=20)


def _wait(items: list[Any], count: int) -> None:
    deadline = time.monotonic() + 20
    while len(items) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(items) >= count


def test_a_body_sent_whole_is_marked_whole_and_read(url: str) -> None:
    seen_bodies.clear()
    started_handlers.clear()
    body = b"x" * 5000
    with _connect(url) as sock:
        for _ in range(3):  # also on a connection kept alive
            sock.sendall(_head(len(body)) + body)
            assert _answer(sock).endswith(b"\r\n\r\n5000")
    assert seen_bodies == [(True, body)] * 3


def test_a_body_arriving_in_pieces_is_read_whole_under_the_timer(url: str) -> None:
    seen_bodies.clear()
    started_handlers.clear()
    with _connect(url) as sock:
        sock.sendall(_head(12) + b"hello ")
        _wait(started_handlers, 1)  # the handler began with half the body
        sock.sendall(b"world!")
        assert _answer(sock).endswith(b"\r\n\r\n12")
    assert seen_bodies == [(False, b"hello world!")]


def test_a_client_hanging_up_mid_body_is_client_gone(url: str) -> None:
    seen_bodies.clear()
    started_handlers.clear()
    with _connect(url) as sock:
        sock.sendall(_head(100) + b"abc")
        _wait(started_handlers, 1)
    _wait(seen_bodies, 1)
    assert len(seen_bodies) == 1 and seen_bodies[0][0] is False
    assert "hung up after 3 bytes" in str(seen_bodies[0][1])
