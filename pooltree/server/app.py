"""The ASGI app: ``/api/v4`` discovery and commands from one ``CommandRegistry``, YT errors, auth, mutation ids.

Every command is authenticated (``pooltree.security.Security.authenticate``: the token's owner is the user) and
authorized once (``Security.authorize``) before its handler runs; only discovery (``/api``, ``/api/v4``, ``/hosts``)
is open.

Run it with uvicorn: ``uvicorn.run(create_app(open_store("sqlite:///state.db")), host="127.0.0.1", port=...)``.
Later layers add commands (``start_operation``, ...) with ``registry.register`` and never touch the routing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import json
import logging
import os
import secrets
import socket
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Match, Route

from pooltree.errors import PooltreeError
from pooltree.security import Security
from pooltree.security.guard import subject_path, subjects_get
from pooltree.security.policy import ROUTE_RULES, RouteRule, no_rule_error
from pooltree.security.throttle import REQUEST_RATE_LIMIT_EXCEEDED
from pooltree.server.access import ServiceResolver
from pooltree.server.batch import register_batch_command, register_unsupported_commands, unsupported_command
from pooltree.server.commands import (
    CommandContext,
    CommandDescriptor,
    CommandProvider,
    CommandRegistry,
    Deferred,
    Encoded,
    Handler,
    output_format,
)
from pooltree.server.cypress import Cypress, OrchidProvider, Validator
from pooltree.server.files import FileService
from pooltree.server.http_protocol import BODY_WHOLE
from pooltree.server.mutations_in_flight import MutationsInFlight
from pooltree.server.pool_transfer import parse_delta
from pooltree.server.pool_transfer import transfer_pool_resources as apply_transfer
from pooltree.server.protocol import (
    AUTHENTICATION_ERROR,
    MAX_DECOMPRESSED_BYTES,
    BodyDecoder,
    BodyTimeout,
    ClientGone,
    Format,
    PayloadTooLarge,
    YtError,
    content_type_format,
    decode_parameters,
    encode_structured,
    error_json,
    error_to_dict,
    header_text,
    parameter_error,
    parse_format,
    parse_structured,
)
from pooltree.server.store import STORE_UNAVAILABLE, Store
from pooltree.server.store.base import mutation_key
from pooltree.ypath import parse_ypath

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
BODY_IDLE_TIMEOUT = 30.0
"""Seconds a request body may pause between pieces before it is answered 408."""
BODY_TOTAL_TIMEOUT = 600.0
"""Seconds a whole request body may take (64 MiB at ~110 KiB/s)."""
DRAIN_TIMEOUT = 5.0
"""Seconds ``DrainUnreadBody`` reads an unread body for before it answers anyway."""
MUTATION_TTL = 3600.0
"""Seconds a mutation id is remembered (client retries end within 2 minutes)."""
MUTATION_PRUNE_PERIOD = 60.0


COMMAND_THREADS = 2
"""Commands (those not answered on the event loop) that run on worker threads at once, for reads and for changes
each (two queues): the others wait their turn in order. Every runnable thread competes for the GIL with the event
loop, which answers cached reads itself: with dozens of commands in threads at once the loop waited dozens of
switch intervals for its turn. Reads have their own threads so that they never queue behind changes waiting for
the scheduling lock (a start blocks on it while a fair-share update or heartbeats hold it; ``list_operations`` and
stored operations need no lock). Heartbeats and fair-share updates have threads of their own (Starlette's pool).
``POOLTREE_COMMAND_THREADS`` overrides it."""


def command_executor(changes: bool) -> ThreadPoolExecutor:
    """The ``command_threads()`` worker threads of reads (``changes`` False) or of changes."""
    return ThreadPoolExecutor(command_threads(), thread_name_prefix="changes" if changes else "reads")


def command_threads() -> int:
    """``POOLTREE_COMMAND_THREADS`` when it is an integer in [1, 256], else ``COMMAND_THREADS``."""
    raw = os.environ.get("POOLTREE_COMMAND_THREADS", "")
    if raw.strip().isdigit() and 1 <= int(raw) <= 256:
        return int(raw)
    if raw:
        log.warning(
            "POOLTREE_COMMAND_THREADS=%r is not an integer in [1, 256]; using %d", raw, COMMAND_THREADS
        )
    return COMMAND_THREADS


YIELD_TO_CHEAPER = 0.03
"""Seconds a fast path that yields (``CommandRegistry.register(fast_yields=True)``: ``list_operations``) lets the
cheaper fast reads waiting on the event loop go first (``YtApi.after_cheaper_reads``). Beside 1,000 nodes and 50
clients (``live_queue``) the loop is the clients' queue; a page of 100 costs it several ``get_operation``
answers, and a get waited behind every listing ahead of it (session 29: p99 112-270 ms). Listings' target is
looser (200 ms against 50)."""


_REQUEST_IDS = itertools.count(secrets.randbits(63))


def new_request_id() -> str:
    """A request id for ``X-YT-Request-Id`` and logs: 16 hex digits, a per-process random start plus a counter
    (``secrets.token_hex`` asks the kernel for randomness on every request, a measurable cost under load)."""
    return f"{next(_REQUEST_IDS) & 0xFFFFFFFFFFFFFFFF:016x}"


def _subject(path: str | None) -> tuple[str, str | None, tuple[str, ...] | None] | None:
    """``(kind, name, attribute)`` when ``path`` is under ``//sys/users`` or ``//sys/groups``, else None."""
    if path is None:
        return None
    ypath = parse_ypath(path)
    found = subject_path(ypath.tokens) if ypath.object_id is None else None
    return None if found is None else (found[0], found[1], ypath.attribute)


class CypressCommands:
    """``get``, ``list``, ``exists``, ``set``, ``create``, ``remove``, ``move`` and ``transfer_pool_resources`` with
    the v4 response shapes. Users and groups (``//sys/users``, ``//sys/groups``) are objects of ``security``, not
    Cypress nodes."""

    def __init__(self, cypress: Cypress, security: Security | None) -> None:
        self.cypress = cypress
        self.security = security

    def _subject(self, ctx: CommandContext) -> tuple[str, str | None, tuple[str, ...] | None] | None:
        """The user or group ``path`` names (``_subject``), when there is a ``security`` to ask."""
        return _subject(ctx.str_param("path")) if self.security is not None else None

    @staticmethod
    def _only_value(ctx: CommandContext, value: Any) -> Any:
        return value if ctx.bool_param("return_only_value", False) else {"value": value}

    def get(self, ctx: CommandContext) -> Any:
        subject = self._subject(ctx)
        if subject is not None:
            assert self.security is not None
            return self._only_value(ctx, subjects_get(self.security, *subject))
        value = self.cypress.get(ctx.str_param("path"), attributes=ctx.list_param("attributes"))
        return self._only_value(ctx, value)

    def list_(self, ctx: CommandContext) -> Any:
        subject = self._subject(ctx)
        if subject is not None:
            assert self.security is not None
            return self._only_value(ctx, subjects_get(self.security, *subject, listing=True))
        value = self.cypress.list(
            ctx.str_param("path"),
            attributes=ctx.list_param("attributes"),
            max_size=ctx.int_param("max_size", None),
        )
        return self._only_value(ctx, value)

    def exists(self, ctx: CommandContext) -> Any:
        subject = self._subject(ctx)
        if subject is not None:
            assert self.security is not None
            try:
                subjects_get(self.security, *subject)
            except PooltreeError:
                return {"value": False}
            return {"value": True}
        return {"value": self.cypress.exists(ctx.str_param("path"))}

    def set_(self, ctx: CommandContext) -> None:
        self.cypress.set(
            ctx.str_param("path"),
            ctx.input,
            recursive=ctx.bool_param("recursive"),
            force=ctx.bool_param("force"),
        )

    def create(self, ctx: CommandContext) -> Any:
        path = ctx.str_param("path", None)
        attributes = ctx.param("attributes", None)
        if attributes is not None and not isinstance(attributes, dict):
            raise parameter_error("attributes", "expected a map")
        if self.security is not None and ctx.param("type", None) in ("user", "group") and path is None:
            return {"object_id": self.security.create_subject(ctx.user, ctx.str_param("type"), attributes)}
        object_id = self.cypress.create(
            ctx.str_param("type"),
            path,
            attributes=attributes,
            recursive=ctx.bool_param("recursive"),
            ignore_existing=ctx.bool_param("ignore_existing"),
            force=ctx.bool_param("force"),
        )
        return {"node_id": object_id} if path is not None else {"object_id": object_id}

    def remove(self, ctx: CommandContext) -> None:
        subject = self._subject(ctx)
        if subject is not None and subject[1] is not None and subject[2] is None:
            assert self.security is not None
            self.security.remove_subject(ctx.user, subject[0], subject[1])
            return
        self.cypress.remove(
            ctx.str_param("path"), recursive=ctx.bool_param("recursive"), force=ctx.bool_param("force")
        )

    def move(self, ctx: CommandContext) -> Any:
        node_id = self.cypress.move(
            ctx.str_param("source_path"),
            ctx.str_param("destination_path"),
            recursive=ctx.bool_param("recursive"),
            force=ctx.bool_param("force"),
        )
        return {"node_id": node_id}

    def transfer_pool_resources(self, ctx: CommandContext) -> None:
        tree, source = ctx.str_param("pool_tree"), ctx.str_param("source_pool")
        destination, delta = ctx.str_param("destination_pool"), parse_delta(ctx.param("resource_delta"))
        self.cypress.mutate(lambda root, _now: apply_transfer(root, tree, source, destination, delta))


def register_cypress_commands(
    registry: CommandRegistry, cypress: Cypress, security: Security | None = None
) -> None:
    """``CypressCommands``' commands."""
    commands = CypressCommands(cypress, security)
    registry.register("move", commands.move, is_volatile=True)
    registry.register(
        "transfer_pool_resources", commands.transfer_pool_resources, output_type="null", is_volatile=True
    )
    registry.register("get", commands.get)
    registry.register("list", commands.list_)
    registry.register("exists", commands.exists)
    registry.register("set", commands.set_, input_type="structured", output_type="null", is_volatile=True)
    registry.register("create", commands.create, is_volatile=True)
    registry.register("remove", commands.remove, output_type="null", is_volatile=True)


AUTH_REALM = "cypress"
"""The realm ``/auth/whoami`` names: pooltree's tokens are checked against its own user directory, as YTsaurus's
Cypress token authenticator checks tokens stored in Cypress (realm ``cypress``)."""


def register_security_commands(registry: CommandRegistry, security: Security) -> None:
    """``whoami``, the authentication commands and the permission checks, served by ``security``.

    ``/auth/whoami`` is the HTTP proxy's answer to "who does this token belong to" (``yt.wrapper``'s
    ``get_user_name()`` asks it): ``{"login": <user>, "realm": ...}``, 401 with the authentication error for a
    missing or invalid token. YTsaurus also returns a ``csrf_token`` there, which only cookie sessions use;
    pooltree authenticates tokens only and leaves it out.
    """
    registry.register("get_current_user", lambda ctx: {"user": ctx.user})
    registry.register_endpoint(
        "/auth/whoami", "auth_whoami", lambda ctx: {"login": ctx.user, "realm": AUTH_REALM}
    )
    for name, handler, volatile, output in (
        ("set_user_password", security.set_user_password, True, "null"),
        ("issue_token", security.issue_token, True, "structured"),
        ("list_user_tokens", security.list_user_tokens, False, "structured"),
        ("revoke_token", security.revoke_token, True, "null"),
        ("add_member", security.add_member, True, "null"),
        ("remove_member", security.remove_member, True, "null"),
        ("check_permission", security.check_permission, False, "structured"),
        ("check_operation_permission", security.check_operation_permission, False, "structured"),
    ):
        registry.register(
            name,
            lambda ctx, handler=handler: handler(ctx.user, ctx.parameters),
            is_volatile=volatile,
            output_type=output,
        )


class RouteGuard:
    """ASGI middleware, deny by default for HTTP routes: a request to a route that has no rule in ``rules``
    (``pooltree.security.policy.ROUTE_RULES``) is refused with error 901, whoever added the route and whenever.
    The routes are looked at again only when the router's list changes (a tuple of ids per request)."""

    def __init__(self, app: Any, router: Any, rules: Mapping[str, RouteRule], host: str) -> None:
        self.app = app
        self.router = router
        self.rules = rules
        self.host = host
        self._seen: tuple[int, ...] = ()
        self._unruled: tuple[Any, ...] = ()

    def unruled(self) -> tuple[Any, ...]:
        """The router's routes that have no rule (logged once when found)."""
        routes = self.router.routes
        key = tuple(map(id, routes))
        if key != self._seen:
            self._unruled = tuple(r for r in routes if getattr(r, "path", None) not in self.rules)
            self._seen = key
            for route in self._unruled:
                log.error("route %s has no authorization rule: it is refused", getattr(route, "path", route))
        return self._unruled

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for route in self.unruled():
                match, _ = route.matches(scope)
                if match != Match.NONE:
                    path = getattr(route, "path", "?")
                    error = PooltreeError(
                        f"Route {path} has no authorization rule, so it is refused",
                        code=901,
                        attributes={"route": path, "permission": "none", "object": f"route {path}"},
                    )
                    text = error_json(error_to_dict(error, host=self.host, now=time.time()))
                    await Response(text, status_code=403, media_type="application/json")(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class DrainUnreadBody:
    """ASGI middleware: before an answer starts, read and drop what is left of the request body (bounded).

    Closing a connection whose request body is still unread makes the kernel reset it, and the client then loses
    the answer already sent: a dropped connection instead of a clear error (an early 400, 404, 405 or 413 while a
    compressed body is still arriving). Bodies declared larger than the path's limit (``limits``, else
    ``MAX_BODY_BYTES``) are not waited for: they are refused as they are and the connection closes.
    """

    def __init__(self, app: Any, limits: dict[str, int]) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        finished = False

        async def tracked_receive() -> Any:
            nonlocal finished
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                finished = True
            return message

        async def drained_send(message: Any) -> None:
            if message["type"] == "http.response.start" and not finished:
                await self._drain(scope, tracked_receive)
            await send(message)

        await self.app(scope, tracked_receive, drained_send)

    async def _drain(self, scope: Any, receive: Any) -> None:
        limit = self.limits.get(scope.get("path", ""), MAX_BODY_BYTES)
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.strip().isdigit() and int(value) > limit:
                return
        size = 0
        with anyio.move_on_after(DRAIN_TIMEOUT):  # a body that stopped arriving is not waited for
            while size <= limit:
                message = await receive()
                if message["type"] != "http.request":
                    return
                size += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return


COMMAND_ROUTE = "/api/v4/{command}"
_COMMAND_PREFIX = "/api/v4/"
_COMMAND_METHODS = frozenset(("GET", "POST", "PUT"))


class DirectCommands:
    """ASGI: ``/api/v4/<command>`` (GET, POST, PUT) straight to ``YtApi.command``, past Starlette's middleware and
    route matching (a dozen routes' patterns tried, ``RouteGuard``'s scan, two exception middlewares: a sizable
    part of a cheap command's cost), with what an early answer leaves of the body drained (``DrainUnreadBody``);
    everything else (HEAD, other paths) to ``app``, the Starlette app of ``create_app``. The answer is the one the
    app gives: no route in front of ``COMMAND_ROUTE`` matches such a path, ``COMMAND_ROUTE`` has its rule (checked
    here), and ``YtApi.command`` turns every exception into a YT error itself."""

    def __init__(self, app: Any) -> None:
        if COMMAND_ROUTE not in ROUTE_RULES:
            raise PooltreeError(f"route {COMMAND_ROUTE} has no authorization rule")
        self.app = app
        self.api: YtApi = app.state.api
        self._drained = DrainUnreadBody(self._answer, app.state.body_limits)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] in _COMMAND_METHODS:
            path: str = scope["path"]
            if path.startswith(_COMMAND_PREFIX) and "/" not in path[len(_COMMAND_PREFIX) :]:
                name = path[len(_COMMAND_PREFIX) :]
                if name:
                    scope["path_params"] = {"command": name}
                    await self._drained(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _answer(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        response = await self.api.command(Request(scope, receive))
        await response(scope, receive, send)


async def read_body(request: Request, limit: int, what: str = "Request body") -> bytes:
    """The request body, refused with 413 once it is over ``limit`` bytes as sent or ``MAX_DECOMPRESSED_BYTES``
    once decoded: a declared ``Content-Length`` over the limit is refused before anything is read, and a
    compressed body is inflated step by step as it arrives, never whole. A body whose next piece does not come
    within ``BODY_IDLE_TIMEOUT`` seconds, or that is not whole after ``BODY_TOTAL_TIMEOUT``, is answered 408 (a
    half-sent request holds no connection for ever); a client that hangs up mid-body raises ``ClientGone``.
    A body the HTTP protocol already holds whole (``http_protocol.BODY_WHOLE``) is read without a timer."""
    headers = request.headers
    encoding = headers.get("content-encoding")
    decoder = BodyDecoder(encoding, min(limit, MAX_DECOMPRESSED_BYTES) if encoding else limit, what)
    declared = headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"{what} is larger than {limit} bytes", attributes={"limit": limit})
    receive = request.receive
    scope = request.scope
    size = 0
    deadline: float | None = None  # set at the first wait (a body held whole never asks the clock)
    while True:
        if scope.get(BODY_WHOLE):
            message = await receive()  # in the protocol's buffer: no wait
        else:
            if deadline is None:
                deadline = anyio.current_time() + BODY_TOTAL_TIMEOUT
            wait = min(BODY_IDLE_TIMEOUT, deadline - anyio.current_time())
            try:
                with anyio.fail_after(max(wait, 0.0)):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout(
                    f"{what} did not arrive: {size} bytes received, then nothing for {wait:.0f} s",
                    attributes={"received_bytes": size, "timeout": round(wait, 3)},
                ) from None
        if message["type"] != "http.request":
            raise ClientGone(f"The client hung up after {size} bytes of the {what.lower()}")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"{what} is larger than {limit} bytes", attributes={"limit": limit})
        if chunk:
            decoder.feed(chunk)
        if not message.get("more_body", False):
            return decoder.finish()


def error_response(error: BaseException, request_id: str, host: str, now: float) -> Response:
    """The HTTP answer carrying ``error`` as a YT error (status by its code; ``X-YT-*`` headers)."""
    body = error_to_dict(error, host=host, now=now)
    status = {AUTHENTICATION_ERROR: 401, STORE_UNAVAILABLE: 503, REQUEST_RATE_LIMIT_EXCEEDED: 429}.get(
        body["code"], getattr(error, "http_status", 400)
    )
    text = error_json(body)
    headers = {
        "X-YT-Error": text,
        "X-YT-Response-Code": str(body["code"]),
        "X-YT-Response-Message": header_text(body["message"]),
        "X-YT-Request-Id": request_id,
        "X-YT-Proxy": host,
    }
    return Response(text, status_code=status, media_type="application/json", headers=headers)


class YtApi:
    """The request pipeline shared by every command."""

    def __init__(
        self,
        store: Store,
        registry: CommandRegistry,
        *,
        security: Security,
        host: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.registry = registry
        self.security = security
        self.host = host
        self.clock = clock
        self._last_prune = float("-inf")
        self._in_flight = MutationsInFlight()
        """Mutation ids of the requests running now (a retry waits for its first request)."""
        self._threads: dict[bool, ThreadPoolExecutor] = {}
        """The worker threads commands run on, for reads (False) and for changes (True): made on the event loop
        at the first command of each kind, shut down with this object."""
        self._cheap_answers = 0
        """Fast reads that do not yield answered on the event loop so far (``after_cheaper_reads``)."""

    def error_response(self, error: BaseException, request_id: str) -> Response:
        return error_response(error, request_id, self.host, self.clock())

    def check_token(self, request: Request) -> str:
        """The authenticated user of ``request`` (YT error 900 without a valid token)."""
        return self.security.authenticate(request.headers)

    async def after_cheaper_reads(self) -> None:
        """Let the cheaper fast reads waiting on the event loop go first: yield turns of the loop while the last
        one answered such a read (requests that came in with this one or since), at most ``YIELD_TO_CHEAPER``
        seconds; a quiet loop is left at once (one turn)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + YIELD_TO_CHEAPER
        while True:
            seen = self._cheap_answers
            await asyncio.sleep(0)
            if self._cheap_answers == seen or loop.time() >= deadline:
                return

    async def discovery(self, request: Request) -> Response:
        body = json.dumps([d.to_json() for d in self.registry.descriptors()])
        return Response(body, media_type="application/json")

    async def hosts(self, request: Request) -> Response:
        return Response("[]", media_type="application/json")

    async def endpoint(self, request: Request) -> Response:
        """A registered endpoint outside ``/api/v4``: authenticate, authorize by its name, answer JSON."""
        request_id = new_request_id()
        try:
            user = self.check_token(request)
            await read_body(request, MAX_BODY_BYTES)  # read (and drop) what the client sent
            name, handler = self.registry.endpoints()[request.url.path]
            ctx = CommandContext(name, {}, user=user, headers=request.headers, request_id=request_id)
            self.security.authorize(name, user, {}, None)
            data, content_type = encode_structured(handler(ctx), Format("json"))
        except PooltreeError as error:
            return self.error_response(error, request_id)
        headers = {"X-YT-Request-Id": request_id, "X-YT-Proxy": self.host}
        return Response(data, media_type=content_type, headers=headers)

    async def command(self, request: Request) -> Response:
        request_id = new_request_id()
        try:
            return await self._command(request, request_id)
        except ClientGone as error:
            log.info("request %s: %s", request_id, error.message)  # the client's doing: no traceback
            return self.error_response(error, request_id)
        except PooltreeError as error:
            return self.error_response(error, request_id)
        except Exception as error:
            log.exception(
                "command %s failed unexpectedly (request %s)", request.path_params.get("command"), request_id
            )
            wrapped = YtError(f"Internal error while executing the command: {type(error).__name__}: {error}")
            return self.error_response(wrapped, request_id)

    async def _command(self, request: Request, request_id: str) -> Response:
        user = self.check_token(request)
        name = request.path_params["command"]
        found = self.registry.lookup(name)
        if found is None:
            raise unsupported_command(name)
        descriptor, handler = found
        if descriptor.is_volatile:
            self.store.check_writable()  # a store in trouble acknowledges nothing
        if descriptor.input_type != "null" and request.method != "PUT":
            raise YtError(f'Command "{name}" takes input and must be sent with PUT, not {request.method}')
        if descriptor.is_volatile and request.method == "GET":
            raise YtError(f'Command "{name}" changes state and must be sent with POST, not GET')
        body = await self._read_body(request)
        params = decode_parameters(
            request.headers.get("x-yt-parameters"),
            request.headers.get("x-yt-header-format"),
            body if descriptor.input_type == "null" else None,
            request.headers.get("content-type"),
            dict(request.query_params),
            keep=not descriptor.is_volatile,  # reads repeat their parameters; a mutation's carry its id
        )
        # the HTTP proxy's headers for a mutation's id and retry flag (the parameters win when both are sent)
        if descriptor.is_volatile and "mutation_id" not in params and request.headers.get("x-yt-mutation-id"):
            params["mutation_id"] = request.headers["x-yt-mutation-id"]
        if descriptor.is_volatile and "retry" not in params and request.headers.get("x-yt-retry"):
            params["retry"] = request.headers["x-yt-retry"].strip().lower() in ("true", "1", "%true")
        ctx = CommandContext(name, params, user=user, headers=request.headers, request_id=request_id)
        if descriptor.input_type == "structured":
            fmt = parse_format(params["input_format"], "input_format") if "input_format" in params else None
            ctx.input = parse_structured(
                body, fmt or content_type_format(request.headers.get("content-type")), "input"
            )
        elif descriptor.input_type != "null":
            ctx.input = body
        # a resolver may read the store (an operation alias's first lookup): never here on the event loop
        fast = self.registry.fast_handler(name) if not descriptor.is_volatile else None
        if fast is not None and self.registry.resolves(params):
            fast = None
        if fast is not None and self.security.authorize(
            name, user, params, ctx.input, rule=descriptor.rule, blocking=False
        ):
            yields = self.registry.fast_yields(name)
            if yields:
                await self.after_cheaper_reads()
            result = fast(ctx)
            if result is not None:
                if not yields:
                    self._cheap_answers += 1
                return self._output(descriptor, result, params, request_id)
        # one trip to a worker thread: each hand-over costs a wake-up and a GIL switch, several per request
        # added up to much of a cheap command's time under load
        threads = self._threads.get(descriptor.is_volatile)
        if threads is None:
            threads = self._threads[descriptor.is_volatile] = command_executor(descriptor.is_volatile)
            weakref.finalize(self, threads.shutdown, wait=False)
        # a thread takes the next command as soon as this one's work ends, not once the loop has taken its
        # answer back (anyio's limiter held its token until then: with the loop behind, the threads sat idle)
        run = functools.partial(self._run, descriptor, handler, ctx, request_id)
        answer = await asyncio.get_running_loop().run_in_executor(
            threads, contextvars.copy_context().run, run
        )
        if isinstance(answer, Deferred):  # waited for here, on the loop: no command thread is held
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(answer.future)), answer.timeout)
            return self._output(descriptor, answer.finish(answer.future), params, request_id)
        return answer

    def _run(
        self, descriptor: CommandDescriptor, handler: Handler, ctx: CommandContext, request_id: str
    ) -> Response | Deferred:
        """Authorize, run the handler (once per mutation id: ``run_mutation``) and encode its answer (worker
        thread)."""
        params = ctx.parameters
        self.authorize(descriptor, ctx.user, params, ctx.input)
        mutation_id = params.get("mutation_id") if descriptor.is_volatile else None
        if mutation_id is None:
            result = handler(ctx)
        else:
            result = self.run_mutation(descriptor, handler, ctx, mutation_id)
        if isinstance(result, Deferred):
            return result
        return self._output(descriptor, result, params, request_id)

    def run_mutation(
        self,
        descriptor: CommandDescriptor,
        handler: Handler,
        ctx: CommandContext,
        mutation_id: Any,
        *,
        wait: float | None = None,
    ) -> Any:
        """Run an authorized volatile command with a mutation id once: a request with a saved answer gets it if
        marked ``retry`` (and is refused if not) without running again, and the answer of one that runs is
        remembered. Requests with one mutation id run one after the other (``mutations_in_flight.py``; ``wait``
        bounds the wait). A plain command and each request of ``execute_batch`` come here."""
        key = mutation_key(ctx.user, str(mutation_id))  # after authorization; a replay only to the same user
        with self._in_flight.held(key, timeout=wait):
            seen, saved = self.store.get_mutation(key)
            if seen:
                if not ctx.bool_param("retry", False):
                    raise YtError(
                        f'Duplicate request is not marked as "retry" (mutation_id {mutation_id})',
                        attributes={"mutation_id": str(mutation_id)},
                    )
                return saved
            result = handler(ctx)
            if (
                not isinstance(result, Deferred)
                and descriptor.output_type in ("structured", "null")
                and not descriptor.saves_mutation
            ):
                self.remember(key, result)
            return result

    def authorize(
        self, descriptor: CommandDescriptor, user: str, params: Mapping[str, Any], input_value: Any
    ) -> None:
        """The command's rule decides (error 901 on a denial; a descriptor without a rule is refused)."""
        if isinstance(params, dict):  # names the command uses resolved once, before the rule decides
            self.registry.resolve(params)
        if descriptor.rule is None:
            raise no_rule_error(descriptor.name, user)
        self.security.authorize(descriptor.name, user, params, input_value, rule=descriptor.rule)

    def remember(self, mutation_id: str, result: Any) -> None:
        """Save a mutation's response for retries under its user-scoped id (``mutation_key``), sealed by the store;
        drop ids older than ``MUTATION_TTL`` now and then."""
        now = self.clock()
        self.store.remember_mutation(mutation_id, result, now)
        if now - self._last_prune >= MUTATION_PRUNE_PERIOD:
            self._last_prune = now
            self.store.forget_mutations(now - MUTATION_TTL)

    @staticmethod
    async def _read_body(request: Request) -> bytes:
        return await read_body(request, MAX_BODY_BYTES)

    def _output(
        self, descriptor: CommandDescriptor, result: Any, params: dict[str, Any], request_id: str
    ) -> Response:
        headers = {"X-YT-Request-Id": request_id, "X-YT-Proxy": self.host}
        if descriptor.output_type == "null":
            return Response(b"", headers=headers)
        if descriptor.output_type in ("binary", "tabular"):
            if isinstance(result, bytes | bytearray):
                return Response(bytes(result), media_type="application/octet-stream", headers=headers)
            if isinstance(result, Iterable) and not isinstance(result, str | Mapping):
                return StreamingResponse(iter(result), media_type="application/octet-stream", headers=headers)
            raise YtError(f"Command {descriptor.name} produced {type(result).__name__} instead of bytes")
        if isinstance(result, Encoded):
            return Response(result.data, media_type=result.content_type, headers=headers)
        data, content_type = encode_structured(result, output_format(params))
        return Response(data, media_type=content_type, headers=headers)


def create_app(
    store: Store,
    *,
    token: str | None = None,
    security: Security | None = None,
    orchid: OrchidProvider | None = None,
    operations: CommandProvider | None = None,
    validator: Validator | None = None,
    host: str | None = None,
    clock: Callable[[], float] = time.time,
    cypress: Cypress | None = None,
) -> Starlette:
    """The scheduler's HTTP API over ``store``; ``app.state`` holds ``store``, ``cypress`` and ``registry``.

    Pass a ready ``cypress`` (built over the same store) when the scheduler must subscribe to pool tree
    changes before the first request; otherwise one is created with ``validator`` and ``orchid``. Without
    ``security`` one is made over ``store`` with ``token`` as the superuser's (root's) token: every command needs a
    valid token.
    """
    if security is None:
        security = Security(store, clock=clock, root_token=token)
    if cypress is None:
        cypress = Cypress(store, validator=validator, orchid=orchid, clock=clock)
    elif orchid is not None:
        cypress.orchid = orchid
    registry = CommandRegistry()
    register_cypress_commands(registry, cypress, security)
    register_security_commands(registry, security)
    if operations is not None:
        operations.register_commands(registry)
    api = YtApi(store, registry, security=security, host=host or socket.gethostname(), clock=clock)
    files = FileService(cypress, store, clock=clock)
    files.register_commands(registry)
    if security.resolver is None:  # an API without operations (the service installs its own resolver)
        security.resolver = ServiceResolver(cypress, None, files)

    register_unsupported_commands(registry)
    register_batch_command(
        registry, host=api.host, clock=clock, run_mutation=api.run_mutation, authorize=api.authorize
    )

    async def api_versions(request: Request) -> Response:
        return Response('["v4"]', media_type="application/json")

    async def not_found(request: Request) -> Response:
        return api.error_response(YtError(f"Unknown endpoint {request.url.path}; use /api/v4/<command>"), "")

    routes = [
        Route("/api", api_versions, methods=["GET"]),
        Route("/api/v4", api.discovery, methods=["GET"]),
        Route("/api/v4/", api.discovery, methods=["GET"]),
        Route("/hosts", api.hosts, methods=["GET"]),
        Route(COMMAND_ROUTE, api.command, methods=["GET", "POST", "PUT"]),
        *(Route(path, api.endpoint, methods=["GET", "POST"]) for path in registry.endpoints()),
        Route("/{rest:path}", not_found, methods=["GET", "POST", "PUT", "DELETE"]),
    ]
    app = Starlette(routes=routes)
    app.state.body_limits = {}
    app.add_middleware(RouteGuard, router=app.router, rules=ROUTE_RULES, host=api.host)
    app.add_middleware(DrainUnreadBody, limits=app.state.body_limits)
    app.state.store = store
    app.state.cypress = cypress
    app.state.registry = registry
    app.state.api = api
    app.state.security = security
    app.state.files = files
    return app
