"""One leader per store, a standby that takes over, and a watched store: the scheduler process's shell.

``SchedulerRunner`` is the ASGI app uvicorn serves. While this process leads, requests go to its
``SchedulerService``; otherwise they are answered with a YT error (code 105, HTTP 503, which ``yt.wrapper`` retries)
naming the leader (a standby) or the store's trouble (a leader that lost its store). An error is used rather than
a redirect because the leader a standby knows of may be the one that just died (a redirect would send clients to
a dead address), nodes and clients already hold the list of scheduler addresses to try (``--scheduler URL1,URL2``),
and a 503 makes ``yt.wrapper`` retry: a client that keeps asking the standby is answered once it leads.

- **SQLite**: the lock file is taken before the database is opened; a second scheduler is refused with one line
  naming the holder. Store trouble (file deleted, replaced, corrupted) is final for the process: the service stays
  up (reads from memory, ``store_health`` for alerts) and refuses every command that changes state and every
  heartbeat; the operator restarts it on a good file.
- **PostgreSQL**: the process that gets the advisory lock leads; others wait as hot standbys (HTTP served,
  polling the lock every ``STANDBY_POLL`` seconds). A leader that loses its connection drops its in-memory state at
  once (nothing it holds can be acknowledged any more), reconnects, takes the lock again (or becomes a standby when
  another scheduler got it first) and revives from what the database holds: the revival a restart does.

``GET /internal/store_health`` answers this process's role, the leader it knows of and the store's health (200
when it leads on a healthy store, 503 otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import uvicorn
from starlette.concurrency import run_in_threadpool

from pooltree.errors import PooltreeError
from pooltree.reads.host import ReadPort
from pooltree.reads.peer import peer_line_protocol, stamped
from pooltree.reads.relay import UPSTREAM_KEEP_ALIVE
from pooltree.security.sealing import Sealer
from pooltree.server.heartbeat_listener import HeartbeatListener, bind_socket, listener_settings
from pooltree.server.heartbeat_protocol import Answering, HeartbeatProtocol, RawHeaders
from pooltree.server.http_protocol import BoundedHeadersProtocol
from pooltree.server.protocol import error_json, error_to_dict, header_text
from pooltree.server.store import STORE_UNAVAILABLE, Store, StoreError, StoreRefused, open_store
from pooltree.server.store.base import redact_url
from pooltree.server.store.leadership import (
    LeaderInfo,
    LeaderLock,
    PostgresLeaderLock,
    SqliteLeaderLock,
)

log = logging.getLogger(__name__)

STANDBY_POLL = 0.2
"""Seconds between a standby's attempts to take the lock (bounds the failover time with the revival)."""
PROBE_PERIOD = 0.25
"""Seconds between active checks of the leader's store (a request that hits the trouble first fails by itself)."""
SQLITE_LOCK_WAIT = 3.0
"""Seconds a scheduler starting on a SQLite store waits for its lock before refusing: a predecessor that just
stopped may still be letting it go (a process it was forking shares the lock's open file until it execs)."""
RECONNECT_DELAY = 0.5


class LeadingService(Protocol):
    """What the runner needs of the service it serves while leading (``server/service.py``'s ``SchedulerService``)."""

    app: Any
    """The service's ASGI app."""
    heartbeat_port: int | None
    """The heartbeat listener's port, set by the runner (None: heartbeats only on the API's port)."""

    async def asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Where requests go while this process leads (the app, with the node heartbeat's direct path)."""
        ...

    async def heartbeat_asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Where the heartbeat listener's requests go while this process leads (on the listener's loop)."""
        ...

    def direct_heartbeat(
        self,
        headers: RawHeaders,
        body: bytes,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        answering: Answering,
    ) -> None:
        """Where the heartbeat listener's plain heartbeats go past ASGI while this process leads
        (``heartbeat_protocol.DirectHeartbeats``)."""
        ...

    def store_health(self) -> dict[str, Any]: ...

    def watch_read_process(self, health: Any) -> None:
        """The runner's read process (``pooltree/reads``): its alert and metrics among the service's."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def sqlite_path_of(url: str) -> Path | None:
    """The database file of a SQLite store URL (or bare path); None for PostgreSQL."""
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if scheme == "sqlite" and url.startswith("sqlite:///"):
        return Path(unquote(url[len("sqlite:///") :]))
    if scheme == "":
        return Path(url)
    return None


def http_config(
    app: Any, host: str, port: int, http: type[asyncio.Protocol] = BoundedHeadersProtocol
) -> uvicorn.Config:
    """The leader's uvicorn configuration (``http``: the heartbeat listener's is ``HeartbeatProtocol``).

    ``access_log=False`` is given to the constructor, which is where uvicorn takes the access logger's handlers
    away: set on the config afterwards (as before), the access logger kept them, and every answer formatted the
    access log's arguments (the request path quoted, the client's address) for a record dropped at level warning."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        http=http,  # half-sent request headers hold no connection for ever
        # a caller's address is its connection's: no X-Forwarded-For (uvicorn trusts it from 127.0.0.1 by
        # default) moves a node to another host (``Security.bind_node``); and no middleware per request
        proxy_headers=False,
        access_log=False,
    )


class HeartbeatEntry:
    """The heartbeat listener's app: ``SchedulerRunner._heartbeat_entry`` through ASGI, and the leading service's
    ``direct_heartbeat`` for the plain heartbeats the listener's protocol takes (``heartbeat_protocol.py``), a 503
    while no service leads here (a node that gets it goes back to its scheduler list)."""

    direct_after_reads = True
    """Its heartbeats are real work: taken from the loop's ready queue (``HeartbeatProtocol.after_reads``)."""

    def __init__(self, runner: SchedulerRunner) -> None:
        self.runner = runner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.runner._heartbeat_entry(scope, receive, send)

    def direct_heartbeat(
        self,
        headers: RawHeaders,
        body: bytes,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        answering: Answering,
    ) -> None:
        service = self.runner.service
        if service is not None:
            service.direct_heartbeat(headers, body, client, server, answering)
            return
        answering.answer(*self.runner._unavailable_answer())


class SchedulerRunner:
    """Leadership, the watch over the store and the HTTP face of one ``pooltree scheduler`` process."""

    def __init__(
        self,
        store_url: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        service_factory: Callable[[Store], LeadingService],
        on_ready: Callable[[str], None] | None = None,
        on_role: Callable[[str], None] | None = None,
        store_key_file: Path | None = None,
        operator_check: Callable[[Mapping[str, str]], None] | None = None,
        heartbeat_port: int | None = None,
        read_process: bool = False,
    ) -> None:
        """``heartbeat_port``: node heartbeats are also taken on that port (0: a free one) by a listener with an
        event loop of its own (``heartbeat_listener.py``), which answers on the API's port name; None: heartbeats
        only on the API's port and loop. ``read_process``: a read process owns the API port and relays to this
        process's internal listener (``pooltree/reads``)."""
        self.store_url = store_url
        self.read_process = read_process
        self.reads: ReadPort | None = None
        """The read process and the port it owns while HTTP is served with ``read_process``."""
        self.heartbeat_port = heartbeat_port
        self.heartbeats: HeartbeatListener | None = None
        """The heartbeat listener while HTTP is served (``heartbeat_port`` not None)."""
        self.operator_check = operator_check
        """Who may read ``/internal/store_health`` while no service runs (a standby): the bootstrap superuser
        token or the node secret; None refuses everyone then. With a service, ``Security`` decides."""
        self.store_key_file = store_key_file
        """The key that seals the store's secrets (``pooltree.security.sealing``); every scheduler of one
        database must be given the same file. None: SQLite's ``<file>.key``, PostgreSQL a key of this process."""
        self.sealer: Sealer | None = None
        self.public_store_url = redact_url(store_url)
        self.host = host
        self.port = port
        self.service_factory = service_factory
        self.on_ready = on_ready
        self.on_role = on_role
        self.service: LeadingService | None = None
        self.store: Store | None = None
        self.lock: LeaderLock | None = None
        self.role = "starting"
        self.leader: LeaderInfo | None = None
        self.trouble: str | None = None
        self._key_verified = False
        """The store's sealed value opened with this scheduler's key (checked by a standby until it does)."""
        self.url: str | None = None
        self._server: uvicorn.Server | None = None
        self._server_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope.get("path") == "/internal/store_health":
            error = await self._health_access(scope)
            if error is not None:
                await self._refuse(send, error)
                return
            await self._health(send)
            return
        service = self.service
        if service is not None:
            await service.asgi(scope, receive, send)
            return
        await self._unavailable(send)

    def health(self) -> dict[str, Any]:
        """Role, known leader and store health of this process (also ``GET /internal/store_health``)."""
        store = self.service.store_health() if self.service is not None else None
        ok = self.role == "leader" and store is not None and store["ok"]
        return {
            "ok": ok,
            "role": self.role,
            "leader": self.leader.to_json() if self.leader is not None else None,
            "store": {
                **(store or {"ok": False, "error": self.trouble, "since": None}),
                "url": self.public_store_url,
            },
        }

    async def _health(self, send: Any) -> None:
        body = json.dumps(self.health()).encode()
        status = 200 if self.health()["ok"] else 503
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _health_access(self, scope: dict[str, Any]) -> PooltreeError | None:
        """None when the caller is a superuser or a node; the error to answer otherwise."""
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", [])
        }
        client = scope.get("client")
        peer = client[0] if client else None
        service = self.service
        try:
            if service is not None:
                await run_in_threadpool(service.security.authenticate_operator, headers, peer)
            elif self.operator_check is not None:
                self.operator_check(headers)
            else:
                raise PooltreeError("The store health is not served without a way to authenticate", code=900)
        except PooltreeError as error:
            return error
        return None

    async def _refuse(self, send: Any, error: PooltreeError) -> None:
        body = error_to_dict(error, host=self.host, now=time.time())
        text = error_json(body)
        headers = [
            (b"content-type", b"application/json"),
            (b"x-yt-error", text.encode()),
            (b"x-yt-response-code", str(body["code"]).encode()),
        ]
        status = 401 if body["code"] == 900 else 403
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": text.encode()})

    def unavailable_message(self) -> str:
        if self.role == "standby":
            leader = (
                f"the leader is {self.leader.describe()}" if self.leader else "the leader is not known yet"
            )
            return f"This scheduler is a standby, not the leader: {leader}; send requests to the leader"
        reason = self.trouble or "the scheduler is starting"
        return f"Scheduler store is unavailable, nothing is acknowledged: {reason}"

    async def _unavailable(self, send: Any) -> None:
        status, headers, body = self._unavailable_answer()
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _unavailable_answer(self) -> tuple[int, RawHeaders, bytes]:
        """The 503 a request gets while no service leads here: (status, headers, body)."""
        attributes: dict[str, Any] = {"role": self.role, "store": self.public_store_url}
        if self.leader is not None:
            attributes["leader"] = self.leader.to_json()
        body = error_to_dict(
            PooltreeError(self.unavailable_message(), code=STORE_UNAVAILABLE, attributes=attributes),
            host=self.host,
            now=time.time(),
        )
        text = error_json(body)
        headers = [
            (b"content-type", b"application/json"),
            (b"x-yt-error", text.encode()),
            (b"x-yt-response-code", str(STORE_UNAVAILABLE).encode()),
            (b"x-yt-response-message", header_text(body["message"]).encode("latin-1", "replace")),
        ]
        return 503, headers, text.encode()

    async def _heartbeat_entry(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The heartbeat listener's ASGI app (on its own loop): the leading service's heartbeats, else 503 (a
        node that gets it goes back to its scheduler list)."""
        if scope["type"] != "http":
            return
        service = self.service
        if service is not None:
            await service.heartbeat_asgi(scope, receive, send)
            return
        await self._unavailable(send)

    # ------------------------------------------------------------------ lifecycle

    def _set_role(self, role: str) -> None:
        if role == self.role:
            return
        self.role = role
        if role == "standby":
            text = f"standby: {self.leader.describe() if self.leader else 'leader unknown'} leads"
        elif role == "leader":
            text = "leader"
        else:
            text = f"{role}: {self.trouble}"
        log.info("scheduler role: %s", text)
        if self.on_role is not None:
            self.on_role(text)

    async def _lead(self, store: Store) -> None:
        """Build the service on ``store`` (Cypress, pool trees) and revive operations; this process now leads."""
        service = await run_in_threadpool(self.service_factory, store)
        service.heartbeat_port = self.heartbeats.port if self.heartbeats is not None else None
        await service.start()
        self.service = service
        if self.reads is not None:
            self.reads.lead(service)
        self.trouble = None
        self.leader = None
        self._set_role("leader")

    async def _announce(self) -> None:
        assert self.lock is not None and self.url is not None
        lock, url = self.lock, self.url
        with contextlib.suppress(StoreError):
            await run_in_threadpool(lock.announce, url)

    async def _start_http(self) -> None:
        reads, sockets = None, None
        config = http_config(self, self.host, self.port)
        if self.read_process:
            try:
                reads = ReadPort(self.host, self.port, bind_socket)
            except OSError as error:
                raise PooltreeError(
                    f"scheduler HTTP server cannot listen on {self.host}:{self.port}: {error.strerror or error}"
                ) from None
            self.reads, sockets = reads, [reads.internal]
            public_config = config
            internal = stamped(self, self._read_feed)
            config = http_config(
                internal, "127.0.0.1", reads.internal_port, http=peer_line_protocol(reads.secret)
            )
            config.interface = "asgi3"
            config.timeout_keep_alive = int(UPSTREAM_KEEP_ALIVE)
        server = uvicorn.Server(config)
        self._server = server
        self._server_task = asyncio.create_task(server.serve(sockets=sockets), name="uvicorn")
        for _ in range(2000):
            if server.started or self._server_task.done():
                break
            await asyncio.sleep(0.005)
        if not server.started:
            if self._server_task.done():
                self._server_task.result()
            raise PooltreeError(f"scheduler HTTP server did not start on {self.host}:{self.port}")
        if reads is not None:
            await reads.start(server, public_config)
            if self.service is not None:
                reads.lead(self.service)
            bound = reads.port
        else:
            bound = server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{bound}"
        if self.heartbeat_port is not None:
            await self._start_heartbeats(self.heartbeat_port)
        if self.on_ready is not None:
            self.on_ready(self.url)

    def _read_feed(self) -> Any:
        """The leading service's feed of the read process's replica (None: none, or no service leads)."""
        service = self.service
        return getattr(service, "read_feed", None) if service is not None else None

    async def _start_heartbeats(self, port: int) -> None:
        """The heartbeat listener on ``port`` (0: a free one) of the API's host, named to nodes from now on."""
        try:
            sock = bind_socket(self.host, port)
        except OSError as error:
            raise PooltreeError(
                f"scheduler heartbeat listener cannot listen on {self.host}:{port}: {error.strerror or error}"
            ) from None
        # plain heartbeats past uvicorn's request machinery, anything else by uvicorn (``heartbeat_protocol.py``)
        config = http_config(HeartbeatEntry(self), self.host, port, http=HeartbeatProtocol)
        config.interface = "asgi3"
        listener_settings(config)
        listener = HeartbeatListener(config, sock)
        await run_in_threadpool(listener.start)
        self.heartbeats = listener
        log.info(
            "node heartbeats taken on %s:%d (nodes are sent there by their first answer)",
            self.host,
            listener.port,
        )
        if self.service is not None:
            self.service.heartbeat_port = listener.port

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Lead (or stand by) until ``stop`` is set or the task is cancelled; closes everything."""
        stop = stop if stop is not None else asyncio.Event()
        try:
            if self.store_key_file is not None:
                self.sealer = await run_in_threadpool(Sealer.from_file, self.store_key_file)
            path = sqlite_path_of(self.store_url)
            if path is not None:
                await self._run_sqlite(path, stop)
            else:
                await self._run_postgres(stop)
        finally:
            await self._shutdown()

    async def _wait(self, stop: asyncio.Event, seconds: float) -> None:
        waiters = {asyncio.ensure_future(stop.wait())}
        if self._server_task is not None:
            waiters.add(asyncio.ensure_future(asyncio.shield(self._server_task)))
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if self._server_task is not None and self._server_task.done():
            stop.set()

    async def _run_sqlite(self, path: Path, stop: asyncio.Event) -> None:
        self.lock = SqliteLeaderLock(path)
        deadline = time.monotonic() + SQLITE_LOCK_WAIT
        acquired = self.lock.try_acquire()
        while not acquired and not stop.is_set() and time.monotonic() < deadline:
            await self._wait(stop, PROBE_PERIOD)
            acquired = self.lock.try_acquire()
        if not acquired:
            holder = self.lock.holder()
            raise StoreError(
                f"another pooltree scheduler ({holder.describe() if holder else 'pid unknown'}) already runs "
                f"on the store {path}; one scheduler per SQLite store (stop it, or use PostgreSQL for a standby)",
                attributes={"store": self.store_url},
            )
        self.store = open_store(self.store_url, key_file=self.store_key_file)
        await self._lead(self.store)
        await self._start_http()
        await self._announce()
        reported: str | None = None
        while not stop.is_set():
            await self._wait(stop, PROBE_PERIOD)
            health = await run_in_threadpool(self.store.probe)
            if health.ok and reported is not None:
                log.warning("store healthy again after: %s", reported)
                reported = self.trouble = None
            elif not health.ok and reported != health.error:
                reported = self.trouble = health.error
                if health.transient:
                    log.error("store out of space: %s; writes are refused until space returns", health.error)
                else:
                    log.error(
                        "store trouble: %s; nothing more is acknowledged, restart the scheduler on a good store",
                        health.error,
                    )

    async def _open_postgres(self) -> Store:
        from pooltree.server.store.postgres import PostgresStore

        return await run_in_threadpool(
            lambda: PostgresStore(self.store_url, init_schema=False, sealer=self.sealer)
        )

    async def _run_postgres(self, stop: asyncio.Event) -> None:
        store = await self._open_postgres()  # the first connection must work: a wrong URL fails start-up
        self.store = store
        self.lock = PostgresLeaderLock(store)
        if await run_in_threadpool(self.lock.try_acquire):
            await run_in_threadpool(store.init_schema)  # type: ignore[attr-defined]
            await self._lead(store)
        else:
            await self._stand_by(store)
        await self._start_http()
        if self.service is not None:
            await self._announce()
        while not stop.is_set():
            if self.service is not None:
                await self._wait(stop, PROBE_PERIOD)
                health = await run_in_threadpool(store.probe)
                if not health.ok and not health.transient:  # a full disk: writes refused, the leader stays
                    await self._step_down(health.error)
                continue
            # standby or recovering: (re)connect, then try the lock
            if self.store is None or not self.store.health().ok:
                await self._close_store()
                try:
                    store = await self._open_postgres()
                except StoreError as error:
                    self.trouble = error.message
                    await self._wait(stop, RECONNECT_DELAY)
                    continue
                self.store = store
                self.lock = PostgresLeaderLock(store)
            assert self.lock is not None
            try:
                acquired = await run_in_threadpool(self.lock.try_acquire)
                if acquired:
                    await run_in_threadpool(store.init_schema)  # type: ignore[attr-defined]
                    await self._lead(store)
                    await self._announce()
                    log.info("took over as the leader of %s", self.store_url)
                    continue
                await self._stand_by(store)
            except StoreRefused:
                # it could never lead this store: the lock goes back at once, for a standby that can
                await run_in_threadpool(self.lock.release)
                raise
            except StoreError as error:
                self.trouble = error.message
                if self.service is not None:
                    await self._step_down(error.message)
            await self._wait(stop, STANDBY_POLL)

    async def _stand_by(self, store: Store) -> None:
        """Wait as a standby, after refusing a key that cannot open what the store sealed (``StoreRefused``
        ends the process, as it ends a leader's start: a standby that could never lead must not wait to take
        the lock when the leader dies, and must say so now, not then)."""
        if not self._key_verified:
            self._key_verified = await run_in_threadpool(store.verify_key)  # type: ignore[attr-defined]
        assert self.lock is not None
        self.leader = await run_in_threadpool(self.lock.holder)
        self._set_role("standby")

    async def _step_down(self, reason: str | None) -> None:
        """The store failed under the leader: drop the in-memory state now; revive from the store later."""
        self.trouble = reason
        service, self.service = self.service, None
        if self.reads is not None:
            self.reads.unlead()
        self._set_role("recovering")
        log.error("store trouble: %s; in-memory state dropped, waiting for the store", reason)
        if service is not None:
            with contextlib.suppress(Exception):
                await service.stop()
        await self._close_store()

    async def _close_store(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            with contextlib.suppress(Exception):
                await run_in_threadpool(store.close)

    async def _shutdown(self) -> None:
        if self.reads is not None:  # first: its answers in flight are still served by the scheduler
            await self.reads.close()
        if self._server is not None:
            self._server.should_exit = True
        if self._server_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(self._server_task), 10.0)
        if self.reads is not None:
            reads, self.reads = self.reads, None
            reads.close_sockets()
        if self.heartbeats is not None:
            listener, self.heartbeats = self.heartbeats, None
            await run_in_threadpool(listener.stop)
        service, self.service = self.service, None
        if service is not None:
            await service.stop()
        if isinstance(self.lock, PostgresLeaderLock) and self.store is not None and self.store.health().ok:
            with contextlib.suppress(Exception):
                await run_in_threadpool(self.lock.release)
        await self._close_store()
        if isinstance(self.lock, SqliteLeaderLock):
            self.lock.release()  # after the database is closed
