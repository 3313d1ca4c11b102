"""`SchedulerCore.enforce_time_limits` looks only at operations that can have a limit due (`TimeLimits`), with the
same stops and failures, in the same order, as a walk over every operation every period."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import AbortReason, NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.time_limits import (
    job_time_limit,
    job_time_limit_error,
    operation_time_limit_error,
)
from pooltree.tree import PoolTree

GiB = 1024.0**3
NODE = vector(user_slots=64, cpu=64, memory=64 * GiB)


def _walk_every_operation(core: SchedulerCore, now: float) -> list[tuple[str, dict[str, Any]]]:
    """The rule as a walk over every registered operation (what the watch must reproduce)."""
    failed = []
    for operation_id in list(core.controllers):
        op = core.pool_tree.operations.get(operation_id)
        if op is None:
            continue
        limit, job_limits = core.time_limits.limits_of(operation_id, op.spec)
        if limit is not None and now - op.start_time > limit:
            failed.append((operation_id, operation_time_limit_error(limit, operation_id)))
            continue
        runtime = core.strategy.operations.get(operation_id)
        if job_limits is None or runtime is None:
            continue
        for allocation in list(runtime.lists):
            job_limit = job_time_limit(op.spec, allocation.task)
            if job_limit is None or now - allocation.start_time <= job_limit or allocation.preempted:
                continue
            core.strategy.stop_allocation(
                allocation,
                AbortReason.JOB_TIME_LIMIT_EXCEEDED,
                f"Job time limit exceeded: the job ran {now - allocation.start_time:g}s, its job_time_limit "
                f"is {job_limit:g}s",
                now,
                error=job_time_limit_error(job_limit),
            )
    return failed


def _spec(rng: random.Random, index: int) -> Any:
    kind = rng.randrange(5)
    task: dict[str, Any] = {"command": "sleep 1000", "job_count": 3}
    document: dict[str, Any] = {"pool": "a", "tasks": {"main": task}}
    if kind in (1, 3):
        document["time_limit"] = rng.randrange(5, 60) * 1000  # milliseconds
    if kind in (2, 3):
        task["job_time_limit"] = f"{rng.randrange(5, 60)}s"
    if kind == 4 and index % 2:
        return {"pool": "a", "time_limit": rng.randrange(5, 60) * 1000}  # a plain map, read every period
    return OperationSpec.parse(document)


def _run(seed: int, *, watched: bool) -> list[Any]:
    """Operations arrive and leave over two minutes; returns what enforcing the limits did, period by period."""
    rng = random.Random(seed)
    tree = PoolTree(parse_pool_trees({"t": {"pools": {"a": {"max_running_operation_count": 1000}}}})["t"])
    core = SchedulerCore(tree)
    core.add_node("n0", NODE)
    trace: list[Any] = []
    serial = 0
    for second in range(120):
        now = float(second)
        for _ in range(rng.randrange(3)):
            serial += 1
            operation_id = f"op-{serial:03d}"
            controller = VanillaController(
                operation_id, [TaskSpec("main", 3, vector(user_slots=1, cpu=1, memory=GiB))]
            )
            if rng.random() < 0.2:  # attached as the live service does (its registry fills the pool tree)
                tree.register_operation(operation_id, user="u", pool="a", spec=_spec(rng, serial), now=now)
                core.attach_controller(operation_id, controller)
            else:
                core.register_operation(
                    operation_id, controller, user="u", pool="a", spec=_spec(rng, serial), now=now
                )
        for operation_id in list(core.controllers):
            if rng.random() < 0.02:
                if rng.random() < 0.5:
                    core.unregister_operation(operation_id, now, state="aborted")
                else:
                    core.detach_controller(operation_id)
                    tree.unregister_operation(operation_id)
        failed = core.enforce_time_limits(now) if watched else _walk_every_operation(core, now)
        for operation_id, _error in failed:
            core.unregister_operation(operation_id, now, state="failed")
        core.update_fair_share(now)
        core.process_heartbeat(NodeHeartbeat("n0", NODE), now)
        trace.append(
            (now, [operation_id for operation_id, _ in failed], core.nodes_with_queued_preemptions())
        )
        trace.extend(
            (event["event"], event.get("operation_id"), event.get("allocation_id"), event.get("reason"))
            for event in core.drain_events()
        )
    return trace


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_watch_stops_and_fails_what_a_walk_over_every_operation_does(seed: int) -> None:
    watched = _run(seed, watched=True)
    walked = _run(seed, watched=False)
    assert watched == walked
    assert any(len(entry) == 4 and entry[0] == "operation_failed" for entry in watched)
    assert any(len(entry) == 4 and entry[3] == "job_time_limit_exceeded" for entry in watched)


def test_operations_without_limits_are_not_looked_at() -> None:
    tree = PoolTree(parse_pool_trees({"t": {"pools": {"a": {"max_running_operation_count": 1000}}}})["t"])
    core = SchedulerCore(tree)
    for index in range(50):
        controller = VanillaController(f"op-{index}", [TaskSpec("main", 1, vector(user_slots=1, cpu=1))])
        spec = OperationSpec.parse({"pool": "a", "time_limit": 10000} if index == 7 else {"pool": "a"})
        core.register_operation(f"op-{index}", controller, user="u", pool="a", spec=spec, now=0.0)
    looked_at: list[str] = []
    original = core.time_limits.limits_of

    def counting(operation_id: str, spec: Any) -> Any:
        looked_at.append(operation_id)
        return original(operation_id, spec)

    core.time_limits.limits_of = counting  # type: ignore[method-assign]
    assert core.enforce_time_limits(5.0) == [] and looked_at == []
    assert [operation_id for operation_id, _ in core.enforce_time_limits(10.5)] == ["op-7"]
    assert looked_at == ["op-7"]
