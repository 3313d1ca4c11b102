"""The scheduler's side of the node heartbeat wire format: ``pooltree.node.wire`` (one module for both sides)."""

from pooltree.node.wire import (
    FINISHED_STATES,
    MAX_ALERT_TEXT,
    MAX_NODE_ALERTS,
    FinishedJobReport,
    HeartbeatRequest,
    RunningJobReport,
    parse_heartbeat,
    parse_node_alerts,
)

__all__ = [
    "FINISHED_STATES",
    "MAX_ALERT_TEXT",
    "MAX_NODE_ALERTS",
    "FinishedJobReport",
    "HeartbeatRequest",
    "RunningJobReport",
    "parse_heartbeat",
    "parse_node_alerts",
]
