"""The scheduling page shows a tree's scheduling segments (issue 30): GPUs per segment and module, fair against
current, and how many nodes each holds; nothing is shown while segments are off."""

from __future__ import annotations

import httpx
import pytest
from test_web_pages import anyio_backend, open_service  # noqa: F401 (fixtures)

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.service import SchedulerService

SEGMENTS = {
    "mode": "large_gpu",
    "data_centers": ["dc-a", "dc-b"],
    "initialization_timeout": 0,
    "unsatisfied_segments_rebalancing_timeout": 0,
    "reserve_fair_resource_amount": {"large_gpu": {"dc-a": 8}},
}


def _heartbeat(service: SchedulerService, address: str, tag: str, now: float) -> None:
    data = {
        "node_address": address,
        "resource_limits": {"user_slots": 8, "cpu": 8, "gpu": 8, "memory": 64 << 30},
        "tags": [tag],
    }
    service.scheduler.process_heartbeat(parse_heartbeat(data), now)


@pytest.mark.anyio
async def test_scheduling_page_shows_segments(open_service: SchedulerService) -> None:  # noqa: F811
    service = open_service
    scheduler = service.scheduler
    trees = {
        "gpu": {
            "config": {
                "main_resource": "gpu",
                "node_tag_filter": "dc-a | dc-b",
                "scheduling_segments": SEGMENTS,
            },
            "pools": {"p": {}},
        },
        "plain": {"config": {"node_tag_filter": "cpu"}, "pools": {"q": {}}},
    }
    scheduler.apply_pool_trees(parse_pool_trees(trees), "gpu", 1.0)
    _heartbeat(service, "n-a", "dc-a", 1.0)
    _heartbeat(service, "n-b", "dc-b", 1.0)
    scheduler.update_fair_share("gpu", 1.5)  # the reserve makes large_gpu@dc-a unsatisfied
    scheduler.update_fair_share("gpu", 20.0)  # a manage period later, past the (zero) timeout: n-a moves
    scheduler.update_fair_share("plain", 20.0)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=service.app), base_url="http://t") as web:
        page = (await web.get("/?page=scheduling&tree=gpu")).text
        assert 'id="scheduling-segments"' in page and "mode large_gpu" in page
        row = page.split('id="segment-large_gpu-dc-a"')[1].split("</tr>")[0]
        assert '<td class="num fair">8</td>' in row and '<td class="num current">8</td>' in row
        assert '<td class="num node-count">1</td>' in row
        default = page.split('id="segment-default-all"')[1].split("</tr>")[0]
        assert '<td class="num current">8</td>' in default
        assert 'id="segments-balance">balanced' in page
        plain = (await web.get("/?page=scheduling&tree=plain")).text
        assert "scheduling-segments" not in plain
