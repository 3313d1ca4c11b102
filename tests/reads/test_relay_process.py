"""The read process as a real process (``pooltree/reads``: ``host.ReadProcess`` spawning ``process.py``) in front
of a real uvicorn on loopback that speaks the scheduler's internal listener's protocol (``peer.peer_line_protocol``):
keep-alive, pipelining, chunked and large bodies, streamed answers, slow readers, the client's address and what
cannot forge it, bad input, and the replica's seam (install, feed, floor)."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from loopback import ServerThread, bound_socket
from polling import wait_for
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from pooltree.reads import host
from pooltree.reads.host import ReadProcess
from pooltree.reads.peer import peer_line_protocol, stamped
from pooltree.reads.relay import KEEP_ALIVE, peer_line

SECRET = b"0123456789abcdef0123456789abcdef"
LARGE = 16 * 1024 * 1024


class Feed:
    """A stand-in for the scheduler's ``ReadFeed``: only its stamp (the relay reads it off answers)."""

    replica = "counting_replica:make"

    def __init__(self) -> None:
        self.counter = 0

    def stamp(self) -> int:
        return self.counter

    def attach(self, send: Any) -> None:
        return None

    def detach(self) -> None:
        return None


async def client_of(request: Request) -> Response:
    client = request.scope.get("client")
    return JSONResponse({"client": list(client) if client else None})


async def echo(request: Request) -> Response:
    return Response(await request.body(), media_type="application/octet-stream")


async def stream(request: Request) -> Response:
    pieces, delay = int(request.query_params["pieces"]), float(request.query_params["delay"])

    async def produce() -> Any:
        for index in range(pieces):
            yield b"%d:%f;" % (index, time.monotonic())
            await asyncio.sleep(delay)

    return StreamingResponse(produce(), media_type="text/plain")


async def big(request: Request) -> Response:
    return Response(b"x" * int(request.query_params["size"]), media_type="application/octet-stream")


async def replica_route(request: Request) -> Response:
    return Response(b"scheduler", media_type="text/plain")


class Upstream:
    """The scheduler's side: uvicorn with the peer-line protocol, answers stamped with ``feed``'s counter."""

    def __init__(self) -> None:
        self.feed = Feed()
        app = Starlette(
            routes=[
                Route("/client", client_of),
                Route("/echo", echo, methods=["POST"]),
                Route("/stream", stream),
                Route("/big", big),
                Route("/replica", replica_route),
            ]
        )
        self.server = ServerThread(stamped(app, lambda: self.feed), http=peer_line_protocol(SECRET))


class Front:
    def __init__(self, process: ReadProcess, listen: socket.socket, upstream: Upstream) -> None:
        self.process = process
        self.listen = listen
        self.upstream = upstream
        self.port = int(listen.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.deaths: list[str] = []

    @property
    def child(self) -> psutil.Process:
        assert self.process.pid is not None
        return psutil.Process(self.process.pid)


@pytest.fixture
def front(monkeypatch: pytest.MonkeyPatch) -> Iterator[Front]:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # counting_replica, for the read process
    upstream = Upstream()
    with upstream.server:
        listen = bound_socket()
        listen.listen(128)
        deaths: list[str] = []
        process = ReadProcess(
            listen, ("127.0.0.1", upstream.server.port), SECRET, deaths.append, lambda *counts: None
        )
        process.start()
        made = Front(process, listen, upstream)
        made.deaths = deaths
        try:
            yield made
        finally:
            process.stop()
            listen.close()
    assert made.deaths == [], "the read process died during the test"


def request_bytes(path: str, host: str = "front", body: bytes | None = None) -> bytes:
    if body is None:
        return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    return head + body


def read_answers(sock: socket.socket, count: int, timeout: float = 20.0) -> list[tuple[int, bytes]]:
    """``count`` whole answers (status, body) read off ``sock`` (content-length bodies)."""
    sock.settimeout(timeout)
    data = b""
    answers: list[tuple[int, bytes]] = []
    while len(answers) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            head = data[:end].decode("latin-1").split("\r\n")
            length = next(
                int(line.split(":")[1]) for line in head if line.lower().startswith("content-length")
            )
            if len(data) >= end + 4 + length:
                answers.append((int(head[0].split()[1]), data[end + 4 : end + 4 + length]))
                data = data[end + 4 + length :]
                continue
        piece = sock.recv(65536)
        assert piece, f"connection closed after {len(answers)} of {count} answers"
        data += piece
    return answers


def test_keep_alive_and_pipelined_requests_are_answered_in_order(front: Front) -> None:
    with socket.create_connection(("127.0.0.1", front.port)) as sock:
        sock.sendall(request_bytes("/echo", body=b"first"))
        assert read_answers(sock, 1) == [(200, b"first")]
        sock.sendall(b"".join(request_bytes("/echo", body=f"p{index}".encode()) for index in range(5)))
        assert read_answers(sock, 5) == [(200, f"p{index}".encode()) for index in range(5)]
        sock.sendall(request_bytes("/echo", body=b"after")[:20])  # a request cut across writes
        time.sleep(0.05)
        sock.sendall(request_bytes("/echo", body=b"after")[20:])
        assert read_answers(sock, 1) == [(200, b"after")]


def test_an_answer_that_closes_its_connection_closes_the_clients(front: Front) -> None:
    """``Connection: close`` (and HTTP/1.0): the scheduler closes its side after the answer, and the client sees
    its connection end then, not at the read process's keep-alive timeout."""
    for request in (
        b"GET /client HTTP/1.1\r\nHost: front\r\nConnection: close\r\n\r\n",
        b"GET /client HTTP/1.0\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", front.port)) as sock:
            sock.sendall(request)
            sock.settimeout(10)
            began, data = time.monotonic(), b""
            while piece := sock.recv(65536):
                data += piece
            assert data.startswith(b"HTTP/1.1 200"), data
            assert time.monotonic() - began < KEEP_ALIVE / 2, "the connection outlived its answer"


def test_the_scheduler_sees_the_clients_address_not_the_read_processs(front: Front) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.2", 0))  # any 127/8 address reaches 127.0.0.1; the read process connects from .1
        sock.connect(("127.0.0.1", front.port))
        sock.sendall(request_bytes("/client"))
        [(status, body)] = read_answers(sock, 1)
        assert status == 200
        assert json.loads(body)["client"] == ["127.0.0.2", sock.getsockname()[1]]


def test_a_client_cannot_name_another_address(front: Front) -> None:
    """A peer line sent by a client is bytes of its request, after the read process's own line: not HTTP, so the
    scheduler answers 400; a connection straight to the internal listener needs the secret."""
    forged = peer_line(SECRET, "10.1.2.3", 1234) + request_bytes("/client")
    with socket.create_connection(("127.0.0.1", front.port)) as sock:
        sock.sendall(forged)
        sock.settimeout(10)
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 400"), answer
        assert b"10.1.2.3" not in answer
    internal = front.upstream.server.port
    for first in (peer_line(b"f" * 32, "10.1.2.3", 1234), b"", b"PROXY TCP4 10.1.2.3 127.0.0.1 1 2\r\n"):
        with socket.create_connection(("127.0.0.1", internal)) as sock:
            sock.sendall(first + request_bytes("/client"))
            sock.settimeout(10)
            assert sock.recv(65536) == b"", f"the internal listener answered a connection beginning {first!r}"


def test_chunked_and_large_bodies_both_ways(front: Front) -> None:
    payload = random.Random(7).randbytes(LARGE)
    with httpx.Client(base_url=front.url, timeout=60) as client:
        assert client.post("/echo", content=payload).content == payload

        def pieces() -> Iterator[bytes]:  # no length: sent chunked
            for start in range(0, len(payload), 1 << 20):
                yield payload[start : start + (1 << 20)]

        answer = client.post("/echo", content=pieces())
        assert answer.request.headers.get("transfer-encoding") == "chunked"
        assert answer.content == payload


def test_a_streamed_answer_reaches_the_client_as_it_is_made(front: Front) -> None:
    with httpx.Client(base_url=front.url, timeout=30) as client:
        arrived: list[float] = []
        body = b""
        with client.stream("GET", "/stream", params={"pieces": 5, "delay": 0.3}) as answer:
            assert answer.headers["transfer-encoding"] == "chunked"
            for piece in answer.iter_raw():
                arrived.append(time.monotonic())
                body += piece
    made = [float(part.split(b":")[1]) for part in body.split(b";") if part]
    assert [int(part.split(b":")[0]) for part in body.split(b";") if part] == [0, 1, 2, 3, 4]
    assert arrived[0] < made[-1], "the first piece reached the client only after the last was made"


def test_a_slow_reader_holds_back_the_scheduler_not_the_read_processs_memory(front: Front) -> None:
    size = 96 * 1024 * 1024
    before = front.child.memory_info().rss
    with socket.create_connection(("127.0.0.1", front.port)) as slow:
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        slow.sendall(request_bytes(f"/big?size={size}"))
        slow.settimeout(20)
        taken = len(slow.recv(65536))
        # meanwhile others are served at once
        with httpx.Client(base_url=front.url, timeout=10) as other:
            assert other.post("/echo", content=b"quick").content == b"quick"
        # observed for a while (the upstream writes as fast as it is let): what the read process holds of the
        # answer is bounded by its transports' high-water marks, not the answer's size
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            held = front.child.memory_info().rss - before
            assert held < 32 * 1024 * 1024, f"the read process holds {held} bytes of a slow reader's answer"
            time.sleep(0.05)
        while taken < size:
            piece = slow.recv(1 << 20)
            assert piece, "the slow reader's answer was cut"
            taken += len(piece)
    assert taken >= size


def test_bad_input_never_ends_the_read_process(front: Front) -> None:
    rng = random.Random(25)
    valid = request_bytes("/echo", body=b"ok")
    pid = front.process.pid
    for round_ in range(150):
        kind = round_ % 3
        if kind == 0:
            data = rng.randbytes(rng.randrange(1, 400))
        elif kind == 1:  # a valid request with bytes flipped
            data = bytearray(valid)
            for _ in range(rng.randrange(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            data = bytes(data)
        else:  # cut anywhere, then the connection closed
            data = valid[: rng.randrange(1, len(valid))]
        with socket.create_connection(("127.0.0.1", front.port)) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(10)
            try:
                while sock.recv(65536):
                    pass
            except (ConnectionResetError, TimeoutError):
                pass
    assert front.process.pid == pid and front.child.is_running()
    with httpx.Client(base_url=front.url, timeout=10) as client:
        assert client.post("/echo", content=b"still").content == b"still"


def test_the_replica_answers_only_at_or_past_the_floor(front: Front) -> None:
    """The seam end to end: a replica installed over the pipe, fed numbers; the floor is the largest stamp on a
    relayed answer; below it the request is relayed, at it the replica answers; a failing ``apply`` drops the
    replica (everything relayed) until the next install."""
    with httpx.Client(base_url=front.url, timeout=10) as client:
        assert client.get("/replica").content == b"scheduler"  # no replica installed: relayed
        front.process.send(("install", "counting_replica:make"))
        front.process.send(("feed", 3))
        wait_for(lambda: client.get("/replica").content == b"replica applied=3 floor=0", timeout=10)
        front.upstream.feed.counter = 5
        assert client.get("/client").status_code == 200  # an answer stamped 5 relayed: the floor is 5
        assert client.get("/replica").content == b"scheduler"
        front.process.send(("feed", 5))
        wait_for(lambda: client.get("/replica").content == b"replica applied=5 floor=5", timeout=10)
        front.process.send(("feed", "fail"))
        wait_for(lambda: client.get("/replica").content == b"scheduler", timeout=10)
        front.upstream.feed.counter = 0  # a new service leads: its stamps start again with the new replica
        front.process.send(("install", "counting_replica:make"))
        front.process.send(("feed", 1))
        wait_for(lambda: client.get("/replica").content == b"replica applied=1 floor=0", timeout=10)


def test_feed_messages_arrive_in_order_whether_written_at_once_or_by_the_writer(front: Front) -> None:
    """``ReadProcess.send`` writes on the pipe itself while nothing waits and the pipe takes the frame, else leaves
    it (and all after it) to the writer thread: a read process that stops reading (SIGSTOP) makes later messages
    wait, and the replica (which refuses a number not above the last) still applies every one in order."""
    child = front.child
    process = front.process
    process.send(("install", "counting_replica:make"))
    process.send(("feed", 1))
    assert process.direct == 2  # the pipe took them without the writer thread
    child.suspend()
    try:
        piece = b"p" * 16384
        count = 1
        while process._queued == 0:  # until the pipe's buffer is full and the writer holds the rest
            count += 1
            process.send(("feed", (count, piece)))
            assert count < 10_000, "the pipe never filled"
        for _ in range(20):
            count += 1
            process.send(("feed", (count, piece)))
    finally:
        child.resume()
    for _ in range(2000):  # while the writer drains what waits: these must wait behind it
        count += 1
        process.send(("feed", (count, piece)))
    with httpx.Client(base_url=front.url, timeout=10) as client:
        wanted = b"replica applied=%d floor=0" % count
        wait_for(lambda: client.get("/replica").content == wanted, timeout=20)


def test_the_read_process_ends_at_its_pipes_end(front: Front) -> None:
    child = front.child
    assert front.process.pipe is not None
    front.process.stopping = True  # this test ends it: not a death
    front.process.pipe.shutdown(socket.SHUT_RDWR)
    child.wait(timeout=20)
    assert not child.is_running()


def test_a_read_process_that_takes_no_feed_is_killed_as_stuck(
    monkeypatch: pytest.MonkeyPatch, front: Front
) -> None:
    """Feed messages wait for the read process on the scheduler's side; past ``FEED_BACKLOG_MAX`` bytes it is stuck
    (stopped here with SIGSTOP), killed, and its end reported as a death."""
    monkeypatch.setattr(host, "FEED_BACKLOG_MAX", 4 * 1024 * 1024)
    child = front.child
    child.suspend()
    piece = b"f" * 65536
    wait_for(lambda: front.process.send(("feed", piece)) or front.process.ended.is_set(), timeout=30)
    child.wait(10)
    assert front.deaths == ["killed by SIGKILL"]
    front.deaths.clear()  # the fixture's check is for deaths nobody caused


def test_the_read_process_is_started_without_the_schedulers_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """``$POOLTREE_TOKEN`` and ``$POOLTREE_NODE_SECRET`` stay in the scheduler: the read process needs no secret (its
    peer-line secret comes over the pipe, not the environment or the command line)."""
    monkeypatch.setenv("POOLTREE_TOKEN", "ytct-must-not-leave")
    monkeypatch.setenv("POOLTREE_NODE_SECRET", "ptns-must-not-leave")
    upstream = Upstream()
    with upstream.server:
        listen = bound_socket()
        listen.listen(16)
        process = ReadProcess(
            listen, ("127.0.0.1", upstream.server.port), SECRET, lambda _: None, lambda *c: None
        )
        process.start()
        try:
            assert process.pid is not None
            environment = Path(f"/proc/{process.pid}/environ").read_bytes()
            command = Path(f"/proc/{process.pid}/cmdline").read_bytes()
            assert b"must-not-leave" not in environment
            assert SECRET not in environment and SECRET not in command
        finally:
            process.stop()
            listen.close()
