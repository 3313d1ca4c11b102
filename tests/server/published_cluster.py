"""Test harness for the read snapshot's tests: a service's tree ``default`` with one node and one running
operation, published by fair-share updates the test runs on its own clock (no loops), served on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loopback import ServerThread

from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

SPEC = {"tasks": {"main": {"command": "true", "job_count": 4, "cpu_limit": 1}}}
"""The running operation of ``published_service``: 4 one-cpu jobs (the node has 4 cpu)."""


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


def published_service(tmp_path: Path, now: list[float], **options: Any) -> SchedulerService:
    """A service (``options``: its authentication) on a SQLite file under ``tmp_path`` and the clock ``now[0]``,
    with ``SPEC``'s operation running on node ``n1`` and published (``publish_one_running_operation``)."""
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), clock=lambda: now[0], **options
    )
    publish_one_running_operation(service, SPEC, now[0])
    return service


def root_and_alice(service: SchedulerService, root_token: str) -> dict[str, str]:
    """User alice created; the tokens of root and alice."""
    directory = service.security.directory
    directory.create_user("alice")
    return {"root": root_token, "alice": directory.issue_token("alice")}


@contextmanager
def serving(service: SchedulerService) -> Iterator[str]:
    """``service``'s app served by uvicorn on 127.0.0.1 for the block (its URL); the store closed after it."""
    with ServerThread(service.app) as server:
        yield server.url
    service.store.close()
