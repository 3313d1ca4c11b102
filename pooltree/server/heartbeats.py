"""The scheduler's side of the node heartbeat wire format: ``pooltree.node.wire`` (one module for both sides), and
``decode_heartbeat``, the body → ``HeartbeatRequest`` step that the service and the node shard processes share,
and ``HeartbeatRoute``, the heartbeat route past Starlette's request and response objects that both serve."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from pooltree.errors import ConfigError
from pooltree.node.wire import (
    FINISHED_STATES,
    HEARTBEAT_PATH,
    MAX_ALERT_TEXT,
    MAX_NODE_ALERTS,
    MEDIA_TYPE,
    FinishedJobReport,
    HeartbeatRequest,
    RunningJobReport,
    RunningReports,
    decode,
    parse_heartbeat,
    parse_node_alerts,
)
from pooltree.node.wire_structs import read_heartbeat
from pooltree.server.app import DrainUnreadBody, read_body
from pooltree.server.http_protocol import BODY_WHOLE
from pooltree.server.protocol import YtError

__all__ = [
    "FINISHED_STATES",
    "MAX_ALERT_TEXT",
    "MAX_NODE_ALERTS",
    "FinishedJobReport",
    "HeartbeatRequest",
    "HeartbeatRoute",
    "RunningJobReport",
    "RunningReports",
    "decode_heartbeat",
    "parse_heartbeat",
    "parse_node_alerts",
    "read_heartbeat_body",
]

MAX_HEARTBEAT_BYTES = 16 << 20
"""A heartbeat body is refused (413) past this size."""


def decode_heartbeat(body: bytes, reports: RunningReports | None = None) -> HeartbeatRequest:
    """A heartbeat body as the scheduler takes it; a YT error (400) naming the field when it is not one.

    ``wire.decode`` refuses what is not JSON (invalid UTF-8 and lone surrogates too); ``parse_heartbeat`` keeps
    only the fields it knows and bounds the nesting of the free-form maps among them, so the whole value is not
    walked again here. ``reports``: the process's ``RunningReports`` (unchanged running jobs are not read
    again)."""
    request = read_heartbeat(body, reports) if body else None  # the typed fast path, else the plain one
    if request is not None:
        return request
    try:
        data = decode(body or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise YtError(f"Heartbeat is not valid JSON: {error}", attributes={"field": "heartbeat"}) from error
    try:
        return parse_heartbeat(data, reports)
    except ConfigError as error:
        raise YtError(
            f"Malformed node heartbeat: {error.message}",
            attributes={"field": error.path, "reason": error.reason},
        ) from error


_ANSWER_TYPE = MEDIA_TYPE.encode("latin-1")

Answer = Callable[[dict[str, Any], Any], Awaitable[bytes | Response]]
"""``(scope, receive)`` → a heartbeat's answer: its body (200, JSON) or an error's ``Response``."""


class HeartbeatRoute:
    """ASGI: ``POST /internal/node_heartbeat`` answered by ``answer(scope, receive)`` past Starlette's ``Request``
    and ``Response`` (two thirds of the ~10 µs a heartbeat spent in the HTTP layer above uvicorn): an answer's
    body goes out as the two messages ``Response(body, media_type=wire.MEDIA_TYPE)`` sends (the same status and
    headers), an error's ``Response`` as it is; what an early answer leaves of the body is drained
    (``DrainUnreadBody``); everything else to ``app``. The scheduler's entry (``SchedulerService.asgi``), whose
    app route answers the same (``tests/server/test_heartbeat_route.py``), and a node shard's
    (``shards/process.py``)."""

    def __init__(self, answer: Answer, app: Any) -> None:
        self.answer = answer
        self.app = app
        self._drained = DrainUnreadBody(self._answer, {HEARTBEAT_PATH: MAX_HEARTBEAT_BYTES})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == HEARTBEAT_PATH and scope["method"] == "POST":
            await self._drained(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _answer(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        answer = await self.answer(scope, receive)
        if isinstance(answer, Response):
            await answer(scope, receive, send)
            return
        headers = [(b"content-length", b"%d" % len(answer)), (b"content-type", _ANSWER_TYPE)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


async def read_heartbeat_body(scope: dict[str, Any], receive: Any) -> bytes:
    """``app.read_body`` of a heartbeat (limit ``MAX_HEARTBEAT_BYTES``): a body the protocol holds whole
    (``BODY_WHOLE``), sent without ``Content-Encoding`` and not declared over the limit, is its one message's
    bytes (no decoder, no copy, no ``Request``); anything else, and any message but that one, is ``read_body``'s
    (the message already taken is given to it again), so the answers and errors are its own."""
    if scope.get(BODY_WHOLE):
        for name, value in scope["headers"]:
            if name == b"content-encoding" or (
                name == b"content-length" and not (value.isdigit() and int(value) <= MAX_HEARTBEAT_BYTES)
            ):
                break
        else:
            message = await receive()
            body = message.get("body", b"")
            if (
                message["type"] == "http.request"
                and not message.get("more_body", False)
                and len(body) <= MAX_HEARTBEAT_BYTES
            ):
                return body
            receive = _again(message, receive)
    return await read_body(Request(scope, receive), MAX_HEARTBEAT_BYTES, "Heartbeat")


def _again(message: dict[str, Any], receive: Any) -> Callable[[], Awaitable[Any]]:
    """``receive`` whose first message is ``message`` (taken already), then the rest."""
    pending = [message]

    async def replay() -> Any:
        return pending.pop() if pending else await receive()

    return replay
