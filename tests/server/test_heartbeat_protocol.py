"""The heartbeat listener's protocol (``server/heartbeat_protocol.py``) over real HTTP on 127.0.0.1: every request
gets the answer uvicorn's protocol gives the same app (status, content type, length, ``X-YT-*`` headers, body;
request ids and times aside), whether the protocol answers it itself (plain heartbeats, refusals of their content
included) or hands the connection to uvicorn's protocol (another path or method, compressed, chunked or oversize
bodies, ``Connection: close``, a request that stays partial); pipelined and split requests; idle keep-alive
connections closed."""

from __future__ import annotations

import gzip
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from heartbeat_maps import comparable_answer, reporting_heartbeat
from loopback import ServerThread, read_answer

from pooltree.node import wire
from pooltree.server import heartbeat_protocol
from pooltree.server.heartbeat_protocol import HeartbeatProtocol
from pooltree.server.http_protocol import BoundedHeadersProtocol
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TOKEN = "ytct-0000-" + "be47" * 8
SECRET = "node-secret-" + "6" * 32
PATH = wire.HEARTBEAT_PATH
WAIT = 20.0


GOOD = wire.encode(reporting_heartbeat())
# (method, path, headers, body) of each request: the node secret is added unless the headers name it
REQUESTS: list[tuple[str, str, dict[str, str], bytes]] = [
    ("POST", PATH, {"Content-Type": "application/json"}, GOOD),
    ("POST", PATH, {"X-Pooltree-Node-Secret": ""}, GOOD),
    ("POST", PATH, {"X-Pooltree-Node-Secret": "wrong"}, GOOD),
    ("POST", PATH, {}, b"{not json"),
    ("POST", PATH, {}, b""),
    ("POST", PATH, {}, b"[1, 2]"),
    ("POST", PATH, {}, wire.encode({"node_address": "n2"})),
    ("POST", PATH, {}, wire.encode({**reporting_heartbeat("n3"), "running_jobs": [{"job_id": 7}]})),
    ("POST", PATH, {"Content-Encoding": "gzip"}, gzip.compress(GOOD)),
    ("POST", PATH, {"Content-Encoding": "br"}, GOOD),
    ("POST", PATH, {"Content-Encoding": "gzip"}, b"not gzip"),
    ("POST", PATH, {"Connection": "close"}, GOOD),
    ("POST", PATH, {"Expect": "100-continue"}, GOOD),
    ("GET", PATH, {}, b""),
    ("PUT", PATH, {}, GOOD),
    ("POST", "/api/v4/get", {}, b"{}"),
    ("POST", PATH + "?x=1", {}, GOOD),
]


class _Listener:
    """The heartbeat listener's ASGI entry as an ASGI 3 object."""

    def __init__(self, service: SchedulerService) -> None:
        self.service = service

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.service.heartbeat_asgi(scope, receive, send)


def _head(length: int, extra: str = "") -> bytes:
    return (
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pooltree-Node-Secret: {SECRET}\r\n"
        f"Content-Type: application/json\r\n{extra}Content-Length: {length}\r\n\r\n"
    ).encode()


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=WAIT)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        time.sleep(0.01)


@pytest.fixture
async def service(tmp_path: Path) -> Any:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        create_default_tree=True,
        token=TOKEN,
        node_secret=SECRET,
    )
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


@pytest.mark.anyio
async def test_every_request_gets_uvicorns_answer(service: SchedulerService, monkeypatch: Any) -> None:
    handed: list[int] = []
    hand_over = HeartbeatProtocol._hand_over

    def counted(protocol: HeartbeatProtocol) -> None:
        handed.append(1)
        hand_over(protocol)

    monkeypatch.setattr(HeartbeatProtocol, "_hand_over", counted)
    with (
        ServerThread(_Listener(service), http=HeartbeatProtocol) as lean,
        ServerThread(_Listener(service), http=BoundedHeadersProtocol) as plain,
    ):
        for method, path, extra, body in REQUESTS:
            headers = {"X-Pooltree-Node-Secret": SECRET, **extra}
            answers = []
            before = len(handed)
            for base in (lean.url, plain.url):
                async with httpx.AsyncClient(timeout=WAIT) as client:  # a connection of its own
                    response = await client.request(method, base + path, headers=headers, content=body)
                answers.append(
                    comparable_answer(response.status_code, dict(response.headers), response.content)
                )
            assert answers[0] == answers[1], (method, path, extra, body[:40])
            # the protocol answers plain heartbeats itself (refused or not), and hands over everything else
            plain_heartbeat = (
                method == "POST"
                and path == PATH
                and not ({"Content-Encoding", "Connection", "Expect"} & set(extra))
            )
            assert len(handed) - before == (0 if plain_heartbeat else 1), (method, path, extra)
        # a node's keep-alive connection: many heartbeats, then a refusal, then heartbeats again, on one connection
        async with httpx.AsyncClient(timeout=WAIT) as client:
            for sequence in range(2, 6):
                body = wire.encode(reporting_heartbeat("n4", sequence))
                headers = {"X-Pooltree-Node-Secret": SECRET if sequence != 4 else "wrong"}
                answers = []
                for base in (lean.url, plain.url):
                    response = await client.post(base + PATH, headers=headers, content=body)
                    answers.append(
                        comparable_answer(response.status_code, dict(response.headers), response.content)
                    )
                assert answers[0][0] == (401 if sequence == 4 else 200)
                assert answers[0][:4] == answers[1][:4]


@pytest.mark.anyio
async def test_pipelined_split_and_stalled_requests(service: SchedulerService, monkeypatch: Any) -> None:
    monkeypatch.setattr(heartbeat_protocol, "PARTIAL_SECONDS", 0.05)
    with (
        ServerThread(_Listener(service), http=HeartbeatProtocol) as lean,
        ServerThread(_Listener(service), http=BoundedHeadersProtocol) as plain,
    ):
        bodies = [wire.encode(reporting_heartbeat("n5", sequence)) for sequence in (1, 2, 3)]
        requests = [_head(len(body)) + body for body in bodies]
        answers: dict[str, list[tuple[Any, ...]]] = {}
        for name, server in (("lean", lean), ("plain", plain)):
            got = answers[name] = []
            with _connect(server.url) as sock:
                held = bytearray()
                sock.sendall(b"".join(requests))  # three heartbeats in one write: three answers in order
                got += [comparable_answer(*read_answer(sock, held)) for _ in requests]
                for cut in (
                    10,
                    len(requests[0]) - 3,
                ):  # one heartbeat in two writes, cut in its head, its body
                    sock.sendall(requests[0][:cut])
                    sock.sendall(requests[0][cut:])
                    got.append(comparable_answer(*read_answer(sock, held)))
                assert not held
        assert answers["lean"] == answers["plain"]
        assert [answer[0] for answer in answers["lean"]] == [200] * 5

        # a request that stays partial is handed to uvicorn's protocol, which answers it once it is whole
        connections = lean.server.server_state.connections
        with _connect(lean.url) as sock:
            sock.sendall(requests[1][:-5])
            _wait_for(
                lambda: any(isinstance(c, BoundedHeadersProtocol) for c in connections),
                "the connection handed over",
            )
            sock.sendall(requests[1][-5:])
            assert comparable_answer(*read_answer(sock, bytearray())) == answers["plain"][1]


def test_idle_keep_alive_connections_are_closed() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    server = ServerThread(app, http=HeartbeatProtocol)
    server.server.config.timeout_keep_alive = 0.2  # type: ignore[assignment]
    with server, _connect(server.url) as sock:
        held = bytearray()
        for _ in range(3):
            sock.sendall(_head(2) + b"{}")
            status, headers, body = read_answer(sock, held)
            assert (status, body) == (200, b"ok")
            assert "date" in headers and "connection" not in headers
        began = time.monotonic()
        assert sock.recv(1) == b"", "the idle connection was not closed"
        assert time.monotonic() - began < WAIT


def test_a_crashing_app_gets_a_500_and_the_connection_ends() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    with ServerThread(app, http=HeartbeatProtocol) as server, _connect(server.url) as sock:
        sock.sendall(_head(2) + b"{}")
        status, headers, body = read_answer(sock, bytearray())
        assert (status, body, headers["connection"]) == (500, b"Internal Server Error", "close")
        assert sock.recv(1) == b""
