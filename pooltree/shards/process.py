"""One node shard process: an HTTP listener for its nodes' heartbeats, the leader at the end of a pipe.

``run_shard(conn, index, settings)`` is the process's body (spawned by ``host.NodeShards``). It binds a port on
``settings.host``, sends ``("ready", port)`` and serves ``POST /internal/node_heartbeat`` under uvicorn (httptools
and uvloop when installed, as the scheduler) with the leader's heartbeat listener's protocol
(``server/heartbeat_protocol.py``: plain node heartbeats answered past uvicorn's per-request machinery and past
ASGI, ``ShardServer.direct_heartbeat``, the leader's reply taken by a callback from the pipe with no task or future;
anything else by uvicorn's, through ``ShardApp``'s ASGI route). Per heartbeat it does the work that does not need
the scheduler's state: the node secret and network check (``check_node_credentials``, the leader's own;
unauthenticated heartbeats are answered here and never reach the leader), the bounded body read and the node's address
with whether it reports a finished job (``messages.heartbeat_head``; a body without an address is decoded here,
``decode_heartbeat``, and refused). A heartbeat of a node the leader proved empty after its previous one that
reports no finished job is decoded and, when it is the proven one, answered here (``verdicts.ShardNodes``: nothing to do, while the leader's state generation holds). Any other goes
over the pipe as ``(request id, body, peer, hostname, notes)`` (``messages.py``: the leader decodes the body, and
refuses a malformed one with the error this process would have answered; the notes of the heartbeats answered here
since the last forwarded one); the leader's answer comes back as ``(request id, 200, answer, proof or None,
leader's clock)``, the answer being the JSON body the node gets, sent on as it is, and the proof as a shard keeps
it (``verdicts.proven``: the key of the node's expected next heartbeat made by the leader, so neither the body nor
the answer is decoded here), or ``(request id, status, headers, body)``: a YT error the leader rendered; answers
one commit of the leader's store settled together come as one ``("replies", [reply, ...])``, in order. A
heartbeat is decoded here only when its node's verdict holds at the latest generation (``ShardNodes.holds``) and it
reports no finished job. The
leader also sends ``("generation", g, clock, coarse, stamps)`` when its state moves and ``("sync", token, g,
clock, coarse, stamps)``, answered ``("synced", token)``; notes not carried by a heartbeat go as ``("skips",
notes)`` every ``SKIP_FLUSH_PERIOD``. The pipe is read and written on the event loop (``pipe.LoopPipe``: no reader
thread), which hands the waiting requests their replies and takes the leader's other messages; end-of-file on the
pipe (the leader died or closed the shard) ends the process at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pooltree.errors import PooltreeError
from pooltree.gc_policy import survivors_frozen
from pooltree.node import wire
from pooltree.security.guard import NODE_SECRET_HEADER, check_node_credentials
from pooltree.server.app import error_response, new_request_id
from pooltree.server.heartbeat_listener import LISTEN_BACKLOG, listener_settings, open_files_for_nodes
from pooltree.server.heartbeat_protocol import (
    Answering,
    DirectHeartbeats,
    HeartbeatProtocol,
    RawHeaders,
    header_value,
    hostname_of,
)
from pooltree.server.heartbeats import (
    HeartbeatRoute,
    RunningReports,
    decode_heartbeat,
    read_heartbeat_body,
)
from pooltree.server.protocol import YtError
from pooltree.shards.messages import heartbeat_head, pack
from pooltree.shards.passes import serve_passes
from pooltree.shards.pipe import LoopPipe
from pooltree.shards.verdicts import SKIP_FLUSH_PERIOD, ShardNodes

try:
    import uvloop
except ImportError:  # the scheduler's dependency; a plain asyncio loop without it
    uvloop = None

log = logging.getLogger(__name__)

HEARTBEAT_PATH = wire.HEARTBEAT_PATH


_SECRET_HEADER = NODE_SECRET_HEADER.lower().encode("latin-1")


def request_hostname(scope: dict[str, Any]) -> str | None:
    """Starlette's ``Request(scope).url.hostname`` (the host the node reached this shard at: its Host header, else
    the server's address) without building the request's whole URL, which cost this process 5% of its CPU per
    heartbeat (``heartbeat_protocol.hostname_of``)."""
    return hostname_of(scope["headers"], scope.get("server"), scope.get("scheme", "http"))


class LeaderGone(YtError):
    """The pipe to the leader is broken: answered 503, and the node goes back to its scheduler list."""

    http_status = 503


@dataclass(frozen=True)
class ShardSettings:
    """What a shard process needs to know (pickled to it at spawn; the secret never leaves memory)."""

    host: str
    """Address the shard listens on (the scheduler's own)."""
    authentication: bool
    node_secret: str | None
    node_networks: Any
    """Networks nodes may heartbeat from (``ipaddress`` networks), None: any."""
    proxy: str
    """The scheduler's name in errors' ``X-YT-Proxy``."""
    leader_clock: bool = False
    """The leader's clock is not the wall clock (a test's): the time of a heartbeat answered here is the leader's
    time as its latest message gave it (a test syncs the shards before each heartbeat), not this process's."""


class ShardApp:
    """The shard's ASGI app (``route``) with its way past ASGI for the plain heartbeats its listener's protocol
    takes (``direct_heartbeat``: ``heartbeat_protocol.DirectHeartbeats``)."""

    def __init__(self, route: HeartbeatRoute, direct: DirectHeartbeats) -> None:
        self.route = route
        self.direct_heartbeat = direct

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.route(scope, receive, send)


class ShardServer:
    """The shard's heartbeat endpoint and its requests waiting for the leader."""

    def __init__(self, conn: Connection, settings: ShardSettings) -> None:
        self.conn = conn
        self.settings = settings
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pipe: LoopPipe | None = None
        """The pipe to the leader on the loop (``attach``)."""
        self._waiting: dict[int, Callable[[tuple[Any, ...]], None]] = {}
        """Per forwarded heartbeat waiting for the leader (by request id), what takes the leader's reply."""
        self.reports = RunningReports()
        """This shard's nodes' last running-job reports (unchanged ones are not read again)."""
        self.asgi = ShardApp(
            HeartbeatRoute(
                self.answer, Starlette(routes=[Route(HEARTBEAT_PATH, self.heartbeat, methods=["POST"])])
            ),
            self.direct_heartbeat,
        )
        """The shard's ASGI app: heartbeats straight to ``answer``, anything else to Starlette (404/405); the
        plain heartbeats its listener's protocol takes to ``direct_heartbeat``."""
        self._serial = 0
        self.nodes = ShardNodes()
        """The leader's proofs of this shard's nodes' next heartbeats, and notes of those answered here."""
        self._leader_time: float | None = None
        """The leader's clock at its latest message (``leader_now``)."""

    def attach(self, loop: asyncio.AbstractEventLoop, ended: Callable[[], None]) -> None:
        """Serve on ``loop`` (the running one): the leader's messages are read there; ``ended`` is called when
        the pipe ends (the process then ends: nothing here outlives the leader)."""
        self.loop = loop
        self.pipe = LoopPipe(self.conn, loop, self._resolve, ended)

    def leader_now(self) -> float | None:
        """The leader's clock now (None before its first message): the wall clock, as the leader's, unless
        ``settings.leader_clock``."""
        if self._leader_time is None:
            return None
        return self._leader_time if self.settings.leader_clock else time.time()

    def learn(
        self,
        generation: int,
        leader_now: float,
        coarse: int = 0,
        stamps: list[tuple[str, int]] | tuple[()] = (),
    ) -> None:
        """The leader's state generation and clock (from a push, a sync or an answer), with its ``coarse``
        counter and the stamps of this shard's nodes that moved (a push or a sync)."""
        self.nodes.learn(generation, coarse, stamps)
        self._leader_time = leader_now

    async def heartbeat(self, request: Request) -> Response:
        """``answer`` as a Starlette endpoint (the route that answers other methods 405)."""
        answer = await self.answer(request.scope, request.receive)
        return answer if isinstance(answer, Response) else Response(answer, media_type=wire.MEDIA_TYPE)

    async def answer(self, scope: dict[str, Any], receive: Any) -> bytes | Response:
        """One heartbeat request (``heartbeats.HeartbeatRoute``: the requests the listener's protocol hands to
        uvicorn's): the answer's body (200, JSON) or an error's response."""
        try:
            client = scope.get("client")
            peer = client[0] if client else None
            if self.settings.authentication:
                self._check(Headers(scope=scope).get(NODE_SECRET_HEADER, ""), peer)
            body = await read_heartbeat_body(scope, receive)
            local, address = self._arrived(body, peer)
            if local is not None:
                return local
            reply = await self._ask((pack(body), peer, request_hostname(scope), self.nodes.take_skips()))
        except PooltreeError as error:
            return self._refused(error)
        except (OSError, ValueError, EOFError) as error:  # the pipe to the leader is broken
            return self._lost(error)
        return self._replied(reply, address, peer)

    def direct_heartbeat(
        self,
        headers: RawHeaders,
        body: bytes,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        answering: Answering,
    ) -> None:
        """A plain heartbeat past ASGI (``heartbeat_protocol.DirectHeartbeats``): ``answer``'s work and answers,
        the leader's reply taken from the pipe by a callback (no task, no future, no scope)."""
        peer = client[0] if client else None
        result: bytes | Response
        try:
            if self.settings.authentication:
                self._check(header_value(headers, _SECRET_HEADER), peer)
            local, address = self._arrived(body, peer)
            if local is None:
                payload = (pack(body), peer, hostname_of(headers, server), self.nodes.take_skips())
                self._forward(payload, partial(self._forwarded, answering, address, peer))
                return
            result = local
        except PooltreeError as error:
            result = self._refused(error)
        except (OSError, ValueError, EOFError) as error:  # the pipe to the leader is broken
            result = self._lost(error)
        answering.route_answer(result)

    def _forwarded(
        self, answering: Answering, address: str, peer: str | None, reply: tuple[Any, ...]
    ) -> None:
        """The leader's reply to a heartbeat ``direct_heartbeat`` forwarded."""
        try:
            result = self._replied(reply, address, peer)
        except Exception as error:
            answering.fail(error)
            return
        answering.route_answer(result)

    def _check(self, secret: str, peer: str | None) -> None:
        """The node secret and network check (a YT error when the node may not heartbeat here)."""
        settings = self.settings
        check_node_credentials(secret, peer, settings.node_secret, settings.node_networks)

    def _arrived(self, body: bytes, peer: str | None) -> tuple[bytes | None, str]:
        """A heartbeat's body: (its answer when answered here, else None; the node's address). Decoded only when
        the node's verdict holds and the body reports no finished job (``ShardNodes.answer`` answers none that
        does), or to refuse it (a YT error) when it has no address."""
        address, finished = heartbeat_head(body)
        # one it may answer (its verdict holds, no finished job), or not a heartbeat at all
        if address is None or (not finished and self.nodes.holds(address, peer)):
            heartbeat = decode_heartbeat(body, self.reports)  # a malformed one refused here
            address = heartbeat.address
            now = self.leader_now()
            local = self.nodes.answer(heartbeat, peer, now) if now is not None else None
            if local is not None:
                return wire.encode(local), address
        return None, address

    def _replied(self, reply: tuple[Any, ...], address: str, peer: str | None) -> bytes | Response:
        """The leader's reply to a forwarded heartbeat of ``address``: the answer's body (its proof kept), or the
        YT error it rendered."""
        if reply[1] == 200:
            _, _, answer, proof, leader_now = reply
            self._leader_time = leader_now
            self.nodes.remember(address, peer, proof)
            return answer  # type: ignore[no-any-return]
        _, status, headers, content = reply
        return Response(content, status_code=status, media_type="application/json", headers=headers)

    def _refused(self, error: PooltreeError) -> Response:
        return error_response(error, new_request_id(), self.settings.proxy, time.time())

    def _lost(self, error: BaseException) -> Response:
        return self._refused(LeaderGone(f"Node shard lost its scheduler: {error}"))

    def _forward(self, payload: tuple[Any, ...], then: Callable[[tuple[Any, ...]], None]) -> int:
        """``payload`` to the leader under a new request id (returned); ``then`` takes the leader's reply."""
        assert self.pipe is not None
        self._serial += 1
        request_id = self._serial
        self._waiting[request_id] = then
        try:
            self.pipe.send((request_id, *payload))
        except BaseException:
            self._waiting.pop(request_id, None)
            raise
        return request_id

    async def _ask(self, payload: tuple[Any, ...]) -> tuple[Any, ...]:
        assert self.loop is not None
        future: asyncio.Future[tuple[Any, ...]] = self.loop.create_future()

        def then(reply: tuple[Any, ...]) -> None:
            if not future.done():
                future.set_result(reply)

        request_id = self._forward(payload, then)
        try:
            return await future
        finally:
            self._waiting.pop(request_id, None)

    def _resolve(self, reply: tuple[Any, ...]) -> None:
        kind = reply[0]
        if kind == "replies":  # the leader's answers a commit settled together, in order
            for each in reply[1]:
                self._resolve(each)
            return
        if kind == "generation":
            self.learn(reply[1], reply[2], reply[3], reply[4])
            return
        if kind == "sync":
            self.learn(reply[2], reply[3], reply[4], reply[5])
            self._send_quietly(("synced", reply[1]))
            return
        then = self._waiting.pop(kind, None)
        if then is not None:
            then(reply)

    def _send_quietly(self, message: tuple[Any, ...]) -> None:
        """A message to the leader from the loop; a broken pipe ends the process when the loop reads its end."""
        assert self.pipe is not None
        with contextlib.suppress(OSError, ValueError):
            self.pipe.send(message)

    async def flush_skips(self) -> None:
        """Every ``SKIP_FLUSH_PERIOD``, the notes no forwarded heartbeat carried (the leader's node sweep)."""
        while True:
            await asyncio.sleep(SKIP_FLUSH_PERIOD)
            skips = self.nodes.take_skips()
            if skips:
                self._send_quietly(("skips", skips))


def run_shard(
    conn: Connection, index: int, settings: ShardSettings, passes: Connection | None = None
) -> None:
    """The body of shard process ``index``: listen, report the port, serve until the leader's pipe ends; with
    ``passes``, run its nodes' heartbeat passes asked on that pipe (``passes.serve_passes``, a thread)."""
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s shard-{index} %(levelname)s %(message)s")
    open_files_for_nodes()  # a descriptor per node's heartbeat connection
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, 0))
    sock.listen(LISTEN_BACKLOG)
    server = ShardServer(conn, settings)
    config = uvicorn.Config(
        server.asgi,
        interface="asgi3",
        log_level="warning",
        lifespan="off",
        access_log=False,
        loop="auto",
        proxy_headers=False,  # a node's host is its connection's, never an X-Forwarded-For header's
        # plain heartbeats past uvicorn's request machinery (the leader's heartbeat listener's protocol), anything
        # else by uvicorn's with a deadline for request headers (``server/heartbeat_protocol.py``)
        http=HeartbeatProtocol,
    )
    listener_settings(config)  # idle connections kept past the nodes' keep-alive, a deep accept queue
    uvicorn_server = uvicorn.Server(config)

    async def main() -> None:
        server.attach(asyncio.get_running_loop(), lambda: os._exit(0))
        if passes is not None:
            threading.Thread(target=serve_passes, args=(passes,), name="passes", daemon=True).start()
        assert server.pipe is not None
        server.pipe.send(("ready", sock.getsockname()[1]))
        flusher = asyncio.create_task(server.flush_skips(), name="flush-skips")
        try:
            await uvicorn_server.serve(sockets=[sock])
        finally:
            flusher.cancel()

    # the process's gc policy (`pooltree/gc_policy.py`): a replica is long-lived objects, and each full
    # collection's survivors are frozen, so later ones walk only what came since (not the whole replica)
    with survivors_frozen():
        if uvloop is not None:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(main())
        else:
            asyncio.run(main())
    os._exit(0)
