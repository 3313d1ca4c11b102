"""Servers the tests start on 127.0.0.1: their ports, and uvicorn in a thread of the test's process.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from the ephemeral range, the same range every
outgoing connection (a client to PostgreSQL, httpx to a node) takes its local port from: between the moment a test
learns the port and the moment its server binds it, any connection on the machine may take it (CI saw
``address already in use`` so). ``free_port`` picks below that range instead, where only another test's choice can
collide, and checks that the port binds now. A server in the test's own process binds first and serves the bound
socket (``bound_socket``), which leaves no window at all."""

from __future__ import annotations

import random
import socket
import threading
import time
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_SPAN = 12_000
_TRIES = 200


def _ephemeral_low() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _binds(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port on 127.0.0.1 that binds now and lies below the ephemeral range (so no outgoing connection takes it
    before the server binds it); the kernel's choice where none of ``_TRIES`` random candidates binds."""
    low = _ephemeral_low()
    first = max(1024, low - _SPAN)
    rng = random.SystemRandom()
    for _ in range(_TRIES):
        port = rng.randrange(first, low)
        if _binds(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bound_socket() -> socket.socket:
    """A listening-ready TCP socket bound on 127.0.0.1 (for a server in this process to serve as it is)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", free_port()))
    return sock


class ServerThread:
    """uvicorn serving an ASGI app on 127.0.0.1 in a background thread (bounded start and stop)."""

    def __init__(self, app: object, http: object = "auto") -> None:
        """``http``: uvicorn's HTTP protocol (a class such as ``http_protocol.BoundedHeadersProtocol``)."""
        import uvicorn

        # Bound here and served as it is: no other process can take the port between choosing and binding it.
        self.socket = bound_socket()
        self.port = int(self.socket.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", http=http
            )
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start within 20 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.socket.close()


def read_answer(sock: socket.socket, held: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer from ``sock``: (status, headers with lower-case names, body). ``held``: bytes already read
    past the last answer, left holding those read past this one."""
    while b"\r\n\r\n" not in held:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before an answer"
        held += chunk
    head, _, rest = bytes(held).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside an answer"
        rest += chunk
    held[:] = rest[length:]
    return int(lines[0].split()[1]), headers, rest[:length]
