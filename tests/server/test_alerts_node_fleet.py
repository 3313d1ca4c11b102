"""``no_online_node_to_schedule_job`` computed over node groups (``alerts.NodeFleet``: nodes of a tree grouped by
tags and limits, once per fair-share update) gives the error the per-node walk gave, for every operation; the
walk cost operations x nodes per update (a third of the scheduler's CPU with 300 nodes and 200 operations)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pooltree.alerts import AlertSettings, NodeFleet, below_min_spare, no_node_fits_error, unschedulable_task
from pooltree.config import parse_pool_trees
from pooltree.config.tags import TagFilter
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

GIB = 1 << 30


def per_node_unfit(scheduler: LiveScheduler, op: Any) -> dict[str, Any] | None:
    """The per-node walk ``SchedulerAlerts._unfit`` made before the groups (the reference): which nodes match,
    fall below the spare and fit, node by node; the error is built from them by the same function."""
    center = scheduler.alert_center
    if op.is_final or op.controller.pending_allocation_count == 0:
        return None
    tasks = op.controller.pending_task_resources()
    tag_filter = TagFilter.parse(op.model.scheduling_tag_filter or "", "spec.scheduling_tag_filter")
    for tree in op.trees:
        nodes = [n for n in scheduler.nodes.values() if tree in n.trees and tag_filter.matches(n.tags)]
        in_tree = sum(1 for n in scheduler.nodes.values() if tree in n.trees)
        if in_tree < max(center.settings.safe_online_node_count, 1):
            continue
        spare = center._min_spare(tree)
        usable = [n for n in nodes if not below_min_spare(n.resource_limits, spare)]
        found = unschedulable_task(tasks, [n.resource_limits for n in usable]) if usable else None
        if not usable:
            found = next(iter(tasks.items()), None)
        if found is None:
            continue
        name, needed = found
        limits = [n.resource_limits for n in nodes]  # every node, not each kind once
        return no_node_fits_error(
            tree, name, needed, limits, len(nodes), len(nodes) - len(usable), spare, tag_filter.text
        )
    return None


def two_trees(tmp_path: Path, safe_online_node_count: int, **settings: Any) -> LiveScheduler:
    """A scheduler with trees ``default`` (nodes without tag ``gpu``) and ``gpu`` (nodes with it)."""
    trees = {
        "default": {"config": {"node_tag_filter": "!gpu"}, "pools": {}},
        "gpu": {"config": {"node_tag_filter": "gpu"}, "pools": {}},
    }
    scheduler = LiveScheduler(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        alert_settings=AlertSettings(safe_online_node_count=safe_online_node_count),
        **settings,
    )
    scheduler.apply_pool_trees(parse_pool_trees(trees), "default", 0.0)
    return scheduler


def test_grouped_nodes_give_the_per_node_errors(tmp_path: Path) -> None:
    rng = random.Random(7)
    scheduler = two_trees(tmp_path, safe_online_node_count=3)
    for index in range(60):
        tags = rng.choice([[], ["ssd"], ["ssd", "fast"], ["gpu"], ["gpu", "ssd"]])
        cpu = rng.choice([0.5, 2, 8])
        data = {
            "node_address": f"n{index}",
            "resource_limits": {"user_slots": 4, "cpu": cpu, "memory": rng.choice([1, 8]) * GIB},
            "tags": tags,
        }
        scheduler.process_heartbeat(parse_heartbeat(data), 0.5)
    operations = []
    for index in range(40):
        task: dict[str, Any] = {"command": "true", "job_count": 2, "cpu_limit": rng.choice([0.25, 1, 4, 16])}
        if rng.random() < 0.3:
            task["memory_limit"] = rng.choice([1, 4, 16]) * GIB
        spec: dict[str, Any] = {"tasks": {"main": task}}
        if rng.random() < 0.5:
            spec["scheduling_tag_filter"] = rng.choice(["ssd", "fast", "ssd & !gpu", "missing"])
        if rng.random() < 0.3:
            spec["pool_trees"] = ["gpu"]
        operations.append(scheduler.start_operation("vanilla", spec, f"u{index % 3}", 1.0))
    fleet = NodeFleet(scheduler.nodes.values())
    kinds = {error is None for error in (per_node_unfit(scheduler, op) for op in operations)}
    assert kinds == {True, False}  # some operations fit, some do not
    verdicts: dict[Any, Any] = {}  # shared across operations, as operations_to_fail shares them in one check
    for op in operations:
        expected = per_node_unfit(scheduler, op)
        assert scheduler.alert_center._unfit(op) == expected
        assert scheduler.alert_center._unfit(op, fleet) == expected
        assert scheduler.alert_center._unfit(op, fleet, verdicts) == expected
    assert len(verdicts) < len(operations)  # operations of one spec were judged once


def test_the_kept_groups_follow_nodes_that_change_join_and_leave(tmp_path: Path) -> None:
    """The groups are kept between checks (``SchedulerAlerts.fleet``) and rebuilt when a node joins, leaves or
    changes its limits, tags or trees: after every such step the errors are the per-node walk's."""
    rng = random.Random(11)
    scheduler = two_trees(tmp_path, safe_online_node_count=1, node_heartbeat_timeout=10.0)

    def beat(address: str, now: float) -> None:
        data = {
            "node_address": address,
            "resource_limits": {
                "user_slots": 4,
                "cpu": rng.choice([1, 4]),
                "memory": rng.choice([1, 8]) * GIB,
            },
            "tags": rng.choice([[], ["ssd"], ["gpu"]]),
        }
        scheduler.process_heartbeat(parse_heartbeat(data), now)

    for index in range(4):
        beat(f"n{index}", 0.5)
    operations = [
        scheduler.start_operation(
            "vanilla",
            {
                "tasks": {
                    "main": {"command": "true", "job_count": 1, "cpu_limit": cpu, "memory_limit": memory}
                },
                **({"scheduling_tag_filter": "ssd"} if index % 2 else {}),
            },
            "u",
            1.0,
        )
        for index, (cpu, memory) in enumerate([(2, GIB // 2), (1, 4 * GIB), (4, 4 * GIB), (0.5, GIB // 2)])
    ]
    seen: set[bool] = set()
    now = 1.0
    for step in range(40):
        now += 1.0
        if step % 10 == 9:
            scheduler.sweep_nodes(now + 11.0)  # every node silent past the timeout: all leave
            now += 11.0
        for index in rng.sample(range(6), 3):
            beat(f"n{index}", now)
        for op in operations:
            expected = per_node_unfit(scheduler, op)
            seen.add(expected is None)
            assert scheduler.alert_center._unfit(op) == expected, (step, op.id)
    assert seen == {True, False}


def test_a_read_verdict_is_kept_per_grouping_and_tree_settings(tmp_path: Path) -> None:
    """Reads (``_unfit(op)``: an operation's ``alerts``) judge operations of one spec once per grouping of the
    nodes and per each tree's ``min_spare_allocation_resources_on_node``: a second read of the same spec finds no
    verdict anew, a spare that no node can keep (a pool trees change) or a node joining judges anew, and each
    answer is the per-node walk's, a copy the caller may change."""
    scheduler = two_trees(tmp_path, safe_online_node_count=1)
    center = scheduler.alert_center
    judged: list[str] = []
    unfit_tasks = center._unfit_tasks

    def counted(op: Any, tasks: Any, fleet: Any) -> Any:
        judged.append(op.id)
        return unfit_tasks(op, tasks, fleet)

    center._unfit_tasks = counted  # type: ignore[method-assign]
    beat = {"node_address": "n0", "resource_limits": {"user_slots": 4, "cpu": 4, "memory": 8 * GIB}}
    scheduler.process_heartbeat(parse_heartbeat(beat), 0.5)
    spec = {"tasks": {"main": {"command": "true", "job_count": 2, "cpu_limit": 2}}}
    small, twin = (scheduler.start_operation("vanilla", spec, "u", 1.0) for _ in range(2))
    big = scheduler.start_operation(
        "vanilla", {"tasks": {"main": {"command": "true", "job_count": 1, "cpu_limit": 8}}}, "u", 1.0
    )
    for op in (small, twin, big, small, big):
        assert center._unfit(op) == per_node_unfit(scheduler, op)
    assert judged == [small.id, big.id]  # the twin and the repeats: the kept verdicts
    error = center._unfit(big)
    assert error is not None
    error["attributes"]["changed"] = True  # the caller's copy
    assert center._unfit(big) == per_node_unfit(scheduler, big)
    # a spare of 6 cpu: the 4-cpu node can run nothing of tree default
    trees = {
        "default": {
            "config": {"node_tag_filter": "!gpu", "min_spare_allocation_resources_on_node": {"cpu": 6}},
            "pools": {},
        },
        "gpu": {"config": {"node_tag_filter": "gpu"}, "pools": {}},
    }
    scheduler.apply_pool_trees(parse_pool_trees(trees), "default", 2.0)
    judged.clear()
    assert center._unfit(small) is not None
    assert center._unfit(small) == per_node_unfit(scheduler, small)
    assert judged == [small.id]
    big_node = {"node_address": "n1", "resource_limits": {"user_slots": 4, "cpu": 16, "memory": 8 * GIB}}
    scheduler.process_heartbeat(parse_heartbeat(big_node), 3.0)  # joins: grouped anew
    assert center._unfit(small) is None
    assert judged == [small.id, small.id]


def test_operations_to_fail_groups_the_nodes_once_while_none_moves(tmp_path: Path, monkeypatch: Any) -> None:
    """The check after each fair-share update (``operations_to_fail``) judges against the kept groups
    (``SchedulerAlerts.fleet``): no grouping of every node per update while no node joins, leaves or changes, and
    after a change its verdicts are the per-node walk's."""
    from pooltree.server.live import alerts as live_alerts

    made: list[NodeFleet] = []

    class Counted(NodeFleet):
        def __init__(self, nodes: Any) -> None:
            super().__init__(nodes)
            made.append(self)

    monkeypatch.setattr(live_alerts, "NodeFleet", Counted)
    scheduler = two_trees(tmp_path, safe_online_node_count=1)
    scheduler.alert_center.settings = AlertSettings(
        safe_online_node_count=1, unschedulable_operation_timeout=0.0
    )
    beat = {"node_address": "n0", "resource_limits": {"user_slots": 4, "cpu": 4, "memory": 8 * GIB}}
    scheduler.process_heartbeat(parse_heartbeat(beat), 0.5)
    operations = [
        scheduler.start_operation(
            "vanilla", {"tasks": {"main": {"command": "true", "job_count": 1, "cpu_limit": cpu}}}, "u", 1.0
        )
        for cpu in (2, 8)
    ]

    def failing(now: float) -> set[str]:
        return {operation_id for operation_id, _ in scheduler.alert_center.operations_to_fail(now, "default")}

    def expected() -> set[str]:
        return {
            op.id for op in operations if op.state != "pending" and per_node_unfit(scheduler, op) is not None
        }

    assert failing(2.0) == expected() == {operations[1].id}
    assert failing(3.0) == expected()
    assert len(made) == 1  # one grouping for both checks
    bigger = {"node_address": "n0", "resource_limits": {"user_slots": 4, "cpu": 16, "memory": 8 * GIB}}
    scheduler.process_heartbeat(parse_heartbeat(bigger), 4.0)  # the node grew: grouped anew
    assert failing(5.0) == expected() == set()
    assert len(made) == 2
