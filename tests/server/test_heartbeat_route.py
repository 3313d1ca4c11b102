"""The heartbeat route served straight from ASGI (``heartbeats.HeartbeatRoute``, the scheduler process's entry:
no Starlette ``Request``/``Response``, a body held whole read as its one message) answers as the app's Starlette
route does, over real HTTP (uvicorn with the scheduler's protocol, which marks bodies held whole): the same status,
content type, ``X-YT-*`` error headers and body (request ids and times aside), for good heartbeats and every kind of
refusal (credentials, JSON, fields, encodings, sizes, methods)."""

from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from heartbeat_maps import comparable_answer, reporting_heartbeat
from loopback import ServerThread

from pooltree.node import wire
from pooltree.server import heartbeats
from pooltree.server.http_protocol import BoundedHeadersProtocol
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TOKEN = "ytct-0000-" + "be47" * 8
SECRET = "node-secret-" + "5" * 32
PATH = wire.HEARTBEAT_PATH
ONE_WRITE_ATTEMPTS = 20


GOOD = wire.encode(reporting_heartbeat())
# (method, headers, body) of each request: the node secret is added unless the headers name it
REQUESTS: list[tuple[str, dict[str, str], bytes]] = [
    ("POST", {"Content-Type": "application/json"}, GOOD),
    ("POST", {"X-Pooltree-Node-Secret": ""}, GOOD),
    ("POST", {"X-Pooltree-Node-Secret": "wrong"}, GOOD),
    ("POST", {}, b"{not json"),
    ("POST", {}, b""),
    ("POST", {}, b"[1, 2]"),
    ("POST", {}, wire.encode({"node_address": "n2"})),
    ("POST", {}, wire.encode({**reporting_heartbeat("n3"), "running_jobs": [{"job_id": 7}]})),
    ("POST", {"Content-Encoding": "gzip"}, gzip.compress(GOOD)),
    ("POST", {"Content-Encoding": "br"}, GOOD),
    ("POST", {"Content-Encoding": "gzip"}, b"not gzip"),
    ("GET", {}, b""),
    ("PUT", {}, GOOD),
]


class _Entry:
    """The process's entry as an ASGI 3 object (uvicorn takes a bound method for ASGI 2)."""

    def __init__(self, service: SchedulerService) -> None:
        self.service = service

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.service.asgi(scope, receive, send)


def _raw(url: str, head: bytes) -> tuple[int, dict[str, str], bytes]:
    """A request sent as ``head`` alone over a socket (a declared body that never comes); the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(head)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    header_part, _, body = data.partition(b"\r\n\r\n")
    lines = header_part.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@pytest.mark.anyio
async def test_the_direct_heartbeat_route_answers_as_the_apps(tmp_path: Path, monkeypatch: Any) -> None:
    plain_reads: list[bool] = []
    read_body = heartbeats.read_body

    async def counted(request: Any, limit: int, what: str) -> bytes:
        plain_reads.append(True)
        return await read_body(request, limit, what)

    monkeypatch.setattr(heartbeats, "read_body", counted)
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        create_default_tree=True,
        token=TOKEN,
        node_secret=SECRET,
    )
    await service.start()
    try:
        with (
            ServerThread(_Entry(service), http=BoundedHeadersProtocol) as direct,
            ServerThread(service.app, http=BoundedHeadersProtocol) as through_app,
        ):
            async with httpx.AsyncClient(timeout=20) as client:
                for method, extra, body in REQUESTS:
                    headers = {"X-Pooltree-Node-Secret": SECRET, **extra}
                    answers = []
                    for base in (direct.url, through_app.url):
                        response = await client.request(method, base + PATH, headers=headers, content=body)
                        answers.append(
                            comparable_answer(response.status_code, dict(response.headers), response.content)
                        )
                    assert answers[0] == answers[1], (method, extra, body[:40])
                    if body == GOOD and method == "POST" and len(extra) == 1 and "Content-Type" in extra:
                        answer = json.loads(response.content)
                        assert answer[wire.ACKNOWLEDGE] == ["9-9-9-9"]
                        assert answer[wire.ABORT] == [{"job_id": "1-2-3-4", "reason": "unknown_job"}]
            # head and body in one write, as the bench's nodes send them: the body is held whole when the route
            # reads it (its one message, no read_body), at least in some of the attempts (it may come in two reads)
            one_write = (
                f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pooltree-Node-Secret: {SECRET}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(GOOD)}\r\nConnection: close\r\n\r\n"
            ).encode() + GOOD
            fast = 0
            for _ in range(ONE_WRITE_ATTEMPTS):
                reads = len(plain_reads)
                whole = comparable_answer(*_raw(direct.url, one_write))
                fast += len(plain_reads) == reads
                assert whole == comparable_answer(*_raw(through_app.url, one_write))
                assert whole[0] == 200
                if fast:
                    break
            assert fast, "no body was read as held whole"
            # a declared body over the limit is refused before it is read, on both
            head = (
                f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pooltree-Node-Secret: {SECRET}\r\n"
                f"Content-Length: {heartbeats.MAX_HEARTBEAT_BYTES + 1}\r\nConnection: close\r\n\r\n"
            ).encode()
            large = [comparable_answer(*_raw(base, head)) for base in (direct.url, through_app.url)]
            assert large[0][0] == 413 and large[0] == large[1]
    finally:
        await service.stop()
