"""The scheduler's side of the node heartbeat wire format: ``pooltree.node.wire`` (one module for both sides), and
``decode_heartbeat``, the body → ``HeartbeatRequest`` step that the service and the node shard processes share."""

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
    FinishedJobReport,
    HeartbeatRequest,
    RunningJobReport,
    RunningReports,
    decode,
    parse_heartbeat,
    parse_node_alerts,
)
from pooltree.server.app import DrainUnreadBody
from pooltree.server.protocol import YtError

__all__ = [
    "FINISHED_STATES",
    "MAX_ALERT_TEXT",
    "MAX_NODE_ALERTS",
    "DirectHeartbeats",
    "FinishedJobReport",
    "HeartbeatRequest",
    "RunningJobReport",
    "RunningReports",
    "decode_heartbeat",
    "parse_heartbeat",
    "parse_node_alerts",
]

MAX_HEARTBEAT_BYTES = 16 << 20
"""A heartbeat body is refused (413) past this size."""


def decode_heartbeat(body: bytes, reports: RunningReports | None = None) -> HeartbeatRequest:
    """A heartbeat body as the scheduler takes it; a YT error (400) naming the field when it is not one.

    ``wire.decode`` refuses what is not JSON (invalid UTF-8 and lone surrogates too); ``parse_heartbeat`` keeps
    only the fields it knows and bounds the nesting of the free-form maps among them, so the whole value is not
    walked again here. ``reports``: the process's ``RunningReports`` (unchanged running jobs are not read
    again)."""
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


class DirectHeartbeats:
    """ASGI: ``POST /internal/node_heartbeat`` straight to ``endpoint`` (a request → response handler), past the
    app's middleware and route matching (with 1,000 nodes they cost more than the heartbeat's own work), with
    what an early answer leaves of the body drained (``DrainUnreadBody``); everything else to ``app``. The
    scheduler's entry (``SchedulerService.asgi``) and a node shard's (``shards/process.py``)."""

    def __init__(self, endpoint: Callable[[Request], Awaitable[Response]], app: Any) -> None:
        self.endpoint = endpoint
        self.app = app
        self._drained = DrainUnreadBody(self._answer, {HEARTBEAT_PATH: MAX_HEARTBEAT_BYTES})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == HEARTBEAT_PATH and scope["method"] == "POST":
            await self._drained(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _answer(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        response = await self.endpoint(Request(scope, receive))
        await response(scope, receive, send)
