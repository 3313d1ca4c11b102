"""A tree view's capture keeps the facts of the operations that did not change since the tree's last capture
(``orchid.view_parts`` with the previous parts, ``TreeViews.facts_of``), and shows exactly what a capture made
afresh shows: on a live-like sequence (operations started into queues and running pools, nodes heartbeating,
fair-share updates, operations aborted from the head and the middle of a queue, moved between pools, reweighted,
suspended and resumed), after every step the view assembled from the kept capture is byte for byte that of a plain
capture (no previous parts), and operations that only saw others join their queue keep their facts object."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path
from typing import Any

from pooltree.errors import PooltreeError
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live.views import assemble_view, capture_view
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

POOLS = {
    "a": {"weight": 2.0},
    "q": {"max_running_operation_count": 1},
    "r": {"max_running_operation_count": 2},
}


def _heartbeat(service: SchedulerService, address: str, now: float) -> None:
    data = {"node_address": address, "resource_limits": {"user_slots": 4, "cpu": 4, "memory": 8 << 30}}
    service.scheduler.process_heartbeat(parse_heartbeat(data), now)


def _bytes(view: dict[str, Any]) -> str:
    return json.dumps(view, default=repr)


def _step(service: SchedulerService, rng: random.Random, ids: list[str], now: float) -> str:
    """One live-like change, chosen by ``rng``; its name."""
    scheduler = service.scheduler
    live = [
        op_id for op_id in ids if op_id in scheduler.operations and not scheduler.operations[op_id].is_final
    ]
    kind = rng.choice(
        ["start", "start", "start", "heartbeat", "update", "abort", "move", "weight", "suspend"]
    )
    if kind == "start" or not live:
        pool = rng.choice(sorted(POOLS))
        spec = {"pool": pool, "tasks": {"main": {"command": "true", "job_count": 3, "cpu_limit": 1}}}
        ids.append(scheduler.start_operation("vanilla", spec, "alice", now).id)
        return "start"
    if kind == "heartbeat":
        _heartbeat(service, f"n{rng.randrange(3)}", now)
    elif kind == "update":
        scheduler.update_fair_share("default", now)
    elif kind == "abort":
        scheduler.finish_operation(rng.choice(live), "aborted", now)
    elif kind == "move":  # refused when a running operation would overfill a queue's running limit
        with contextlib.suppress(PooltreeError):
            scheduler.update_operation_parameters(rng.choice(live), {"pool": rng.choice(sorted(POOLS))}, now)
    elif kind == "weight":
        scheduler.update_operation_parameters(rng.choice(live), {"weight": rng.choice([1.0, 2.5])}, now)
    else:
        op_id = rng.choice(live)
        if scheduler.operations[op_id].suspended:
            scheduler.resume_operation(op_id, now)
        else:
            scheduler.suspend_operation(op_id, now)
    return kind


def test_kept_facts_show_what_a_fresh_capture_shows(tmp_path: Path) -> None:
    now = 1000.0
    service = SchedulerService(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), authentication=False)
    try:
        cypress = service.cypress
        cypress.create("scheduler_pool_tree", "//sys/pool_trees/default")
        cypress.set("//sys/pool_trees/@default_tree", "default")
        for name, attributes in POOLS.items():
            cypress.create("scheduler_pool", f"//sys/pool_trees/default/{name}", attributes=attributes)
        scheduler = service.scheduler
        for i in range(3):
            _heartbeat(service, f"n{i}", now)
        ids: list[str] = []
        scheduler.update_fair_share("default", now)
        rng = random.Random(32)
        kinds: set[str] = set()
        kept_after_starts = 0
        for _ in range(160):
            now += 0.25
            before = scheduler.views._last.get("default")
            kind = _step(service, rng, ids, now)
            kinds.add(kind)
            with scheduler.lock:
                scheduler.views.forget("default")
                kept = scheduler.views.capture("default")
                core = scheduler.cores["default"]
                fresh = capture_view(core)
            assert kept.parts.unpublished.keys() == fresh.parts.unpublished.keys()
            assert kept.parts.queues == fresh.parts.queues
            assert _bytes(assemble_view(kept)) == _bytes(assemble_view(fresh)), kind
            if kind == "start" and before is not None:
                # the started operation joined a queue or runs: every other pending one keeps its facts
                same = [
                    op_id
                    for op_id, facts in before.unpublished.items()
                    if kept.parts.unpublished.get(op_id) is facts
                ]
                kept_after_starts += len(same)
        assert kinds == {"start", "heartbeat", "update", "abort", "move", "weight", "suspend"}
        assert kept_after_starts > 50
    finally:
        service.store.close()
