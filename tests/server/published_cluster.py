"""Test harness for the read snapshot's tests: a service's tree ``default`` with one node and one running
operation, published by fair-share updates the test runs on its own clock (no loops)."""

from __future__ import annotations

from typing import Any

from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.service import SchedulerService


def heartbeat(service: SchedulerService, address: str, now: float) -> dict[str, Any]:
    """One heartbeat of node ``address`` (4 user slots, 4 cpu, 8 GiB), processed in the scheduler; its answer."""
    data = {"node_address": address, "resource_limits": {"user_slots": 4, "cpu": 4, "memory": 8 << 30}}
    return service.scheduler.process_heartbeat(parse_heartbeat(data), now)


def publish_one_running_operation(service: SchedulerService, spec: dict[str, Any], now: float) -> None:
    """Tree ``default`` (the default tree), node ``n1`` heartbeating, one operation of ``spec`` started by root at
    ``now``, its allocations started by the node's next heartbeat and published by the update at ``now + 1``."""
    service.cypress.create("scheduler_pool_tree", "//sys/pool_trees/default")
    service.cypress.set("//sys/pool_trees/@default_tree", "default")
    heartbeat(service, "n1", now)
    service.scheduler.start_operation("vanilla", spec, "root", now)
    service.scheduler.update_fair_share("default", now)
    heartbeat(service, "n1", now + 0.5)
    service.scheduler.update_fair_share("default", now + 1)
