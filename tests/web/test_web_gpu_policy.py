"""The GPU scheduling policy in the live service (issue 30): a tree with ``policy_kind: gpu`` schedules a
full-host gang through its plan (both hosts of one data center, stage ``gpu``), the orchid shows the tree's
``gpu_assignment_plan`` and the operation's ``gpu_policy_*`` fields, and the scheduling page shows the plan."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from test_web_pages import anyio_backend, open_service  # noqa: F401 (fixtures)

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.service import SchedulerService

POLICY = {"mode": "allocating", "modules": ["dc-a", "dc-b"], "plan_update_period": "500ms"}


def _heartbeat(
    service: SchedulerService, address: str, tag: str, now: float, running: list | None = None
) -> Any:
    data = {
        "node_address": address,
        "resource_limits": {"user_slots": 8, "cpu": 16, "gpu": 8, "memory": 64 << 30},
        "tags": [tag],
        "running_jobs": running or [],
    }
    return service.scheduler.process_heartbeat(parse_heartbeat(data), now)


@pytest.mark.anyio
async def test_a_gang_runs_on_the_hosts_its_plan_gives_it(open_service: SchedulerService) -> None:  # noqa: F811
    service = open_service
    scheduler = service.scheduler
    trees = {
        "gpu": {
            "config": {"main_resource": "gpu", "policy_kind": "gpu", "gpu_scheduling_policy": POLICY},
            "pools": {"p": {}},
        }
    }
    scheduler.apply_pool_trees(parse_pool_trees(trees), "gpu", 1.0)
    nodes = {"a-0": "dc-a", "a-1": "dc-a", "b-0": "dc-b"}
    for address, tag in nodes.items():
        _heartbeat(service, address, tag, 1.0)
    task = {"main": {"command": "sleep 100", "job_count": 2, "gpu_limit": 8, "cpu_limit": 1}}
    gang = scheduler.start_operation("vanilla", {"tasks": task, "pool": "p", "is_gang": True}, "alice", 2.0)
    scheduler.update_fair_share("gpu", 3.0)
    scheduler.update_fair_share(
        "gpu", 4.0
    )  # the plan binds the gang to dc-a (the only module with two hosts)
    started: dict[str, list] = {}
    for address, tag in nodes.items():
        started[address] = _heartbeat(service, address, tag, 5.0)["start"]
    assert [len(started[a]) for a in ("a-0", "a-1", "b-0")] == [1, 1, 0]
    scheduler.update_fair_share("gpu", 6.0)
    plan = service.scheduler.views["gpu"]["gpu_assignment_plan"]
    operation = plan["operations"][gang.id]
    assert operation["scheduling_module"] == "dc-a" and operation["full_host_module_bound"]
    assert sorted(a["node_address"] for a in operation["assignments"]) == ["a-0", "a-1"]
    assert all(a["allocation_id"] for a in operation["assignments"])
    assert plan["modules"]["dc-a"]["unreserved_node_count"] == 0
    view = service.scheduler.views["gpu"]["operations"][gang.id]
    assert view["gpu_policy_scheduling_module"] == "dc-a" and view["gpu_policy_assignment_count"] == 2
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=service.app), base_url="http://t") as web:
        page = (await web.get("/?page=scheduling&tree=gpu")).text
        assert 'id="gpu-plan"' in page and "policy gpu, mode allocating" in page
        row = page.split('id="gpu-node-a-0"')[1].split("</tr>")[0]
        assert '<td class="num assigned">8 / 8</td>' in row and gang.id in row
        assert '<td class="num unreserved">0</td>' in page.split('id="gpu-module-dc-a"')[1].split("</tr>")[0]
        orchid = await web.get(
            "/api/v4/get",
            params={"path": "//sys/scheduler/orchid/scheduler/pool_trees/gpu/gpu_assignment_plan/modules"},
        )
        assert orchid.status_code == 200 and "dc-a" in orchid.text
