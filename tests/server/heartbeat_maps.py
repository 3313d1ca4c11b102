"""Heartbeat maps for tests, built with the wire module as a node builds them."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pooltree.node import wire

LIMITS = {"user_slots": 2, "cpu": 2, "memory": 4 << 30}


def node_heartbeat(
    address: str,
    *,
    limits: Mapping[str, float] = LIMITS,
    running: Sequence[Mapping[str, Any]] = (),
    finished: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A heartbeat of node ``address`` with the given running and finished jobs."""
    return wire.heartbeat(
        address,
        sequence=1,
        time=0.0,
        resource_limits=limits,
        resource_usage={},
        memory_limit=float(limits.get("memory", 0)),
        memory_usage=0,
        memory_meter="none",
        running_jobs=running,
        finished_jobs=finished,
    )


def published(scheduler: Any, operation_id: str, within: float, tree: str = "default") -> bool:
    """Whether ``operation_id`` shows in ``tree``'s published update within ``within`` seconds (polled under the
    scheduling lock). A heartbeat that meets the tree's periodic update computing outside the lock schedules
    against the last published tree (`refresh_stale_trees` leaves the tree to that update): a test that needs a
    heartbeat to start an operation just started waits for this first."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with scheduler.lock:
            if scheduler.updates.operation_shares(tree, operation_id) is not None:
                return True
        time.sleep(0.01)
    return False


def _timeless(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k != "datetime"}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def comparable_answer(status: int, headers: Mapping[str, str], body: bytes) -> tuple[Any, ...]:
    """An HTTP answer as two routes or protocols must give it alike: status, content type and length, ``X-YT-*``
    headers and body, the request id and times taken out."""
    yt = {k: v for k, v in headers.items() if k.startswith("x-yt-") and k != "x-yt-request-id"}
    if "x-yt-error" in yt:
        yt["x-yt-error"] = _timeless(json.loads(yt["x-yt-error"]))
    content: Any = body
    if headers.get("content-type", "").startswith("application/json") and body:
        content = _timeless(json.loads(body))
    return status, headers.get("content-type"), headers.get("content-length"), yt, content


def reporting_heartbeat(address: str = "n1", sequence: int = 1) -> dict[str, Any]:
    """A heartbeat of a 4-cpu node with one running and one finished job (the routes' and protocols' tests)."""
    return wire.heartbeat(
        address,
        sequence=sequence,
        time=1.0,
        resource_limits={"user_slots": 4, "cpu": 4.0, "memory": 8 << 30, "network": 100},
        resource_usage={},
        memory_limit=8 << 30,
        memory_usage=0,
        memory_meter="none",
        running_jobs=[
            wire.running_job("1-2-3-4", "5-6-7-8", "main", start_time=0.5, resource_usage={"cpu": 1.0})
        ],
        finished_jobs=[wire.finished_job("9-9-9-9", "5-6-7-8", "main", "completed", 0.1, 0.9)],
    )
