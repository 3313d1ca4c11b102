"""Operations' best allocation share in the live service (in process): the same core rule as the simulator's
(``strategy/best_allocation.py``), from the nodes the live scheduler heard of, once the tree's limits are stable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pooltree.config import parse_pool_trees
from pooltree.resources import MEMORY
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store
from pooltree.strategy.best_allocation import adjusted_memory_limit

GIB = 1 << 30
LIMITS = {"user_slots": 8, "cpu": 8, "memory": 100 * GIB}
SPEC = {"pool": "a", "tasks": {"main": {"command": "sleep 100", "job_count": 8, "memory_limit": 40 * GIB}}}


def _live(tmp_path: Path) -> LiveScheduler:
    trees = {"default": {"config": {"node_reconnection_timeout": 60_000}, "pools": {"a": {}}}}
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    live.apply_pool_trees(parse_pool_trees(trees), "default", 0.0)
    for node in ("n1", "n2"):
        live.process_heartbeat(
            parse_heartbeat(
                {"node_address": node, "resource_limits": LIMITS, "tags": [], "running_jobs": []}
            ),
            0.0,
        )
    return live


def _limits_and_demand(live: LiveScheduler, op_id: str, now: float) -> tuple[float, np.ndarray]:
    live.update_fair_share("default", now)
    core = live.cores["default"]
    element = core.last_result.elements[op_id]
    return float(element.limits_share[MEMORY]), np.asarray(element.demand_share) * core.total_resources


def test_memory_limits_share_is_whole_allocations_per_node(tmp_path: Path) -> None:
    live = _live(tmp_path)
    op_id = live.start_operation("vanilla", SPEC, "alice", 0.0).id
    live.revive(10.0)  # the scheduler connects at 10 s: shares wait for the nodes for 60 s
    limits, demand = _limits_and_demand(live, op_id, 20.0)
    assert limits == pytest.approx(1.0)
    limits, demand = _limits_and_demand(live, op_id, 70.0)
    adjusted = adjusted_memory_limit(demand, {100 * GIB: 2})
    assert (
        adjusted is not None and adjusted < 200 * GIB
    )  # the allocations leave some memory of each node unusable
    assert limits == pytest.approx(adjusted / (200 * GIB))
