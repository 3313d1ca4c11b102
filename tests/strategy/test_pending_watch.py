"""Controllers notify their watchers when their pending work moves (`pooltree.strategy.watch`), and the
incremental publish's activity check (`heap_changes.requeue`) visits only the notified operations (and those
whose controllers cannot notify) instead of polling every operation's pending count.

The seeded runs change pending work behind the strategy's back (not through a heartbeat) and compare, after every
publish, the incremental scheduler with one whose every publish runs the three passes; a controller that forgets
to notify makes them differ, so a missed notification shows.
"""

from __future__ import annotations

import random
from typing import Any

from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import (
    FinishedAllocation,
    NodeHeartbeat,
    SchedulingTree,
    StrategyConfig,
    TreeScheduler,
)
from pooltree.strategy.change_log import PENDING
from pooltree.strategy.watch import unwatch_pending, watch_pending
from tests.sim.test_publish_changes import (
    _OPS,
    _POOLS,
    _Controller,
    _incremental_and_full,
    _NotifyingController,
    _random_shares,
    _spec,
    _state,
)

GiB = 1024.0**3
JOB = vector(user_slots=1, cpu=1, memory=GiB)


def test_controller_notifies_its_watchers_until_unwatched():
    controller = VanillaController("x", [TaskSpec("main", 3, JOB)])
    first: set[str] = set()
    second: set[str] = set()
    assert watch_pending(controller, first, "x") and watch_pending(controller, second, "x")
    controller._tasks["main"].pending.pop()  # pending work changes outside any strategy call
    controller._refresh()
    assert first == {"x"} and second == {"x"}
    first.clear()
    second.clear()
    unwatch_pending(controller, first, "x")
    controller._refresh()
    assert first == set() and second == {"x"}
    assert not watch_pending(_Controller("y", 1), first, "y")  # no pending_watchers: the caller polls


def test_scheduler_watches_registered_operations_and_polls_the_others():
    scheduler = TreeScheduler(SchedulingTree(JOB * 0, [], StrategyConfig()))
    watched = VanillaController("x", [TaskSpec("main", 2, JOB)])
    scheduler.register_operation("x", watched)
    scheduler.register_operation("y", _Controller("y", 1))
    changes = scheduler.state.changes
    assert watched.pending_watchers == [(changes.pending, "x")]
    assert changes.polled == {"y"}
    changes.skip(PENDING)
    watched._refresh()
    assert changes.read(PENDING)[0] == {"x", "y"}  # notified, and polled
    scheduler.unregister_operation("x")
    scheduler.unregister_operation("y")
    assert watched.pending_watchers == [] and changes.read(PENDING)[0] == set()
    assert changes.polled == set()


def _run(seed: int, factory: Any, steps: int = 30) -> list[int]:
    """Publish a changing tree to two schedulers (incremental, three passes) with controllers from ``factory``
    whose pending counts change behind the strategy's back; the steps after which the two states differ."""
    rng = random.Random(seed)
    config = StrategyConfig(fair_share_starvation_timeout=3.0, fair_share_aggressive_starvation_timeout=6.0)
    limits = vector(user_slots=4, cpu=4, memory=4 * GiB)
    total = limits * 4
    shares, specs = _random_shares(rng)
    current, schedulers = _incremental_and_full(total, specs, config)
    full = schedulers[1]
    controllers: list[dict[str, Any]] = [{}, {}]
    for scheduler in schedulers:
        for index in range(4):
            scheduler.add_node(f"n{index}", limits)
    for op in _OPS:
        pending = rng.randint(0, 4)
        for scheduler, owned in zip(schedulers, controllers, strict=True):
            owned[op] = factory(op, pending)
            scheduler.register_operation(op, owned[op])
    differ = []
    running: list[str] = []
    for step in range(steps):
        now = float(step)
        if rng.random() < 0.5:
            for name in rng.sample(list(shares), rng.randint(1, 3)):
                share = (rng.choice([0.05, 0.1, 0.2, 0.3]), rng.choice([0.1, 0.3]), rng.random() < 0.4)
                shares[name] = share
                specs[name] = _spec(name, share, specs[name].parent if name not in _POOLS else None)
        current = current.with_shares(total, list(specs.values()))
        for scheduler in schedulers:
            scheduler.publish(current, now)
        if _state(schedulers[0]) != _state(full):
            differ.append(step)
        for _ in range(rng.randint(0, 3)):  # behind the strategy's back: no heartbeat, no touch
            op = rng.choice(list(_OPS))
            count = rng.randint(0, 3)
            for owned in controllers:
                owned[op].pending_allocation_count = count
        address = f"n{rng.randrange(4)}"
        ends = [a for a in running if a in schedulers[0].allocations]
        ended = [
            a
            for a in rng.sample(ends, min(len(ends), 2))
            if schedulers[0].allocations[a].node_address == address
        ]
        started = []
        for scheduler in schedulers:
            finished = [FinishedAllocation(a, "completed") for a in ended]
            result = scheduler.process_heartbeat(NodeHeartbeat(address, limits, finished=finished), now)
            started.append([a.id for a in result.allocations_to_start])
        if started[0] != started[1]:
            return [*differ, step]  # the schedulers took different decisions: their states part from here
        running.extend(started[0])
    return differ


def test_notified_pending_changes_keep_the_incremental_publish_exact():
    for seed in range(12):
        assert _run(seed, _NotifyingController) == [], f"seed {seed}"


def test_a_missed_notification_shows():
    """The check above can fail: controllers that claim to notify but do not leave stale activity behind."""
    missed = [
        seed for seed in range(12) if _run(seed, lambda op, n: _NotifyingController(op, n, forgetful=True))
    ]
    assert missed
