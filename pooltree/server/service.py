"""The live scheduler service: HTTP API + node heartbeats + periodic fair-share updates + revival, on one store.

``SchedulerService(store)`` wires Cypress (pool trees), ``LiveScheduler`` (operations, jobs, nodes), the
operation/job commands, the live orchid, ``GET /metrics`` and ``POST /internal/node_heartbeat`` into one Starlette
app. ``await start()`` revives operations from the store and starts the background loops; ``await stop()`` ends
them. ``serve(store_url, ...)`` runs it all under uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pooltree.alerts import AlertSettings
from pooltree.errors import ConfigError, PooltreeError
from pooltree.forecast.health import ForecastCollector
from pooltree.forecast.worker import ForecastService, WorkerSettings
from pooltree.node import wire
from pooltree.node.service import check_period
from pooltree.node.wire import HeartbeatRequest
from pooltree.reads.feed import ReadFeed as PendingReadFeed
from pooltree.reads.health import ReadFeedMetrics, ReadProcessHealth, ReadProcessMetrics
from pooltree.reads.seam import ReadFeed
from pooltree.security import Security
from pooltree.security.guard import NODE_SECRET_HEADER, bootstrap_operator_check, is_loopback
from pooltree.server.access import ServiceResolver
from pooltree.server.app import DirectCommands, create_app, new_request_id, read_body
from pooltree.server.cypress import Cypress, PoolTreesChange, default_validator
from pooltree.server.cypress_watch import USER_TO_DEFAULT_POOL_PATH, parse_user_to_default_pool
from pooltree.server.gc_tuning import GC, GcCollector, tuning_enabled
from pooltree.server.heartbeat_flight import HeartbeatFlight
from pooltree.server.heartbeat_listener import url_for
from pooltree.server.heartbeat_protocol import Answering, RawHeaders, header_value
from pooltree.server.heartbeat_trace import TRACE
from pooltree.server.heartbeats import (
    MAX_HEARTBEAT_BYTES,
    HeartbeatRoute,
    RunningReports,
    read_heartbeat_body,
)
from pooltree.server.http_protocol import ARRIVED, ARRIVED_CPU
from pooltree.server.knobs import seconds_override
from pooltree.server.leader import SchedulerRunner
from pooltree.server.live import LiveScheduler
from pooltree.server.live.jobs import Then
from pooltree.server.live.tail import HeartbeatTail, TailCollector
from pooltree.server.live.throttle import ThrottleSettings
from pooltree.server.metrics import CONTENT_TYPE, make_registry, render
from pooltree.server.operations import OperationCommands
from pooltree.server.orchid import LiveOrchid
from pooltree.server.protocol import YtError
from pooltree.server.stalls import StallRing
from pooltree.server.store import Store
from pooltree.shards.host import MAX_NODE_SHARDS, NodeShards, ShardMetrics, ShardSettings
from pooltree.shards.remote import ProcessShardStarts
from pooltree.web.app import WebUI

log = logging.getLogger(__name__)

_SECRET_HEADER = NODE_SECRET_HEADER.encode("latin-1")

DEFAULT_TREE = "default"
DEFAULT_TREE_CREATED_KEY = "default_pool_tree_created"
"""Store key set once ``--create-default-tree`` has made (or found) the trees: never made again after that."""
ON_LISTENER = "pooltree.heartbeat_listener"
"""Scope key of a request that came through the heartbeat listener (``SchedulerService.heartbeat_asgi``)."""
MAX_STDERR_UPLOAD_BYTES = 16 * 1024 * 1024
LOOP_TICK = 0.05
HEARTBEAT_THREADS = 16
"""Threads for heartbeats that wait for the scheduling lock or for their job records to be stored (one group
commit serves all that wait at once)."""
SWITCH_INTERVAL = 0.001
"""Seconds a thread holds the GIL while another waits for it (Python's default is 0.005). The event loop answers
cached reads itself and hands the rest to worker threads; each time a worker's SQLite call or the loop's socket
I/O gives the GIL up, getting it back waits for the holder's interval, so under load a request paid several
5 ms waits. ``POOLTREE_SWITCH_INTERVAL`` (seconds) overrides it for comparisons."""


def switch_interval() -> float:
    """The GIL switch interval ``serve`` sets: ``POOLTREE_SWITCH_INTERVAL`` when valid, else ``SWITCH_INTERVAL``."""
    return seconds_override(
        "POOLTREE_SWITCH_INTERVAL", SWITCH_INTERVAL, lambda v: 1e-5 <= v <= 1.0, "[1e-05, 1]"
    )


def _checked_node_shards(node_shards: Any) -> int:
    """``node_shards``: an integer from 1 to `MAX_NODE_SHARDS`, else a `ConfigError` naming it."""
    if (
        not isinstance(node_shards, int)
        or isinstance(node_shards, bool)
        or not 1 <= node_shards <= MAX_NODE_SHARDS
    ):
        raise ConfigError(
            "node_shards", f"must be an integer from 1 to {MAX_NODE_SHARDS}, got {node_shards!r}"
        )
    return node_shards


class SchedulerService:
    """One scheduler: the Starlette ``app``, ``start()`` (revival + loops) and ``stop()``."""

    def __init__(
        self,
        store: Store,
        *,
        token: str | None = None,
        node_secret: str | None = None,
        authentication: bool = True,
        node_networks: Sequence[Any] | None = None,
        metrics_public: bool = False,
        clock: Callable[[], float] = time.time,
        node_heartbeat_timeout: float = 60.0,
        create_default_tree: bool = False,
        heartbeat_period: float = 1.0,
        alert_settings: AlertSettings | None = None,
        fair_share_update_period: float = 1.0,
        tune_gc: bool = False,
        forecast_settings: WorkerSettings | None = None,
        throttle_settings: ThrottleSettings | None = None,
        node_shards: int = 1,
        shard_host: str = "127.0.0.1",
        default_tentative_pool_trees: Sequence[str] = (),
        shard_starts: bool = False,
    ) -> None:
        """``token`` is the superuser's (root's) token; nodes authenticate with ``node_secret`` from networks in
        ``node_networks`` (any when None); ``authentication=False`` makes every caller root (loopback tests only).
        ``tune_gc``: freeze the garbage collector's survivors after start-up and after every middle and full
        collection (``pooltree.server.gc_tuning``; the process's gc, so ``serve`` asks for it, tests in one process
        do not).
        ``node_shards`` > 1: node heartbeats are taken by that many shard processes listening on ``shard_host``
        (``pooltree.shards``), started by ``start()``; 1 answers them in this process only. ``shard_starts``: the
        shard processes also run their nodes' scheduling passes (``pooltree.shards.remote``); with ``node_shards`` 1
        one shard process runs them (and takes every node's heartbeats)."""
        self.node_shards = _checked_node_shards(node_shards)
        self.shard_starts = shard_starts
        self.shard_host = shard_host
        self.shards: NodeShards | None = None
        """The node shard processes while started with ``node_shards`` > 1."""
        self.store = store
        self.tune_gc = tune_gc
        self.clock = clock
        self.security = Security(
            store,
            clock=clock,
            authentication=authentication,
            root_token=token,
            node_secret=node_secret,
            node_networks=node_networks,
            metrics_public=metrics_public,
        )
        self.create_default_tree = create_default_tree
        self.scheduler = LiveScheduler(
            store,
            node_heartbeat_timeout=node_heartbeat_timeout,
            heartbeat_period=heartbeat_period,
            alert_settings=alert_settings,
            fair_share_update_period=fair_share_update_period,
            throttle_settings=throttle_settings,
        )
        self.scheduler.isolate_job_network = not authentication
        self.scheduler.default_tentative_pool_trees = tuple(default_tentative_pool_trees)
        self._validator = default_validator()
        self.cypress = Cypress(store, clock=clock, validator=self._validate_pool_trees)
        self.orchid = LiveOrchid(self.scheduler, self._default_tree)
        self._follow_cypress()
        self.commands = OperationCommands(self.scheduler, clock)
        self.forecasts = ForecastService(self.scheduler, clock, forecast_settings)
        resolver = ServiceResolver(self.cypress, self.scheduler)
        self.security.resolver = resolver
        self.metrics = self._metrics_registry()
        self.app = create_app(
            store, security=self.security, operations=self.commands, clock=clock, cypress=self.cypress
        )
        self._api = self.app.state.api
        self.web = WebUI(self)
        self._wire_parts(resolver)
        self._heartbeat_parts()
        self._tasks: list[asyncio.Task[None]] = []
        self.started = False
        self.read_feed: ReadFeed | None = PendingReadFeed(
            self.scheduler, self.commands, self.security, self._api.host
        )
        """The feed of the read process's replica (``pooltree/reads/seam.py``; ``reads/feed.py``: pending
        operations' gets); None: the read process relays every request and the internal listener stamps nothing.
        Told of reads and changes from here on; it sends only while a read process is attached."""
        self.read_feed.listen(self.cypress.subscribe)
        self._read_process_metrics: ReadProcessMetrics | None = None

    def watch_read_process(self, health: ReadProcessHealth) -> None:
        """The runner's read process (``pooltree/reads``): its ``read_process_died`` alert among the scheduler's
        alerts, its counters in ``/metrics``."""
        self.scheduler.alert_center.read_process_alert = health.alert
        if self._read_process_metrics is None:
            self._read_process_metrics = ReadProcessMetrics(health)
            self.metrics.register(self._read_process_metrics)
            self.metrics.register(ReadFeedMetrics(lambda: getattr(self.read_feed, "counts", None)))

    def _metrics_registry(self) -> CollectorRegistry:
        """``GET /metrics``' registry: the scheduler's families, the garbage collector's, the forecast's, the shards'."""
        metrics = make_registry(self.scheduler)
        metrics.register(GcCollector())
        metrics.register(ForecastCollector(self.forecasts.health))
        metrics.register(ShardMetrics(lambda: self.shards))
        metrics.register(TailCollector(lambda: self.tail))  # made with the heartbeat parts
        return metrics

    def _heartbeat_parts(self) -> None:
        """The heartbeat routes (the API's port, the listener's), the nodes' last reports per loop, the listener's
        port and the heartbeats' threads."""
        self._direct = HeartbeatRoute(self.heartbeat_answer, DirectCommands(self.app))
        self._heartbeats_only = HeartbeatRoute(self.heartbeat_answer, self._not_a_heartbeat)
        self._running_reports = RunningReports()
        """Nodes' last running-job reports (``wire.RunningReports``), read on the API's event loop only."""
        self._listener_reports = RunningReports()
        """The same for the heartbeat listener's event loop (``heartbeat_asgi``), read on that loop only."""
        self.heartbeat_port: int | None = None
        """The port of the process's heartbeat listener (``heartbeat_listener.py``, set by ``SchedulerRunner``),
        which answers to heartbeats sent to the API's port name (``wire.HEARTBEAT_URL``); None: no listener."""
        self._heartbeat_threads: ThreadPoolExecutor | None = None
        """Heartbeats waiting for the scheduling lock or for their job records to be stored (from ``start``
        to ``stop``; before and after, Starlette's threads)."""
        self.tail = HeartbeatTail()
        """The heartbeats' phases and the slow ones (``live/tail.py``, ``GET /internal/heartbeat_tail``)."""
        self.update_stalls = StallRing()
        """Fair-share updates (their wall time: lock waits and the computation outside the lock included)."""

    def _follow_cypress(self) -> None:
        """The scheduler takes its pool trees and users' default parent pools from Cypress, now and on every change
        (Cypress's lock is taken first, as everywhere: a tree removal is checked and applied whole)."""
        scheduler, cypress, clock = self.scheduler, self.cypress, self.clock
        scheduler.config_lock = cypress._lock
        scheduler.alert_center.store_health = self._store_trouble
        cypress.orchid = self.orchid
        cypress.subscribe(self._on_pool_trees)
        scheduler.apply_pool_trees(
            cypress.parsed_pool_trees or {},
            cypress.default_tree_attribute(),
            clock(),
            single_tree_default=False,
        )
        try:
            user_default_pools = cypress.watch(
                USER_TO_DEFAULT_POOL_PATH, parse_user_to_default_pool, self._on_user_default_pools
            )
        except YtError as error:  # stored before pooltree read it: unused until it is set right
            log.warning("%s not applied: %s", USER_TO_DEFAULT_POOL_PATH, error.message)
            user_default_pools = {}
        scheduler.set_user_default_parent_pools(user_default_pools, clock())

    def _wire_parts(self, resolver: ServiceResolver) -> None:
        """What the parts read of each other: the commands' forecasts and visibility rule, the HTTP app's file
        store (shared with the commands, the resolver and the jobs), and the internal routes (node heartbeats,
        metrics, job files and stderr) and the web UI's before the API's."""
        self.commands.forecasts = self.forecasts
        self.scheduler.alert_center.forecast_alert = self.forecasts.health.alert
        self.scheduler.alert_center.collector_alert = GC.alert
        self.commands.listing.visible = self.security.operation_visible
        app = self.app
        self.commands.files = app.state.files
        resolver.files = app.state.files  # transactions belong to their users
        self.scheduler.job_files = app.state.files.job_files
        app.router.routes[0:0] = [
            Route(wire.HEARTBEAT_PATH, self._heartbeat, methods=["POST"]),
            Route("/metrics", self._metrics, methods=["GET"]),
            Route("/internal/heartbeat_tail", self._heartbeat_tail, methods=["GET"]),
            Route("/internal/file_blob/{blob_id}", self._file_blob, methods=["GET"]),
            Route("/internal/job_stderr/{operation_id}/{job_id}", self._job_stderr, methods=["PUT"]),
        ]
        app.router.routes[0:0] = self.web.routes()
        app.state.service = self
        app.state.body_limits["/internal/node_heartbeat"] = MAX_HEARTBEAT_BYTES

    def _validate_pool_trees(self, trees: Any) -> Any:
        """Cypress's validator. A removed tree's operations are not a reason to refuse: as on YTsaurus, the
        scheduler takes them out of it when it applies the change (``live/orphans.py``)."""
        return self._validator(trees)

    def store_health(self) -> dict[str, Any]:
        """``{ok, url, error, since}``: the store's trouble (file gone, replaced, corrupted; connection lost)
        for alerts; while not ok, commands that change state and heartbeats are refused."""
        return self.store.health().to_json()

    def _store_trouble(self) -> dict[str, Any] | None:
        """None while the store is healthy, else the ``store_trouble`` alert's message and attributes."""
        health = self.store.health()
        if health.ok:
            return None
        return {"message": health.error, "store": health.url, "since": health.since}

    def _create_default_tree(self) -> None:
        """Create pool tree ``default`` once, on a store that never had it made: a tree (or ``@default_tree``) the
        user removed stays removed after a restart, as on YTsaurus."""
        if self.store.get_value(DEFAULT_TREE_CREATED_KEY):
            return
        if not self.cypress.list("//sys/pool_trees"):
            self.cypress.create("scheduler_pool_tree", f"//sys/pool_trees/{DEFAULT_TREE}")
        self.store.set_value(DEFAULT_TREE_CREATED_KEY, True)

    def _default_tree(self) -> str | None:
        try:
            return self.cypress.default_tree()
        except YtError:
            return None

    def _on_pool_trees(self, change: PoolTreesChange) -> None:
        try:
            self.scheduler.apply_pool_trees(
                change.parsed or {}, change.default_tree, self.clock(), single_tree_default=False
            )
        except PooltreeError as error:
            log.warning("pool trees change not applied to the running scheduler: %s", error.message)

    def _on_user_default_pools(self, mapping: dict[str, str]) -> None:
        self.scheduler.set_user_default_parent_pools(mapping, self.clock())

    # ------------------------------------------------------------------ HTTP endpoints

    async def asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The process's ASGI entry while leading: node heartbeats and API commands straight to their handlers
        (``heartbeats.HeartbeatRoute``, ``app.DirectCommands``), everything else through the app."""
        await self._direct(scope, receive, send)

    async def heartbeat_asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The heartbeat listener's ASGI entry (on its own event loop): node heartbeats, the same handler as the
        API's port; any other request is refused."""
        scope[ON_LISTENER] = True
        await self._heartbeats_only(scope, receive, send)

    async def _not_a_heartbeat(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        error = YtError(
            f"This port takes node heartbeats only (POST {wire.HEARTBEAT_PATH}); send API requests to the "
            "scheduler's API port",
            attributes={"path": scope.get("path")},
        )
        error.http_status = 404
        await self._api.error_response(error, new_request_id())(scope, receive, send)

    async def _heartbeat(self, request: Request) -> Response:
        """The app's heartbeat route; the process's entry answers the same past Starlette's objects
        (``heartbeats.HeartbeatRoute``)."""
        answer = await self.heartbeat_answer(request.scope, request.receive)
        return answer if isinstance(answer, Response) else Response(answer, media_type=wire.MEDIA_TYPE)

    async def heartbeat_answer(self, scope: dict[str, Any], receive: Any) -> bytes | Response:
        """One heartbeat request through ASGI: the answer's body (200, JSON) or an error's response. Authenticated
        before its body is read (refused before read whole), then the flight ``direct_heartbeat`` makes, awaited
        (``heartbeat_flight.py``: decoding, throttling, scheduling, the wait for the store, tracing)."""
        done: asyncio.Future[bytes | Response] = asyncio.get_running_loop().create_future()

        def answered(result: bytes | Response) -> None:
            if not done.done():  # (cancelled: the server stopping)
                done.set_result(result)

        client = scope.get("client")
        peer = client[0] if client else None
        flight = HeartbeatFlight(self, peer, scope.get(ARRIVED), scope.get(ARRIVED_CPU), answered)
        try:
            self.security.authenticate_node(Headers(scope=scope), peer)
            self.store.check_writable()
            body = await read_heartbeat_body(scope, receive)
        except Exception as error:
            flight.fail(error)
            return done.result()
        on_listener = ON_LISTENER in scope
        reports = self._listener_reports if on_listener else self._running_reports  # one per event loop
        names = self.shards is not None or (self.heartbeat_port is not None and not on_listener)
        flight.begin(body, reports, names, scope["headers"], scope.get("server"))
        return await done

    def direct_heartbeat(
        self,
        headers: RawHeaders,
        body: bytes,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        answering: Answering,
    ) -> None:
        """A plain heartbeat the heartbeat listener's protocol read whole, past ASGI
        (``heartbeat_protocol.DirectHeartbeats``, on the listener's loop): ``heartbeat_answer``'s work and answers,
        with no task, scope or coroutine (``heartbeat_flight.py``)."""
        peer = client[0] if client else None
        flight = HeartbeatFlight(self, peer, answering.arrived, answering.arrived_cpu, answering.route_answer)
        try:
            if self.security.authentication:
                secret = header_value(headers, _SECRET_HEADER)
                self.security.authenticate_node({NODE_SECRET_HEADER: secret}, peer)
            self.store.check_writable()
        except Exception as error:
            flight.fail(error)
            return
        flight.begin(body, self._listener_reports, self.shards is not None, headers, server)

    @property
    def heartbeat_threads(self) -> ThreadPoolExecutor | None:
        """Threads for heartbeats that publish a stale tree first (from ``start`` to ``stop``; None: the loop's
        default executor's, a test client's)."""
        return self._heartbeat_threads

    def enter_heartbeat(self, heartbeat: HeartbeatRequest, queued: float = 0.0) -> str | None:
        """Count a heartbeat in flight (``throttle.py``; ``queued``: seconds it waited for its handler); the limit
        it is over, if any. ``leave_heartbeat`` follows."""
        known = self.scheduler.nodes.get(heartbeat.address)
        return self.scheduler.heartbeat_throttle.enter(
            known.last_seen if known is not None else None, self.clock(), queued
        )

    def leave_heartbeat(self) -> None:
        self.scheduler.heartbeat_throttle.leave()

    def heartbeat_error(self, error: BaseException, request_id: str) -> Response:
        """``error`` as the heartbeat route answers it: a ``PooltreeError`` as its YT error, anything else as an
        internal error."""
        if not isinstance(error, PooltreeError):
            error = YtError(f"Internal error while processing the heartbeat: {type(error).__name__}: {error}")
        return self._api.error_response(error, request_id)

    def render_error(self, error: BaseException, request_id: str) -> tuple[int, dict[str, str], bytes]:
        """``error`` as the heartbeat route answers it (status, ``X-YT-*`` headers, body), for a node shard."""
        response = self.heartbeat_error(error, request_id)
        headers = {k: v for k, v in response.headers.items() if k.lower().startswith("x-yt-")}
        return response.status_code, headers, bytes(response.body)

    def answer_heartbeat(
        self, heartbeat: HeartbeatRequest, peer: str | None, throttled: bool, hostname: str | None = None
    ) -> dict[str, Any]:
        """One authenticated node heartbeat (on a worker thread, counted in flight by the caller): the node's
        address stays bound to its host, the scheduler processes it, and with node shards the answer names the
        node's shard (``wire.HEARTBEAT_URL``). The HTTP route and the node shards' requests both come here."""
        began = time.perf_counter()
        try:
            response, ticket = self.answer_heartbeat_unwaited(heartbeat, peer, throttled, hostname)
            self.scheduler.commits.wait(ticket)
        finally:
            self.scheduler.record_duration("heartbeat", time.perf_counter() - began)
        return response

    def answer_heartbeat_unwaited(
        self,
        heartbeat: HeartbeatRequest,
        peer: str | None,
        throttled: bool,
        hostname: str | None = None,
        then: Then | None = None,
    ) -> tuple[dict[str, Any], int]:
        """``answer_heartbeat`` without its wait for the store: (the answer, the group commit ticket its job
        records go in). The caller waits for the ticket (``scheduler.commits.wait``) before the answer leaves and
        accounts the heartbeat's duration (the node shards' leader, ``shards/host.py``); ``then`` is called with
        the answer under the scheduling lock, in the hold that made it (``LiveJobs.process_heartbeat_unwaited``)."""
        self.store.check_writable()
        self.security.bind_node(heartbeat.address, peer)
        response, ticket = self.scheduler.process_heartbeat_unwaited(
            heartbeat, self.clock(), throttled=throttled, then=then
        )
        self.name_shard(response, heartbeat.address, hostname)
        return response, ticket

    def name_shard(self, response: dict[str, Any], address: str, hostname: str | None) -> None:
        """With node shards, the answer names the node's shard (``wire.HEARTBEAT_URL``); without, an answer on the
        API's port (``hostname`` given) names the heartbeat listener when there is one."""
        if self.shards is not None:
            url = self.shards.url_for(address, hostname)
            if url is not None:
                response[wire.HEARTBEAT_URL] = url
        elif hostname is not None and self.heartbeat_port is not None:
            response[wire.HEARTBEAT_URL] = url_for(hostname, self.heartbeat_port)

    async def _file_blob(self, request: Request) -> Response:
        """A blob of a running operation's files, for the node that starts its jobs (node/files.py)."""
        request_id = new_request_id()
        try:
            peer = request.client.host if request.client is not None else None
            self.security.authenticate_node(request.headers, peer)  # nodes only, with the node secret
            data = await run_in_threadpool(self.app.state.files.job_blob, request.path_params["blob_id"])
            return Response(data, media_type="application/octet-stream")
        except PooltreeError as error:
            return self._api.error_response(error, request_id)

    async def _job_stderr(self, request: Request) -> Response:
        """A finished job's whole stderr (cut as YTsaurus cuts it) from its node, for ``get_job_stderr``."""
        request_id = new_request_id()
        try:
            peer = request.client.host if request.client is not None else None
            self.security.authenticate_node(request.headers, peer)  # nodes only, with the node secret
            body = await read_body(request, MAX_STDERR_UPLOAD_BYTES, "Job stderr upload")  # bounded in time
            await run_in_threadpool(
                self.commands.jobs.store_stderr,
                request.path_params["operation_id"],
                request.path_params["job_id"],
                body,
            )
            return Response(b"", status_code=200)
        except PooltreeError as error:
            return self._api.error_response(error, request_id)

    def _timed_update(self, tree: str, now: float) -> None:
        """The periodic fair-share update of ``tree`` (on a worker thread): its wall time accounted under
        ``fair_share_update``, and a long one kept with its thread's CPU (the rest waited: the lock, the
        interpreter)."""
        began, cpu = time.perf_counter(), time.thread_time()
        try:
            self.scheduler.update_fair_share(tree, now)
        finally:
            seconds = time.perf_counter() - began
            self.scheduler.record_duration("fair_share_update", seconds)
            cpu_ms = 1000 * (time.thread_time() - cpu)
            self.update_stalls.note(seconds, f"{tree}: {cpu_ms:.1f} ms of CPU")

    async def _metrics(self, request: Request) -> Response:
        try:
            self.security.authenticate_metrics(request.headers)
        except PooltreeError as error:
            return self._api.error_response(error, new_request_id())
        data = await run_in_threadpool(render, self.metrics)
        return Response(data, media_type=CONTENT_TYPE)

    async def _heartbeat_tail(self, request: Request) -> Response:
        """The slow heartbeats' phases and the stalls beside them (``live/tail.py``), read as ``/metrics`` is;
        ``?since=T`` (wall-clock seconds): only those that ended after T."""
        try:
            self.security.authenticate_metrics(request.headers)
            since = float(request.query_params.get("since", "0"))
        except PooltreeError as error:
            return self._api.error_response(error, new_request_id())
        except ValueError:
            return self._api.error_response(YtError("since must be seconds"), new_request_id())
        scheduler, store_commits = self.scheduler, getattr(self.store, "long_commits", None)
        stalls = {
            "lock_holds": scheduler.lock.long_holds.since(since),
            "commit_batches": scheduler.commits.long_batches.since(since),
            "store_commits": store_commits.since(since) if store_commits is not None else [],
            "gc": GC.long_pauses.since(since),
            "fair_share_updates": self.update_stalls.since(since),
        }
        report = self.tail.report(stalls, since)
        if TRACE.enabled:
            report["trace"] = TRACE.report(since)
        return Response(wire.encode(report), media_type="application/json")

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Create the default tree if asked, revive operations from the store, start the background loops."""
        if self.started:
            return
        self.started = True
        if self._heartbeat_threads is None:
            self._heartbeat_threads = ThreadPoolExecutor(HEARTBEAT_THREADS, thread_name_prefix="heartbeat")
        if self.create_default_tree:
            await run_in_threadpool(self._create_default_tree)
        now = self.clock()
        revived = await run_in_threadpool(self.scheduler.revive, now)
        if revived:
            log.info("revived %d operations", len(revived))
        for tree in list(self.scheduler.cores):
            await run_in_threadpool(self.scheduler.update_fair_share, tree, now)
        GC.install()
        if self.tune_gc:
            GC.settle()  # the revived operations are frozen before the first request is served
        self.forecasts.start()
        if self.node_shards > 1 or self.shard_starts:
            settings = ShardSettings(
                self.shard_host,
                self.security.authentication,
                self.security.node_secret,
                self.security.node_networks,
                self._api.host,
                leader_clock=self.clock is not time.time,
            )
            starts = (
                ProcessShardStarts(self.scheduler, self.node_shards) if self.shard_starts else None
            )  # installed as the scheduler's tree_pass
            self.shards = await run_in_threadpool(NodeShards, self.node_shards, settings, self, starts)
        self._tasks = [
            asyncio.create_task(self._fair_share_loop(), name="fair-share"),
            asyncio.create_task(self._sweep_loop(), name="node-sweep"),
        ]

    async def stop(self) -> None:
        """Stop the background loops (state is already in the store)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if self.shards is not None:
            shards, self.shards = self.shards, None
            await run_in_threadpool(shards.close)
        await run_in_threadpool(self.forecasts.stop)
        if self._heartbeat_threads is not None:
            threads, self._heartbeat_threads = self._heartbeat_threads, None
            threads.shutdown(wait=False)
        self.scheduler.commits.close()
        if self.started:
            GC.uninstall()
        self.started = False

    async def _fair_share_loop(self) -> None:
        while True:
            GC.tick()
            now = self.clock()
            for tree in list(self.scheduler.cores):
                try:
                    period = self.scheduler.fair_share_update_period(tree)
                    if self.scheduler.needs_update(tree, now, period):
                        await run_in_threadpool(self._timed_update, tree, now)
                except PooltreeError as error:
                    log.warning("fair-share update of tree %s failed: %s", tree, error.message)
                except KeyError:
                    continue
                # a bug in one update must not end every later one (the loop task would die)
                except Exception:
                    log.exception("fair-share update of tree %s failed unexpectedly", tree)
            if self.scheduler.snapshots.due(self.scheduler.update_period):  # a change no update published
                try:
                    await run_in_threadpool(self.scheduler.snapshots.publish)
                except Exception:
                    log.exception("publishing the read snapshot failed unexpectedly")
            if self.scheduler.updates.unfinished:  # lists a stale publish left, in short holds of the lock
                try:
                    await run_in_threadpool(self.scheduler.updates.finish_unfinished)
                except Exception:
                    log.exception("configuring the preemptible lists a publish left failed unexpectedly")
            await asyncio.sleep(min(LOOP_TICK, self.scheduler.update_period))

    async def _sweep_loop(self) -> None:
        period = min(1.0, max(self.scheduler.node_heartbeat_timeout / 4, LOOP_TICK))
        while True:
            await asyncio.sleep(period)
            gone = await run_in_threadpool(self.scheduler.sweep_nodes, self.clock())
            if gone:
                log.warning("nodes timed out: %s", ", ".join(gone))
                for address in gone:
                    self.security.forget_node(address)


async def serve(
    store_url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    node_secret: str | None = None,
    authentication: bool = True,
    node_networks: Sequence[Any] | None = None,
    metrics_public: bool = False,
    create_default_tree: bool = False,
    node_heartbeat_timeout: float = 60.0,
    heartbeat_period: float = 1.0,
    alert_settings: AlertSettings | None = None,
    fair_share_update_period: float = 1.0,
    on_ready: Callable[[str], None] | None = None,
    on_role: Callable[[str], None] | None = None,
    prepare_store: Callable[[Store], None] | None = None,
    stop: asyncio.Event | None = None,
    forecast_settings: WorkerSettings | None = None,
    store_key_file: Path | None = None,
    node_shards: int = 1,
    default_tentative_pool_trees: Sequence[str] = (),
    shard_starts: bool = False,
    heartbeat_port: int | None = None,
    read_process: bool = False,
) -> None:
    """Run a scheduler on ``store_url`` until ``stop`` is set (or the task is cancelled); closes everything.

    Leadership, standby and the store watch are ``pooltree.server.leader.SchedulerRunner``'s: ``on_ready(url)`` is
    called once HTTP is served (after revival when this process leads at once, right away for a standby);
    ``on_role(text)`` on every change of role (``leader``, ``standby: ...``, ``recovering: ...``).
    ``prepare_store(store)`` runs once this process holds the leader lock, before the service is built (``--config``).
    ``heartbeat_period`` is the period every node is told to heartbeat at when it has nothing to report.
    ``store_key_file`` seals the store's secrets (``SchedulerRunner``). ``node_shards`` > 1 runs that many node
    shard processes on ``host`` while this process leads (``pooltree.shards``). ``heartbeat_port`` (0: a free
    port; None: none) takes node heartbeats on a listener and event loop of their own (``heartbeat_listener.py``).
    ``read_process``: a read process of its own owns the API port (``pooltree/reads``).
    """
    check_period(heartbeat_period, "heartbeat_period")
    if not authentication and not is_loopback(host):
        raise PooltreeError(
            f"refusing to serve {host} without authentication: anyone reaching it would be root"
        )
    tune_gc = tuning_enabled()
    sys.setswitchinterval(switch_interval())

    def factory(store: Store) -> SchedulerService:
        if prepare_store is not None:
            prepare_store(store)
        return SchedulerService(
            store,
            token=token,
            node_secret=node_secret,
            authentication=authentication,
            node_networks=node_networks,
            metrics_public=metrics_public,
            create_default_tree=create_default_tree,
            node_heartbeat_timeout=node_heartbeat_timeout,
            heartbeat_period=heartbeat_period,
            alert_settings=alert_settings,
            fair_share_update_period=fair_share_update_period,
            tune_gc=tune_gc,
            forecast_settings=forecast_settings,
            node_shards=node_shards,
            shard_starts=shard_starts,
            shard_host=host,
            default_tentative_pool_trees=default_tentative_pool_trees,
        )

    runner = SchedulerRunner(
        store_url,
        host=host,
        port=port,
        service_factory=factory,
        on_ready=on_ready,
        on_role=on_role,
        store_key_file=store_key_file,
        operator_check=bootstrap_operator_check(token, node_secret, authentication=authentication),
        heartbeat_port=heartbeat_port,
        read_process=read_process,
    )
    await runner.run(stop)
