"""Node heartbeats on a listener and event loop of their own (``server/heartbeat_listener.py``): an answer on the
API's port names it, the node's next heartbeats go there, and an API request is answered while a heartbeat holds
that loop; auth and errors are the API port's."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import inspect
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from pooltree.config import parse_pool_trees
from pooltree.errors import PooltreeError
from pooltree.node import wire
from pooltree.node.service import MAX_PERIOD, NODE_SECRET_HEADER, heartbeat_clients
from pooltree.reads import relay
from pooltree.server.heartbeat_listener import OPEN_FILES_CAP
from pooltree.server.heartbeat_protocol import HeartbeatProtocol
from pooltree.server.leader import HeartbeatEntry, SchedulerRunner, http_config
from pooltree.server.live.jobs import DeferredHeartbeat
from pooltree.server.live.throttle import ThrottleSettings
from pooltree.server.service import SchedulerService
from pooltree.server.store import STORE_UNAVAILABLE, Store

sys.path.insert(0, str(Path(__file__).parent))
from heartbeat_maps import comparable_answer, node_heartbeat, published
from live_cluster import NODE_SECRET, ROOT_TOKEN, Loop, auth_headers
from loopback import ServerThread, read_answer
from polling import wait_for

from pooltree.cli.live import parse_heartbeat_port

WAIT = 30.0
NODE = {NODE_SECRET_HEADER: NODE_SECRET, "Content-Type": wire.MEDIA_TYPE}


class Runner:
    """A ``SchedulerRunner`` with a heartbeat listener (port 0) on a SQLite file, served from a background loop;
    ``service`` is the leading ``SchedulerService``."""

    def __init__(
        self,
        loop: Loop,
        root: Path,
        heartbeat_port: int | None = 0,
        wrap_store: Callable[[Store], None] | None = None,
    ) -> None:
        self.loop = loop
        self.services: list[SchedulerService] = []
        ready: concurrent.futures.Future[str] = concurrent.futures.Future()

        def factory(store: Store) -> SchedulerService:
            if wrap_store is not None:
                wrap_store(store)
            service = SchedulerService(
                store, token=ROOT_TOKEN, node_secret=NODE_SECRET, create_default_tree=True
            )
            self.services.append(service)
            return service

        self.runner = SchedulerRunner(
            f"sqlite:///{root / 'state.db'}",
            service_factory=factory,
            on_ready=ready.set_result,
            heartbeat_port=heartbeat_port,
        )
        self._stop: asyncio.Event | None = None

        async def main() -> None:
            self._stop = asyncio.Event()
            await self.runner.run(self._stop)

        self.task = loop.submit(main())
        self.url = ready.result(timeout=WAIT)

    @property
    def service(self) -> SchedulerService:
        return self.services[-1]

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.loop.call_soon_threadsafe(self._stop.set)
        self.task.result(timeout=WAIT)


@pytest.fixture
def runner(tmp_path: Path) -> Any:
    loop = Loop()
    started = Runner(loop, tmp_path)
    try:
        yield started
    finally:
        try:
            started.stop()
        finally:
            loop.close()


def _beat(address: str) -> bytes:
    return wire.encode(node_heartbeat(address))


def test_an_answer_on_the_api_port_names_the_heartbeat_listener(runner: Runner) -> None:
    first = httpx.post(runner.url + wire.HEARTBEAT_PATH, content=_beat("n1"), headers=NODE, timeout=WAIT)
    assert first.status_code == 200, first.text
    named = wire.decode(first.content)[wire.HEARTBEAT_URL]
    assert runner.runner.heartbeats is not None
    assert named == f"http://127.0.0.1:{runner.runner.heartbeats.port}"
    assert urlsplit(named).port != urlsplit(runner.url).port
    again = httpx.post(named + wire.HEARTBEAT_PATH, content=_beat("n1"), headers=NODE, timeout=WAIT)
    assert again.status_code == 200, again.text
    assert wire.HEARTBEAT_URL not in wire.decode(again.content)  # already there: nothing to name
    assert "n1" in runner.service.scheduler.nodes


def test_an_api_read_is_answered_while_a_heartbeat_holds_the_heartbeat_loop(runner: Runner) -> None:
    """A heartbeat that keeps the listener's loop busy (blocked inside its processing, on that loop's thread)
    does not hold the API: a read is answered meanwhile, and the heartbeat once let go. With heartbeats on the
    API's loop (``heartbeat_port=None``) the same blocked heartbeat holds every API request."""
    service = runner.service
    scheduler = service.scheduler
    first = httpx.post(runner.url + wire.HEARTBEAT_PATH, content=_beat("n1"), headers=NODE, timeout=WAIT)
    listener = wire.decode(first.content)[wire.HEARTBEAT_URL]
    entered, release = threading.Event(), threading.Event()
    original = scheduler.try_process_heartbeat
    loop_threads: list[str] = []

    def blocking(*args: Any, **kwargs: Any) -> Any:
        loop_threads.append(threading.current_thread().name)
        entered.set()
        release.wait(WAIT)  # the loop's thread is held here: nothing else of that loop runs
        return original(*args, **kwargs)

    scheduler.try_process_heartbeat = blocking  # type: ignore[method-assign]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            beat = pool.submit(
                httpx.post, listener + wire.HEARTBEAT_PATH, content=_beat("n1"), headers=NODE, timeout=WAIT
            )
            assert entered.wait(WAIT)
            assert loop_threads == ["heartbeat-loop"]
            read = httpx.post(
                runner.url + "/api/v4/list_operations", headers=auth_headers(ROOT_TOKEN), timeout=WAIT
            )
            assert read.status_code == 200, read.text
            got = httpx.get(
                runner.url + "/api/v4/get",
                params={"path": "//sys/pool_trees/default"},
                headers=auth_headers(ROOT_TOKEN),
                timeout=WAIT,
            )
            assert got.status_code == 200, got.text
            assert not beat.done()  # both answered while the heartbeat still held its loop
        finally:
            release.set()
        answer = beat.result(WAIT)
    assert answer.status_code == 200, answer.text


def test_the_listener_answers_errors_as_the_api_port_does(runner: Runner) -> None:
    """A heartbeat without the node secret, or malformed, is refused with the same status and YT error on both
    ports; any other request to the listener is refused."""
    first = httpx.post(runner.url + wire.HEARTBEAT_PATH, content=_beat("n1"), headers=NODE, timeout=WAIT)
    listener = wire.decode(first.content)[wire.HEARTBEAT_URL]
    cases: list[tuple[bytes, dict[str, str]]] = [
        (_beat("n2"), {"Content-Type": wire.MEDIA_TYPE}),
        (_beat("n2"), {**NODE, NODE_SECRET_HEADER: "ptns-wrong"}),
        (b"{not json", NODE),
        (wire.encode({"node_address": "n2"}), NODE),
    ]
    for body, headers in cases:
        answers = [
            httpx.post(base + wire.HEARTBEAT_PATH, content=body, headers=headers, timeout=WAIT)
            for base in (runner.url, listener)
        ]
        assert answers[0].status_code == answers[1].status_code >= 400
        errors = [answer.json() for answer in answers]
        assert errors[0]["code"] == errors[1]["code"] and errors[0]["message"] == errors[1]["message"]
    other = httpx.post(listener + "/api/v4/list_operations", headers=auth_headers(ROOT_TOKEN), timeout=WAIT)
    assert other.status_code == 404 and "node heartbeats only" in other.json()["message"]


def test_without_a_listener_heartbeats_name_nothing(tmp_path: Path) -> None:
    loop = Loop()
    started = Runner(loop, tmp_path, heartbeat_port=None)
    try:
        first = httpx.post(started.url + wire.HEARTBEAT_PATH, content=_beat("n1"), headers=NODE, timeout=WAIT)
        assert first.status_code == 200 and wire.HEARTBEAT_URL not in wire.decode(first.content)
        assert started.runner.heartbeats is None
    finally:
        try:
            started.stop()
        finally:
            loop.close()


def test_heartbeat_port_option() -> None:
    assert parse_heartbeat_port("auto") == 0
    assert parse_heartbeat_port(" OFF ") is None
    assert parse_heartbeat_port("8123") == 8123
    for bad in ("0", "65536", "-1", "x", ""):
        with pytest.raises(PooltreeError, match="--heartbeat-port"):
            parse_heartbeat_port(bad)


def test_a_heartbeat_whose_report_activates_an_operation_starts_it_over_http(
    runner: Runner, monkeypatch: Any
) -> None:
    """The heartbeat that reports the last job of an operation, in a pool running one at a time, is finished on a
    heartbeat thread after the tree is published apart (``DeferredHeartbeat``): its answer acknowledges the job
    and starts the operation activated in its place."""
    deferred: list[DeferredHeartbeat] = []
    finish = DeferredHeartbeat.finish
    monkeypatch.setattr(DeferredHeartbeat, "finish", lambda self: deferred.append(self) or finish(self))
    first = httpx.post(runner.url + wire.HEARTBEAT_PATH, content=_beat("n1"), headers=NODE, timeout=WAIT)
    listener = wire.decode(first.content)[wire.HEARTBEAT_URL] + wire.HEARTBEAT_PATH
    live = runner.service.scheduler
    pools = {"small": {"max_running_operation_count": 1}}
    spec = {"pool": "small", "tasks": {"main": {"command": "true", "job_count": 1, "cpu_limit": 1}}}
    with live.lock:
        live.apply_pool_trees(parse_pool_trees({"default": {"config": {}, "pools": pools}}), "default", 1.0)
        running, queued = (live.start_operation("vanilla", spec, "alice", 1.0).id for _ in range(2))

    def beat(**jobs: Any) -> dict[str, Any]:
        body = wire.encode(node_heartbeat("n1", **jobs))
        answer = httpx.post(listener, content=body, headers=NODE, timeout=WAIT)
        assert answer.status_code == 200, answer.text
        return wire.decode(answer.content)

    started = wait_for(lambda: beat().get(wire.START), WAIT)  # once the service's loop published it
    assert [spec["operation_id"] for spec in started] == [running]
    job = started[0]["job_id"]
    done = wire.finished_job(job, running, "main", "completed", 1.0, 2.0)
    # no periodic update from here on, and none still running: a heartbeat that meets one in flight leaves the
    # stale tree to it (``refresh_stale_trees``) and starts the activated operation only at the node's next one
    monkeypatch.setattr(live, "needs_update", lambda *_: False)
    wait_for(lambda: not live.updates.updating and not live.updates.computing, WAIT)
    answer = beat(finished=[done])
    assert answer[wire.ACKNOWLEDGE] == [job]
    assert [spec["operation_id"] for spec in answer.get(wire.START, [])] == [queued]
    assert deferred  # finished on a heartbeat thread, the tree published apart


def test_a_node_heartbeats_on_one_connection_at_a_period_past_five_seconds(
    runner: Runner, monkeypatch: Any
) -> None:
    """A node at a heartbeat period past five seconds (the libraries' default keep-alive on both sides) keeps one
    connection to the listener, and the listener keeps it: with httpx's and uvicorn's defaults the node opened a
    connection for every heartbeat past 5 s, and at 5 s sent its heartbeat as the listener closed the connection.
    Checked both ways: the node's own clients (`heartbeat_clients`) reuse their connection across the gap, and a
    raw connection idle as long is still answered by the listener."""
    accepted: list[int] = []
    made = HeartbeatProtocol.connection_made

    def counted(self: HeartbeatProtocol, transport: Any) -> None:
        accepted.append(1)
        made(self, transport)

    monkeypatch.setattr(HeartbeatProtocol, "connection_made", counted)
    first = httpx.post(runner.url + wire.HEARTBEAT_PATH, content=_beat("n1"), headers=NODE, timeout=WAIT)
    listener = wire.decode(first.content)[wire.HEARTBEAT_URL]
    host, port = urlsplit(listener).hostname, urlsplit(listener).port
    assert host is not None and port is not None
    # the gap is the behaviour under test (an idle connection's life), not a wait for a condition
    gap = wire.API_PORT_KEEP_ALIVE + 0.5

    def raw_beat(sock: socket.socket) -> int:
        body = _beat("n3")
        sock.sendall(
            f"POST {wire.HEARTBEAT_PATH} HTTP/1.1\r\nHost: {host}:{port}\r\n{NODE_SECRET_HEADER}: {NODE_SECRET}\r\n"
            f"Content-Type: {wire.MEDIA_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        return read_answer(sock, bytearray())[0]  # asserts the connection is not closed before its end

    async def node() -> list[int]:
        statuses = []
        async with heartbeat_clients(WAIT) as clients:
            for _ in range(2):
                answer = await clients.listener.post(
                    listener + wire.HEARTBEAT_PATH, content=_beat("n2"), headers=NODE
                )
                statuses.append(answer.status_code)
                await asyncio.sleep(gap)
        return statuses

    with socket.create_connection((host, port), timeout=WAIT) as sock:
        assert raw_beat(sock) == 200
        assert asyncio.run(node()) == [200, 200]  # the node's gaps also keep the raw connection idle past 5 s
        assert raw_beat(sock) == 200
    assert len(accepted) == 2  # the raw connection and the node's one
    assert wire.LISTENER_KEEP_ALIVE > wire.NODE_KEEP_ALIVE > MAX_PERIOD
    # the API port (the scheduler's own, or the read process's in front of it) keeps an idle connection longer
    # than a node keeps its connection there
    api_port = http_config(None, "127.0.0.1", 0).timeout_keep_alive
    assert wire.NODE_API_KEEP_ALIVE < min(api_port, relay.KEEP_ALIVE) == wire.API_PORT_KEEP_ALIVE


def test_open_files_are_raised_to_the_hard_limit() -> None:
    """A scheduler or node shard holds a descriptor per node's connection: the soft limit goes up to the hard one."""
    script = (
        "import resource\n"
        "from pooltree.server.heartbeat_listener import open_files_for_nodes\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "low = 256 if hard == resource.RLIM_INFINITY else min(256, hard)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))\n"
        "print(open_files_for_nodes(), resource.getrlimit(resource.RLIMIT_NOFILE), hard)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT, check=True
    )
    values = [int(v) for v in out.stdout.replace("(", " ").replace(")", " ").replace(",", " ").split()]
    (before, after, soft_now, hard_now, hard_was) = values
    expected = min(hard_was, OPEN_FILES_CAP) if hard_was != resource.RLIM_INFINITY else OPEN_FILES_CAP
    low = 256 if hard_was == resource.RLIM_INFINITY else min(256, hard_was)
    assert before == low and after == soft_now == expected and hard_now == hard_was


def _raw_heartbeat(host: str, port: int, body: bytes, secret: str | None = NODE_SECRET) -> bytes:
    """A heartbeat request as a node sends it (plain: the listener's protocol takes it past ASGI)."""
    extra = f"{NODE_SECRET_HEADER}: {secret}\r\n" if secret is not None else ""
    head = (
        f"POST {wire.HEARTBEAT_PATH} HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}"
        f"Content-Type: {wire.MEDIA_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _listener_of(runner: Runner) -> tuple[str, int]:
    first = httpx.post(runner.url + wire.HEARTBEAT_PATH, content=_beat("n0"), headers=NODE, timeout=WAIT)
    named = urlsplit(wire.decode(first.content)[wire.HEARTBEAT_URL])
    assert named.hostname is not None and named.port is not None
    return named.hostname, named.port


def _not_through_asgi(monkeypatch: Any) -> list[str]:
    """The paths of the requests that reach the listener's ASGI side from here on."""
    through: list[str] = []
    asgi = SchedulerService.heartbeat_asgi

    async def counted(self: SchedulerService, scope: dict[str, Any], receive: Any, send: Any) -> None:
        through.append(scope["path"])
        await asgi(self, scope, receive, send)

    monkeypatch.setattr(SchedulerService, "heartbeat_asgi", counted)
    return through


def test_the_listeners_refusals_past_asgi(runner: Runner, monkeypatch: Any) -> None:
    """Plain heartbeats on the listener are answered past ASGI (``SchedulerService.direct_heartbeat``) with the
    route's refusals, over a real socket: no node secret or a wrong one, 401 with YT error 900 naming the node
    secret; a malformed body, 400 naming the field; a body that is not JSON, 400 naming ``heartbeat``. Nothing
    reaches the listener's ASGI side (on the code before the direct path every one did)."""
    host, port = _listener_of(runner)
    through = _not_through_asgi(monkeypatch)
    cases: list[tuple[bytes, str | None, int, int | None, str | None]] = [
        (_beat("n2"), None, 401, 900, None),
        (_beat("n2"), "ptns-wrong", 401, 900, None),
        (wire.encode({"node_address": "n2"}), NODE_SECRET, 400, None, "resource_limits"),
        (b"{not json", NODE_SECRET, 400, None, "heartbeat"),
    ]
    with socket.create_connection((host, port), timeout=WAIT) as sock:
        held = bytearray()
        for body, secret, status, code, field in cases:
            sock.sendall(_raw_heartbeat(host, port, body, secret))
            got, headers, content = read_answer(sock, held)
            error = wire.decode(content)
            assert got == status, content
            assert headers["x-yt-response-code"] == str(error["code"])
            if code is not None:
                assert error["code"] == code and "node secret" in error["message"].lower()
            if field is not None:
                assert error["attributes"]["field"] == field, error
    assert through == []
    assert runner.service.scheduler.heartbeat_throttle.in_flight == 0


IN_FLIGHT = 8


def _live(objects: list[Any]) -> tuple[int, int]:
    """(coroutines, asyncio tasks) among ``objects``."""
    coroutines = sum(1 for thing in objects if inspect.iscoroutine(thing))
    tasks = sum(1 for thing in objects if isinstance(thing, asyncio.Task))
    return coroutines, tasks


def test_the_listener_answers_a_heartbeat_once_its_records_are_stored_with_no_task_or_coroutine_chain(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Heartbeats that start allocations wait, on the listener's loop, for the group commit to store their job
    records: while the store's write is held none is answered, none holds a task or a coroutine (its flight waits
    with ``GroupCommit.wait_step``'s futures; 164097a stepped a ``wait_async`` coroutine, one each), none reached
    the ASGI side; once the write is let go
    each is answered, and what it starts is in the store. Through ASGI each heartbeat in flight held a task and
    nine coroutines (``bench/RESULTS.md``, session 37, ``startcost4``)."""
    gate = threading.Event()
    gate.set()
    held = threading.Event()

    def gated(store: Store) -> None:
        for name in ("put_jobs", "put_operations"):
            write = getattr(store, name)

            def wait_then(*args: Any, _write: Any = write) -> Any:
                if not gate.is_set():
                    held.set()
                    assert gate.wait(WAIT)
                return _write(*args)

            setattr(store, name, wait_then)

    loop = Loop()
    runner = Runner(loop, tmp_path, wrap_store=gated)
    socks: list[socket.socket] = []
    try:
        host, port = _listener_of(runner)
        live = runner.service.scheduler
        spec = {"tasks": {"main": {"command": "true", "job_count": 200, "cpu_limit": 1}}}
        with live.lock:
            operation = live.start_operation("vanilla", spec, "alice", 1.0).id
        assert published(live, operation, WAIT)
        wait_for(
            lambda: (
                httpx.post(
                    f"http://{host}:{port}{wire.HEARTBEAT_PATH}",
                    content=_beat("n0"),
                    headers=NODE,
                    timeout=WAIT,
                )
                .json()
                .get(wire.START)
            ),
            WAIT,
        )
        through = _not_through_asgi(monkeypatch)
        socks = [socket.create_connection((host, port), timeout=WAIT) for _ in range(IN_FLIGHT)]
        gc.collect()
        before = _live(gc.get_objects())
        gate.clear()
        for index, sock in enumerate(socks):
            sock.sendall(_raw_heartbeat(host, port, _beat(f"n{index + 1}")))
        throttle = live.heartbeat_throttle
        wait_for(lambda: held.is_set() and throttle.in_flight == IN_FLIGHT, WAIT)
        during = _live(gc.get_objects())
        readable, _, _ = select.select(socks, [], [], 0.2)
        assert readable == []  # none answered while its records are not stored
        # counted in the whole process (other loops' tasks may come and go): a margin of half a heartbeat each
        coroutines, tasks = during[0] - before[0], during[1] - before[1]
        assert tasks < IN_FLIGHT / 2, (before, during)  # none
        assert coroutines < IN_FLIGHT / 2, (before, during)  # none
        gate.set()
        started = []
        for sock in socks:
            status, _, content = read_answer(sock, bytearray())
            assert status == 200, content
            starts = wire.decode(content).get(wire.START)
            assert starts, content  # each started something: it had records to wait for
            started += [(spec["operation_id"], spec["job_id"]) for spec in starts]
        assert all(runner.service.store.get_job(*job) is not None for job in started)
        assert through == []
        assert throttle.in_flight == 0
    finally:
        gate.set()
        for sock in socks:
            sock.close()
        try:
            runner.stop()
        finally:
            loop.close()


def test_a_heartbeat_read_behind_others_in_a_turn_of_the_loop_counts_their_time_as_queued(
    runner: Runner, monkeypatch: Any
) -> None:
    """Past ASGI a heartbeat is taken from the loop's ready queue (``HeartbeatProtocol.after_reads``), as through
    ASGI its task was: two heartbeats read in one turn of the loop, each processed in ``slow`` seconds, the second
    waits for the first, counted as queued that long and throttled (``queued``: its node was heard from within
    the backoff). Processed in its read, neither would wait (nor be throttled), and the group commit's wake-ups
    would wait for the turn's reads."""
    slow = 0.4
    host, port = _listener_of(runner)
    service = runner.service
    scheduler, throttle = service.scheduler, service.scheduler.heartbeat_throttle
    throttle.settings = ThrottleSettings(queued_limit=slow / 2)
    socks = {name: socket.create_connection((host, port), timeout=WAIT) for name in ("a", "b", "c")}
    try:
        for name, sock in socks.items():  # each node heard from: a wait in the loop may throttle it
            sock.sendall(_raw_heartbeat(host, port, _beat(name)))
            assert read_answer(sock, bytearray())[0] == 200
        entered, release = threading.Event(), threading.Event()
        original = scheduler.try_process_heartbeat

        def held(heartbeat: Any, *args: Any, **kwargs: Any) -> Any:
            if heartbeat.address == "c":
                entered.set()
                release.wait(WAIT)  # the loop's thread held: a's and b's heartbeats arrive meanwhile
            elif heartbeat.address in ("a", "b"):
                time.sleep(slow)  # the work each costs the loop
            return original(heartbeat, *args, **kwargs)

        monkeypatch.setattr(scheduler, "try_process_heartbeat", held)
        socks["c"].sendall(_raw_heartbeat(host, port, _beat("c")))
        assert entered.wait(WAIT)
        for name in ("a", "b"):
            socks[name].sendall(_raw_heartbeat(host, port, _beat(name)))
        release.set()
        answers = {name: wire.decode(read_answer(sock, bytearray())[2]) for name, sock in socks.items()}
    finally:
        for sock in socks.values():
            sock.close()
    skipped = sorted(name for name, answer in answers.items() if answer.get(wire.SCHEDULING_SKIPPED))
    assert len(skipped) == 1 and skipped[0] in ("a", "b"), answers
    assert throttle.throttled["queued"] == 1
    assert 0.9 * slow <= throttle.queue_wait_max < 3 * slow  # the loop's clock: milliseconds (uvloop)


def test_a_listener_with_no_leading_service_answers_503_past_asgi_as_through_it(tmp_path: Path) -> None:
    """While no service leads the process (starting, standby, recovering), the listener's plain heartbeats are
    answered 503 past ASGI (``leader.HeartbeatEntry``) as a request handed to uvicorn is answered through ASGI:
    the same status, YT error and headers."""
    runner = SchedulerRunner(f"sqlite:///{tmp_path / 'state.db'}", service_factory=SchedulerService)
    entry = HeartbeatEntry(runner)
    through: list[str] = []
    asgi = runner._heartbeat_entry

    async def counted(scope: dict[str, Any], receive: Any, send: Any) -> None:
        through.append(scope["path"])
        await asgi(scope, receive, send)

    runner._heartbeat_entry = counted  # type: ignore[method-assign]
    server = ServerThread(entry, http=HeartbeatProtocol)
    server.server.config.proxy_headers = False  # the app as it is (uvicorn's proxy middleware would wrap it)
    with server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
            sock.sendall(_raw_heartbeat("127.0.0.1", server.port, _beat("n1")))
            direct = comparable_answer(*read_answer(sock, bytearray()))
        assert through == []
        # a head the protocol does not take (``Connection: close``): uvicorn's, through ASGI (a chunked answer)
        handed = httpx.post(
            server.url + wire.HEARTBEAT_PATH,
            content=_beat("n1"),
            headers={**NODE, "Connection": "close"},
            timeout=WAIT,
        )
        assert through == ["/internal/node_heartbeat"]
    through_asgi = comparable_answer(handed.status_code, dict(handed.headers), handed.content)
    answers = [direct[:2] + direct[3:], through_asgi[:2] + through_asgi[3:]]  # the length aside
    assert answers[0] == answers[1]
    status, _, headers, error = answers[0]
    assert status == 503 and error["code"] == STORE_UNAVAILABLE and "starting" in error["message"]
    assert headers["x-yt-response-code"] == str(STORE_UNAVAILABLE)
