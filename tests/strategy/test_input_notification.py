"""`SchedulerCore` builds the fair-share input from change notifications, not by polling every running operation:
the strategy writes operations whose usage moves into its change log, controllers those whose pending work moves
(`pooltree.strategy.watch`, `pooltree.strategy.change_log`), and only those (plus controllers that cannot notify) are read again.

Seeded runs move usage (heartbeats start and finish allocations, nodes report memory above the reserve), change pending work behind the strategy's back,
detach and re-attach controllers, and let operations come and go; after every update the input the core built
must equal a full poll (a fresh input from every operation's current usage and needed resources). Runs in which a
notification is dropped must not, so a missed notification shows.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import Job, MapController, TaskSpec, VanillaController
from pooltree.fairshare import update_fair_share
from pooltree.resources import MEMORY, vector
from pooltree.strategy import scheduler as scheduler_module
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.model import FinishedAllocation, NodeHeartbeat
from pooltree.tree import PoolTree, build_fair_share_input
from tests.sim.test_publish_changes import _Controller

GiB = 1024.0**3
LIMITS = vector(user_slots=4, cpu=4, memory=8 * GiB)
POOLS = {"a": {}, "b": {"pools": {"b1": {}, "b2": {}}}}


def _rows(root: Any) -> dict[str, tuple[Any, ...]]:
    """Every operation element of an input: usage, demand and pending count, as floats."""
    rows: dict[str, tuple[Any, ...]] = {}
    stack = [root]
    while stack:
        element = stack.pop()
        children = getattr(element, "children", None)
        if children is None:
            rows[element.id] = (
                element.usage.tolist(),
                element.demand.tolist(),
                element.pending_allocation_count,
            )
        else:
            stack.extend(children)
    return rows


def _polled(core: SchedulerCore) -> dict[str, tuple[Any, ...]]:
    """The input a full poll builds: every running operation's current usage and needed resources."""

    def source(operation_id: str) -> Any:
        controller = core.controllers.get(operation_id)
        if controller is None:
            return None
        return core.strategy.operation_usage(operation_id), np.asarray(
            controller.needed_resources, dtype=float
        )

    root, _ = build_fair_share_input(core.pool_tree, source, nodes=core.nodes_view)
    return _rows(root)


def _controller(rng: random.Random, operation_id: str) -> Any:
    kind = rng.random()
    job = vector(user_slots=1, cpu=rng.choice([0.5, 1.0, 1.5]), memory=rng.choice([0.5, 1.0]) * GiB)
    tasks = [TaskSpec("main", rng.randint(1, 6), job)]
    if kind < 0.15:
        return _Controller(operation_id, rng.randint(0, 4))  # cannot notify: polled
    if kind < 0.55:
        return VanillaController(operation_id, tasks)
    return MapController(operation_id, tasks)


def _run(seed: int, spoil: Callable[[SchedulerCore], None] | None = None, steps: int = 40) -> list[int]:
    """The steps after whose update the core's input differs from a full poll."""
    rng = random.Random(seed)
    tree = PoolTree(parse_pool_trees({"t": {"pools": POOLS}})["t"])
    inputs: list[Any] = []

    def fair_share(root: Any, *args: Any) -> Any:
        inputs.append(root)
        return update_fair_share(root, *args)

    core = SchedulerCore(tree, fair_share=fair_share)
    if spoil is not None:
        spoil(core)
    for index in range(4):
        core.add_node(f"n{index}", LIMITS)
    serial = 0
    detached: dict[str, Any] = {}
    differ = []
    for step in range(steps):
        now = float(step)
        roll = rng.random()
        if roll < 0.35 or len(core.controllers) < 3:
            serial += 1
            operation_id = f"op{serial}"
            core.register_operation(
                operation_id,
                _controller(rng, operation_id),
                user="u",
                pool=rng.choice(["a", "b1", "b2"]),
                now=now,
            )
        elif roll < 0.45:
            core.unregister_operation(rng.choice(sorted(core.controllers)), now)
        elif roll < 0.55:  # the live service detaches a controller and attaches it (or a new one) later
            operation_id = rng.choice(sorted(core.controllers))
            detached[operation_id] = core.controllers[operation_id]
            core.detach_controller(operation_id)
        elif roll < 0.65 and detached:
            operation_id = rng.choice(sorted(detached))
            controller = detached.pop(operation_id)
            if rng.random() < 0.5:
                controller = _controller(rng, operation_id)
            core.attach_controller(operation_id, controller)
        for _ in range(rng.randint(0, 3)):  # pending work changes behind the strategy's back
            controller = core.controllers[rng.choice(sorted(core.controllers))]
            if isinstance(controller, _Controller):
                controller.pending_allocation_count = rng.randint(0, 3)
            else:
                pending = controller._tasks["main"].pending
                if pending and rng.random() < 0.5:
                    pending.pop()
                else:
                    pending.append(Job("main", rng.randrange(controller._tasks["main"].spec.job_count)))
                controller._refresh()
        allocations = sorted(core.strategy.allocations)
        for allocation_id in rng.sample(allocations, min(len(allocations), rng.randint(0, 2))):
            # a node measures more memory than the reserve: usage moves, pending work does not
            reported = core.strategy.allocations[allocation_id].reserve.copy()
            reported[MEMORY] *= rng.choice([1.0, 1.25, 1.5])
            core.report_usage(allocation_id, reported)
        for address in rng.sample(sorted(core.node_limits), rng.randint(1, 3)):
            node = core.strategy.nodes[address]
            ended = [a for a in node.allocations if rng.random() < 0.3]
            finished = [FinishedAllocation(a, rng.choice(["completed", "aborted"])) for a in ended]
            core.process_heartbeat(NodeHeartbeat(address, LIMITS, finished=finished), now)
        core.update_fair_share(now)
        if _rows(inputs[-1]) != _polled(core):
            differ.append(step)
    return differ


def test_input_from_notifications_equals_a_full_poll():
    for seed in range(10):
        assert _run(seed) == [], f"seed {seed}"


def test_a_missed_usage_notification_shows():
    class _Deaf(set):
        def add(self, element: Any) -> None:
            pass

    def deaf(core: SchedulerCore) -> None:
        core.strategy.state.changes.usage = _Deaf()  # usage moves (and registrations) are not written

    assert any(_run(seed, deaf) for seed in range(10))


def test_a_missed_pending_notification_shows(monkeypatch):
    # controllers claim to notify but never do (and are not polled either)
    monkeypatch.setattr(scheduler_module, "watch_pending", lambda controller, into, key: True)
    assert any(_run(seed) for seed in range(10))
