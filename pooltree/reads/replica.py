"""The read process's replica: what the scheduler's feed (``feed.py``, messages in ``wire.py``) told it, and the
``get_operation`` answers it can give from that, byte for byte the scheduler's at the same state and clock.

Pure and deterministic: ``apply(message)`` changes the state, ``answer(request, floor)`` reads it with the clock
given at construction (the answers' ``build_time`` and ``Date``). It answers a pending operation's
``get_operation`` whose template it holds for the request's shape (output format, attributes) once it has applied
the feed at least up to ``floor`` (the highest stamp the read process relayed); anything else is None (relay to the
scheduler): another command or method, a query string, parameters it does not know, an operation alias, an unknown
token or user, an operation or request shape without a template, an operation no longer in the queue its template
was made in, a feed behind ``floor``. The caller is authenticated by its token's SHA-256 and authorized by the
scheduler's own code (``Security.authenticate``, ``Security.authorize`` with ``get_operation``'s rule) over a
``Directory`` of the feed's security document: a denial is the scheduler's error 901, naming user, permission and
operation. A request it cannot read never raises: it is relayed. A feed message it cannot apply never raises
either: it is counted (``refused``) and the replica is ``broken`` from then on (it relays everything, as
``seam.NoReplica``), since what it holds may lack what that message said.
"""

from __future__ import annotations

import http
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

from starlette.responses import Response

from pooltree.errors import PooltreeError
from pooltree.forecast.attribute import live_scheduling_forecast
from pooltree.forecast.run import Forecast
from pooltree.reads import wire
from pooltree.reads.seam import ReadRequest
from pooltree.security.directory import STORE_KEY
from pooltree.security.guard import OperationAccess, Security
from pooltree.security.policy import RULES
from pooltree.server.app import error_response, new_request_id
from pooltree.server.commands import output_format
from pooltree.server.operation_times import iso_time
from pooltree.server.pending_maps import Template
from pooltree.server.protocol import decode_parameters
from pooltree.tree.tree_views import queue_placement

log = logging.getLogger(__name__)

GET_OPERATION_PATH = b"/api/v4/get_operation"
KNOWN_PARAMETERS = frozenset(
    (
        "operation_id",
        "attributes",
        "output_format",
        "include_runtime",
        "suppress_transaction_coordinator_sync",
    )
)
"""What ``get_operation``'s handler reads (``include_runtime`` and ``suppress_transaction_coordinator_sync``, which
``yt.wrapper`` sends: read by nothing, as in the scheduler); a request with any other parameter
(``operation_alias``, ``transaction_id``, ...) is relayed."""
READ_HEADERS = ("authorization", "x-yt-parameters", "x-yt-header-format", "content-type")
"""The headers the scheduler's pipeline reads for a ``get_operation`` (one of them sent twice: relayed)."""
SERVER_HEADER = (b"server", b"uvicorn")
"""What uvicorn, which serves the scheduler's port, puts after ``date`` in every answer."""


def http_answer(response: Response, now: float, *, keep_alive: bool = True) -> bytes:
    """``response`` as the scheduler's uvicorn writes it at ``now``: status line, ``date``, ``server``, the
    response's own headers, ``connection: close`` when the connection is not kept alive, body."""
    status = response.status_code
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    parts = [
        b"HTTP/1.1 %d %s\r\n" % (status, phrase),
        b"date: ",
        formatdate(now, usegmt=True).encode(),
        b"\r\n",
    ]
    for name, value in (SERVER_HEADER, *response.raw_headers):
        parts.extend((name, b": ", value, b"\r\n"))
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    parts.append(bytes(response.body))
    return b"".join(parts)


def _is_get_operation(request: ReadRequest) -> bool:
    """Whether ``request`` is of the one kind the replica answers (and so holds): a ``get_operation`` with its
    parameters in the header, no body."""
    return request.method == b"GET" and request.target == GET_OPERATION_PATH and not request.body


class ReplicaStore:
    """The store a read process's ``Directory`` loads its document from: the feed's security document (read only;
    what the directory would write back is dropped)."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        users = document.get("users")
        groups = document.get("groups")
        tokens = document.get("tokens")
        if not (isinstance(users, list) and isinstance(groups, dict) and isinstance(tokens, dict)):
            raise wire.BadMessage("security.document: users, groups and tokens are required")
        if not all(isinstance(name, str) for name in users):
            raise wire.BadMessage("security.document.users: expected names")
        for name, members in groups.items():
            wire._strings(members, f"security.document.groups.{name}")
        if not all(isinstance(digest, str) and isinstance(user, str) for digest, user in tokens.items()):
            raise wire.BadMessage("security.document.tokens: expected SHA-256 -> user")
        self._doc = {
            "users": {name: {} for name in users},
            "groups": {name: {"members": list(members)} for name, members in groups.items()},
            "tokens": {digest: {"user": user} for digest, user in tokens.items()},
        }

    def get_value(self, key: str) -> Any:
        return self._doc if key == STORE_KEY else None

    def set_value(self, key: str, value: Any) -> None:
        """Dropped: a read process changes no directory."""


class _Relay(Exception):
    """The request is the scheduler's to answer (``reason``: why, counted in ``Replica.relays``)."""

    def __init__(self, reason: str = "a question only the scheduler answers") -> None:
        super().__init__(reason)
        self.reason = reason


class _Resolver:
    """What ``Security`` asks while it authorizes a ``get_operation``: the operation's access from the template's
    message; any other question relays the request."""

    def __init__(self, access: OperationAccess) -> None:
        self.access = access

    def operation_access(self, operation_id: str, *, blocking: bool = True) -> OperationAccess | None:
        if operation_id != self.access.operation_id:
            raise _Relay
        return self.access

    def __getattr__(self, name: str) -> Any:
        raise _Relay


@dataclass
class HeldOperation:
    """A pending operation's templates (by ``wire.encoding_key``), the pools it waits in per tree and its access."""

    access: OperationAccess
    waits: tuple[tuple[str, str], ...]
    templates: dict[str, Template | wire.UnmadeTemplate] = field(default_factory=dict)
    """By request shape: the template, or the map it is made of when a get first asks (``wire.UnmadeTemplate``)."""


@dataclass
class Queue:
    """A pool's pending queue as the feed sent it."""

    running: int
    max_running: Any
    ids: list[str]
    positions: dict[str, int]


class Replica:
    """The read process's copy of what ``get_operation`` answers for pending operations (module docstring)."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.counter = 0
        """The last ``counter`` message applied (the feed's stamps are compared with it)."""
        self.host = ""
        """What the scheduler answers in ``X-YT-Proxy``."""
        self.security: Security | None = None
        self.operations: dict[str, HeldOperation] = {}
        self.queues: dict[tuple[str, str], Queue] = {}
        self.forecast: Forecast | None = None
        """The forecast the scheduler's maps show (``wire.FORECAST``), its last refresh's error, and whether one was
        applied (a template's ``scheduling_forecast`` slot is filled from them; before, such gets are relayed). Its
        ``operations`` holds those opened so far: the others wait in ``_forecast_entries`` until a get asks."""
        self.forecast_error: str | None = None
        self.forecast_known = False
        self._forecast_entries: dict[str, str] = {}
        self.refused = 0
        """Feed messages that were not applied (not of ``wire.py``'s shapes)."""
        self.broken = False
        """A message was not applied: nothing is answered any more (every request relayed)."""
        self.answered = 0
        """Requests answered here."""
        self.relays: Counter[str] = Counter()
        """Requests relayed, by why."""

    # ------------------------------------------------------------------ the feed

    def apply(self, message: Any) -> None:
        """One feed message (``wire.py``), or a list of them (a tick's) applied in order. One of another shape
        changes nothing, is counted in ``refused`` and leaves the replica ``broken``: it answers nothing more (what
        it holds may lack what the message said) until the scheduler installs a new one."""
        for one in message if isinstance(message, list) else (message,):
            try:
                self._apply(one)
            except (wire.BadMessage, KeyError, TypeError, ValueError, PooltreeError) as error:
                self.refused += 1
                self.broken = True
                log.error("read replica: a feed message was not applied, answering nothing more: %s", error)
                return

    def _apply(self, message: Any) -> None:
        if not isinstance(message, dict):
            raise wire.BadMessage("expected a map")
        kind = message.get("kind")
        if kind == wire.COUNTER:
            value = message["value"]
            if not isinstance(value, int) or isinstance(value, bool) or value < self.counter:
                raise wire.BadMessage(f"counter: expected an integer not below {self.counter}")
            self.counter = value
        elif kind == wire.SECURITY:
            self._apply_security(message)
        elif kind == wire.TEMPLATE:
            self._apply_template(message)
        elif kind == wire.QUEUE:
            self._apply_queue(message)
        elif kind == wire.FORECAST:
            self.forecast, self._forecast_entries, self.forecast_error = wire.forecast_of(message)
            self.forecast_known = True
        elif kind == wire.VOID:
            if message.get("all") is True:
                self.operations.clear()
                self.queues.clear()
            elif isinstance(message.get("operation"), str):
                self.operations.pop(message["operation"], None)
            else:
                raise wire.BadMessage("void: expected an operation or all")
        else:
            raise wire.BadMessage(f"unknown kind {kind!r}")

    def _apply_security(self, message: dict[str, Any]) -> None:
        authentication = message["authentication"]
        host = message["host"]
        if not isinstance(authentication, bool) or not isinstance(host, str):
            raise wire.BadMessage("security: authentication is a boolean, host a string")
        security = Security(
            ReplicaStore(message["document"]), clock=self.clock, authentication=authentication
        )
        self.security = security
        self.host = host

    def _apply_template(self, message: dict[str, Any]) -> None:
        operation_id, key = message["operation"], message["key"]
        if not isinstance(operation_id, str) or not isinstance(key, str):
            raise wire.BadMessage("template: operation and key are strings")
        template: Template | wire.UnmadeTemplate
        if "map" in message:
            template = wire.unmade_of(message["map"])
        else:
            template = wire.template_of(message["template"])
        waits = wire.waits_of(message["waits"])
        access = wire.access_of_message(operation_id, message["access"])
        held = self.operations.get(operation_id)
        if held is None or held.waits != waits or held.access != access:
            held = self.operations[operation_id] = HeldOperation(access, waits)
        held.templates[key] = template

    def _apply_queue(self, message: dict[str, Any]) -> None:
        tree, pool, start, ids = message["tree"], message["pool"], message["start"], message["ids"]
        if not isinstance(tree, str) or not isinstance(pool, str) or not isinstance(start, int):
            raise wire.BadMessage("queue: tree, pool and start are required")
        if ids is None:
            self.queues.pop((tree, pool), None)
            return
        ids = wire._strings(ids, "queue.ids")
        running = message["running"]
        if not isinstance(running, int):
            raise wire.BadMessage("queue: running is an integer")
        queue = self.queues.get((tree, pool))
        if start == 0:
            queue = self.queues[(tree, pool)] = Queue(running, message["max_running"], [], {})
        elif queue is None or len(queue.ids) != start:
            self.queues.pop((tree, pool), None)
            raise wire.BadMessage(
                f"queue {tree}/{pool}: appended at {start}, held {queue and len(queue.ids)}"
            )
        queue.running, queue.max_running = running, message["max_running"]
        for operation_id in ids:
            queue.positions[operation_id] = len(queue.ids)
            queue.ids.append(operation_id)
        if len(queue.positions) != len(queue.ids):
            self.queues.pop((tree, pool), None)
            raise wire.BadMessage(f"queue {tree}/{pool}: an operation twice")

    # ------------------------------------------------------------------ answers

    def answer(self, request: ReadRequest, floor: int) -> bytes | None:
        """The scheduler's whole HTTP answer to ``request``, or None: the scheduler is to answer it (module
        docstring). Never raises on what the request holds."""
        try:
            found = self._answer(request, floor)
        except _Relay as relay:
            self.relays[relay.reason] += 1
            return None
        except Exception:  # a request this code does not expect: relayed, never a crash of the read process
            log.exception("read replica: a request could not be answered here; relayed")
            self.relays["failed"] += 1
            return None
        self.answered += 1
        return found

    def holds(self, request: ReadRequest, floor: int) -> bool:
        """A ``get_operation`` (the only request ``answer`` answers) while what was applied is below ``floor``: the
        read process holds it for the next feed message (``seam.Replica.holds``), then asks ``answer``."""
        return (
            self.counter < floor
            and not self.broken
            and self.security is not None
            and _is_get_operation(request)
        )

    def _answer(self, request: ReadRequest, floor: int) -> bytes:
        security = self.security
        if self.broken or security is None:
            raise _Relay("no replica")
        if self.counter < floor:
            raise _Relay("behind the floor")
        if not _is_get_operation(request):
            raise _Relay("not a get_operation")
        headers: dict[str, str] = {}
        for raw_name, raw_value in request.headers:
            name = raw_name.decode("latin-1")
            if name in READ_HEADERS and name in headers:
                raise _Relay("a header twice")
            headers.setdefault(name, raw_value.decode("latin-1"))
        try:
            user = security.authenticate(headers)
            params = decode_parameters(
                headers.get("x-yt-parameters"),
                headers.get("x-yt-header-format"),
                b"",
                headers.get("content-type"),
                {},
                keep=True,
            )
        except PooltreeError:
            raise _Relay("unknown token or bad parameters") from None  # the scheduler answers them
        if not set(params) <= KNOWN_PARAMETERS:
            raise _Relay("a parameter it does not know")
        operation_id = params.get("operation_id")
        key = wire.encoding_key(params)
        held = self.operations.get(operation_id) if isinstance(operation_id, str) else None
        template = held.templates.get(key) if held is not None and key is not None else None
        if held is None or template is None:
            raise _Relay("no template")
        if isinstance(template, wire.UnmadeTemplate):  # the first get of it: made here, kept
            made = template.make()
            if made is None:
                del held.templates[key]  # type: ignore[arg-type]
                raise _Relay("no template of its map")
            template = held.templates[key] = made  # type: ignore[index]
        placements: dict[str, dict[str, Any]] = {}
        for tree, pool in held.waits:
            queue = self.queues.get((tree, pool))
            position = None if queue is None else queue.positions.get(held.access.operation_id)
            if queue is None or position is None:
                raise _Relay("not in its queue")
            placements[tree] = queue_placement(
                pool, queue.running, queue.max_running, len(queue.ids), position
            )
        now = self.clock()
        request_id = new_request_id()
        security.resolver = _Resolver(held.access)
        try:
            if not security.authorize(
                "get_operation", user, params, None, rule=RULES["get_operation"], blocking=False
            ):
                raise _Relay("authorization needs the store")
        except PooltreeError as error:
            denial = error_response(error, request_id, self.host, now)
            return http_answer(denial, now, keep_alive=request.keep_alive)
        finally:
            security.resolver = None
        data = template.fill(
            placements,
            output_format(params),
            build_time=iso_time(now),
            forecast=self._forecast_of(held.access.operation_id, template.trees),
        )
        if data is None:
            raise _Relay("template not filled")
        headers_out = {"X-YT-Request-Id": request_id, "X-YT-Proxy": self.host}
        found = Response(data, media_type=template.content_type, headers=headers_out)
        return http_answer(found, now, keep_alive=request.keep_alive)

    def _forecast_of(
        self, operation_id: str, trees: tuple[str, ...]
    ) -> Callable[[list[Any]], dict[str, Any]] | None:
        """What fills a template's ``scheduling_forecast`` slot for ``operation_id`` (in ``trees``): the scheduler's
        ``live_scheduling_forecast`` of the forecast applied, given the trees' reasons; None before one was."""
        if not self.forecast_known:
            return None
        forecast, error = self.forecast, self.forecast_error
        entry = self._forecast_entries.pop(operation_id, None)
        if entry is not None and forecast is not None:
            try:
                forecast.operations[operation_id] = wire.opened_entry(operation_id, entry)
            except wire.BadMessage as bad:  # not what the feed sends: answered by the scheduler from now on
                log.error("read replica: %s", bad)
                self.refused += 1
                self.broken = True
                raise _Relay("no replica") from bad

        def fill(reasons: list[Any]) -> dict[str, Any]:
            return live_scheduling_forecast(
                forecast, operation_id, trees, reasons, error=error, time_format=iso_time
            )

        return fill
