"""The scheduler's side of the node heartbeat wire format: ``pooltree.node.wire`` (one module for both sides), and
``decode_heartbeat``, the body → ``HeartbeatRequest`` step that the service and the node shard processes share."""

from __future__ import annotations

from pooltree.errors import ConfigError
from pooltree.node.wire import (
    FINISHED_STATES,
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
from pooltree.server.protocol import YtError

__all__ = [
    "FINISHED_STATES",
    "MAX_ALERT_TEXT",
    "MAX_NODE_ALERTS",
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
