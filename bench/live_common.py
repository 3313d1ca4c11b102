"""What the live-cluster benchmarks share (``bench/live_queue.py``, ``bench/live_throughput.py``,
``bench/live_nodes.py``, ``bench/forecast_live.py``).

* ``Local``: ``pooltree local`` in a child process (real scheduler and node processes on 127.0.0.1, SQLite under
  the given directory); ``close()`` stops it (SIGINT, bounded wait, then kill).
* ``yt_client``: a ``yt.wrapper.YtClient`` for it.
* ``start_drivers``, ``join_processes``: the simulated-node driver processes of ``live_nodes`` and
  ``forecast_live`` (started, waited for, joined or terminated).
* ``YtRequests``: the exact HTTP requests ``yt.wrapper`` sends for a command, recorded once from a real
  ``YtClient`` (it talks to a recording listener on 127.0.0.1) and replayed over plain asyncio keep-alive
  connections with the per-request values (operation id, cursor, mutation id, correlation id) put in. A load
  generator then costs a fraction of what ``yt.wrapper`` or httpx cost per request (on a 2-core machine their CPU
  would be what is measured), and the server still sees what the official client sends: the same paths, headers
  (``X-YT-Parameters`` in YSON, ``X-YT-Header-Format``, ``User-Agent``, ``Authorization: OAuth``), bodies and
  formats.
* ``read_response``, ``quantile_ms``, ``machine``: an HTTP/1.1 response read off a stream, latency quantiles,
  the machine's description and load.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import psutil
import yt.wrapper as ytw


class Local:
    """``pooltree local`` in a child process; ``close()`` sends SIGINT and waits (bounded), then kills."""

    def __init__(
        self,
        data: Path,
        nodes: int,
        node_resources: str | None = None,
        heartbeat_period: float | None = None,
    ) -> None:
        args = [sys.executable, "-m", "pooltree.cli", "local", "--nodes", str(nodes), "--data", str(data)]
        if heartbeat_period is not None:
            args += ["--heartbeat-period", str(heartbeat_period)]
        if node_resources:
            args += ["--node-resources", node_resources]
        data.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(data.parent / "local.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL, start_new_session=True
        )
        self.url = self._read_url(60.0)
        self.token = (data / "token").read_text().strip()  # the superuser token `pooltree local` created

    def _read_url(self, timeout: float) -> str:
        found: list[str] = []

        def read() -> None:
            assert self.process.stdout is not None
            for raw in iter(self.process.stdout.readline, b""):
                line = raw.decode("utf-8", "replace")
                if "scheduler at " in line and not found:
                    found.append(line.split("scheduler at ", 1)[1].split()[0])

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found and time.monotonic() < deadline and self.process.poll() is None:
            time.sleep(0.05)
        if not found:
            self.close()
            raise RuntimeError("pooltree local did not print its address")
        return found[0]

    def scheduler_pid(self) -> int | None:
        """The scheduler process (a child of ``pooltree local`` whose command is ``pooltree.cli scheduler``)."""
        return child_process(self.process.pid, lambda argv: len(argv) > 3 and argv[3] == "scheduler")

    def close(self) -> None:
        stop_process(self.process)
        self.log.close()


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGINT, a bounded wait, then SIGKILL: how the benchmarks stop the pooltree processes they started."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def start_drivers(
    context: Any,
    target: Callable[..., None],
    url: str,
    secret: str,
    addresses: list[str],
    count: int,
    options: dict[str, Any],
    end: Any,
    queue: Any,
    timeout: float,
    started: list[Any],
) -> None:
    """``count`` simulated-node driver processes (``bench/live_nodes.py``'s ``_driver``), each heartbeating every
    ``count``-th of ``addresses`` to the scheduler at ``url``: added to ``started`` (the caller joins them with
    `join_processes`, also when this raises), started, and each waited for until it puts ``"ready"`` on
    ``queue`` (RuntimeError otherwise)."""
    host, _, port = url.removeprefix("http://").partition(":")
    groups = [addresses[i::count] for i in range(count)]
    drivers = [
        context.Process(target=target, args=(host, int(port), secret, group, options, end, queue))
        for group in groups
        if group
    ]
    started.extend(drivers)
    for process in drivers:
        process.start()
    for _ in drivers:
        if queue.get(timeout=timeout) != "ready":
            raise RuntimeError("a driver did not start")


def join_processes(processes: list[Any], timeout: float) -> None:
    """Each of ``processes`` joined within ``timeout`` seconds, else terminated."""
    for process in processes:
        process.join(timeout)
        if process.is_alive():
            process.terminate()


def yt_client(url: str, token: str) -> ytw.YtClient:
    return ytw.YtClient(proxy=url, token=token, config={"proxy": {"enable_proxy_discovery": False}})


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process so far (``/proc/PID/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quantile_ms(values: list[float], q: float, digits: int = 2) -> float | None:
    """The ``q`` quantile (nearest rank) of seconds ``values``, in milliseconds."""
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return round(ordered[index] * 1000, digits)


async def read_response(reader: asyncio.StreamReader) -> int:
    """Read one HTTP/1.1 response (Content-Length or chunked body); returns the status code."""
    status, _ = await read_response_body(reader)
    return status


async def read_response_body(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Read one HTTP/1.1 response (Content-Length or chunked body); returns the status code and the body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            parts.append((await reader.readexactly(size + 2))[:size])
            if size == 0:
                return status, b"".join(parts)
    return status, await reader.readexactly(int(headers.get("content-length", "0")))


class HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 client connection for the simulated nodes' drivers: ``request(data)`` writes a whole
    request and returns the answer's (status, body); answers must carry ``Content-Length`` (the heartbeat routes'
    always do), anything else fails the request. A protocol instead of ``asyncio.open_connection``'s stream pair
    and a timer per request instead of ``asyncio.wait_for`` (a task per call): the driver's CPU is the machine's
    too, taken from the scheduler it measures."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> HttpConnection:
        _, protocol = await asyncio.get_running_loop().create_connection(cls, host, port)
        return protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("connection closed by the server"))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        length = None
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length is None:
            self._fail(ValueError(f"an answer without Content-Length: {head[0]!r}"))
            return
        if len(self.buffer) < end + 4 + length:
            return
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        waiter.set_result((int(head[0].split()[1]), body))

    def _fail(self, error: BaseException) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(error)

    async def request(self, data: bytes, timeout: float) -> tuple[int, bytes]:
        """Write ``data`` (one whole request) and wait at most ``timeout`` seconds for its answer: (status, body);
        ``TimeoutError`` or ``OSError`` when there is none."""
        loop = asyncio.get_running_loop()
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("connection closed")
        self.waiter = waiter = loop.create_future()
        timer = loop.call_later(timeout, self._fail, TimeoutError(f"no answer within {timeout} s"))
        self.transport.write(data)
        try:
            return await waiter
        finally:
            timer.cancel()
            self.waiter = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def run_fast(main: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(main)`` on uvloop when it is installed (the drivers' loop: a cheaper event loop leaves the
    machine's CPU to the scheduler measured)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return ""


def machine() -> dict[str, Any]:
    """CPUs, platform, Python and the load average now (the machine may be shared with other work)."""
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "uptime": uptime(),
        "loadavg": os.getloadavg(),
    }


# ------------------------------------------------------------------------------------ yt.wrapper's requests

OPERATION_MARK = "ffffffff-eeeeeeee-dddddddd-cccccccc"
"""Stands for the operation id while a request is recorded (replaced by the real one when replayed)."""
CURSOR_MARK = "2099-12-31T23:59:59.999999Z"
CYPRESS_PATH = "//sys/pool_trees"
"""What ``YtRequests.cypress_get`` reads: a Cypress read served on a read thread, beside listings."""


class YtRequests:
    """Requests exactly as ``yt.wrapper`` sends them, recorded from a real ``YtClient`` against a listener on
    127.0.0.1 that answers with ``url``'s discovery (``GET /api/v4``), then filled in per request.

    ``get_operation(op_id)``, ``list_operations(kind, cursor)`` (kind 0: newest 100; 1: ``state=pending``;
    2: paging with ``cursor_time``), ``start_operation()`` and ``cypress_get()`` (``get`` of ``CYPRESS_PATH``) return
    the request bytes; the correlation id (and a
    start's mutation id) are new in each, as the client makes them.
    """

    def __init__(self, url: str, token: str, start_spec: dict[str, Any]) -> None:
        self.host = url.removeprefix("http://")
        discovery = httpx.get(f"{url}/api/v4", timeout=30).content
        recorded = _record(
            discovery,
            token,
            [
                lambda client: client.get_operation(OPERATION_MARK),
                lambda client: client.list_operations(limit=100),
                lambda client: client.list_operations(limit=100, state="pending"),
                lambda client: client.list_operations(limit=100, cursor_time=CURSOR_MARK),
                lambda client: _start(client, start_spec),
                lambda client: client.get(CYPRESS_PATH),
            ],
        )
        self.templates = {
            "get_operation": recorded[0],
            "list_0": recorded[1],
            "list_1": recorded[2],
            "list_2": recorded[3],
            "start_operation": recorded[4],
            "cypress_get": recorded[5],
        }
        for name, raw in self.templates.items():
            if b"Authorization: OAuth " not in raw or b"X-YT-Header-Format" not in raw:
                raise RuntimeError(f"recorded {name} request lacks yt.wrapper's headers: {raw[:300]!r}")

    def _fill(self, raw: bytes, **values: str) -> bytes:
        head, _, body = raw.partition(b"\r\n\r\n")
        text = head.decode("latin-1")
        body_text = body.decode("utf-8")
        for mark, value in values.items():
            text = text.replace(mark, value)
            body_text = body_text.replace(mark, value)
        text = re.sub(r"(?m)^Host: [^\r\n]*", f"Host: {self.host}", text)
        text = re.sub(r"(?m)^X-YT-Correlation-Id: [^\r\n]*", f"X-YT-Correlation-Id: {_guid()}", text)
        data = body_text.encode("utf-8")
        if data:
            text = re.sub(r"(?m)^Content-Length: [^\r\n]*", f"Content-Length: {len(data)}", text)
        return text.encode("latin-1") + b"\r\n\r\n" + data

    def get_operation(self, operation_id: str) -> bytes:
        return self._fill(self.templates["get_operation"], **{OPERATION_MARK: operation_id})

    def list_operations(self, kind: int, cursor: str) -> bytes:
        return self._fill(self.templates[f"list_{kind}"], **{CURSOR_MARK: cursor})

    def cypress_get(self) -> bytes:
        return self._fill(self.templates["cypress_get"])

    def start_operation(self) -> bytes:
        raw = self.templates["start_operation"]
        match = re.search(rb'"mutation_id"="([^"]+)"', raw)
        if match is None:
            raise RuntimeError("the recorded start_operation carries no mutation_id")
        return self._fill(raw, **{match.group(1).decode(): _guid()})


def _guid() -> str:
    return "-".join(secrets.token_hex(4) for _ in range(4))


def _start(client: ytw.YtClient, spec: dict[str, Any]) -> Any:
    """``start_operation`` as ``run_operation(sync=False)`` sends it, without its three follow-up requests."""
    from yt.wrapper.driver import make_formatted_request

    return make_formatted_request(
        "start_operation", {"operation_type": "vanilla", "spec": spec}, format=None, client=client
    )


def _record(discovery: bytes, token: str, calls: list[Callable[[ytw.YtClient], Any]]) -> list[bytes]:
    """The request each of ``calls`` makes through a ``YtClient`` (discovery excluded), in order."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(30)
    port = listener.getsockname()[1]
    recorded: list[bytes] = []
    lock = threading.Lock()
    stop = threading.Event()

    def answer(connection: socket.socket) -> None:
        with connection:
            connection.settimeout(30)
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, rest = buffer.partition(b"\r\n\r\n")
                match = re.search(rb"(?im)^content-length: *(\d+)", head)
                length = int(match.group(1)) if match else 0
                while len(rest) < length:
                    rest += connection.recv(65536)
                body, buffer = rest[:length], rest[length:]
                if head.startswith(b"GET /api/v4 "):
                    data = discovery
                else:
                    with lock:
                        recorded.append(head + b"\r\n\r\n" + body)
                    data = (
                        b'{"operation_id":"%s","operations":[],"incomplete":false}' % OPERATION_MARK.encode()
                    )
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                    % len(data)
                    + data
                )

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        client = yt_client(f"http://127.0.0.1:{port}", token)
        for call in calls:
            # the recording listener's answers are not real ones; the request sent is what counts
            with contextlib.suppress(Exception):
                call(client)
    finally:
        stop.set()
        listener.close()
        thread.join(10)
    if len(recorded) != len(calls):
        raise RuntimeError(f"recorded {len(recorded)} of {len(calls)} yt.wrapper requests")
    return recorded


def child_process(parent: int, matches: Callable[[list[str]], bool]) -> int | None:
    """The pid of a child of ``parent`` whose command line (``argv``) ``matches``; None when none does."""
    for child in psutil.Process(parent).children():
        try:
            argv = child.cmdline()
        except psutil.Error:  # ended meanwhile
            continue
        if matches(argv):
            return child.pid
    return None


READ_PROCESS = "pooltree.reads.process"
"""The read process's module, in its command line (``pooltree scheduler --read-process``)."""


def read_process_of(scheduler: int) -> int | None:
    """The pid of ``scheduler``'s read process (its child running ``READ_PROCESS``); None when it runs none."""
    return child_process(scheduler, lambda argv: READ_PROCESS in argv)
