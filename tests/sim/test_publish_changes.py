"""The incremental same-structure publish (`pooltree/strategy/changes.py`) leaves the strategy exactly as the
three-pass publish (every element visited) does.

The heartbeat path marks what it touches; a missed mark would leave some element stale. Each example runs a busy
simulation twice — once with the incremental publish, once with it switched off — and after every publish
compares every element's published state: statuses, starvation clocks, usage, shares, satisfaction, activity,
deactivation counts, preemption priorities, preemptible lists, and each pool's heap as the set of its valid
entries (key, least recently served, tree position) — what the best-leaf choice reads.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pooltree.resources import vector
from pooltree.sim import Simulation, parse_scenario
from pooltree.strategy import (
    ROOT_ID,
    Allocation,
    ElementSpec,
    FinishedAllocation,
    NodeHeartbeat,
    SchedulingTree,
    StrategyConfig,
    TreeScheduler,
)
from pooltree.strategy import heap_changes as heap_changes_module
from pooltree.strategy import order as order_module
from pooltree.strategy.changes import ChangedPublisher
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.elements import ControllerDefaults, Speculation
from pooltree.strategy.model import SchedulingStatus
from tests.sim.test_sim_engine import mixed_document
from tests.strategy.test_operation_changes import positions

GiB = 1024.0**3


def _state(scheduler: Any) -> tuple[Any, ...]:
    rows: list[Any] = []
    position = positions(scheduler)  # order keys are not positions (`pooltree/strategy/order.py`)
    for element_id in scheduler.tree.order:
        element = scheduler.state.elements[element_id]
        state = scheduler.starvation.get(element_id)
        row: tuple[Any, ...] = (
            element_id,
            element.spec is scheduler.tree.elements[element_id],
            element.status,
            element.starvation,
            None if state is None else (state.status, state.below_fair_share_since, state.starving_since),
            element.active,
            element.sat,
            element.inactive_reason,
            tuple(element.usage),
            element.fair_share,
            element.demand_share,
            element.blocked,
            element.fifo_key,
            element.active and element.keyed_start == element.last_start,
        )
        runtime = element.op
        if element.is_op and runtime is not None:
            row += (
                runtime.preemption_priority,
                sorted(scheduler.publisher.changes.deactivation_reasons(element).items()),
                runtime.lists_key,
                runtime.lists_settled,
                [(allocation.id, allocation.preemption_status) for allocation in runtime.lists],
            )
        if not element.is_op:
            row += (
                sorted(
                    (entry[0], entry[1], position[entry[4].id])
                    for entry in element.heap
                    if entry[3] == entry[4].version and entry[4].active
                ),
            )
        rows.append(row)
    priorities = {level: [e.id for e in listed] for level, listed in scheduler.state.ops_by_priority.items()}
    return tuple(rows), sorted(priorities.items()), scheduler.last_update_time


def _states(document: dict[str, Any], monkeypatch: Any, incremental: bool) -> tuple[list[Any], int]:
    states: list[Any] = []
    used = [0]
    publish = TreeScheduler.publish
    changes = ChangedPublisher.publish_changes

    def recorded(self: Any, tree: Any, now: Any) -> None:
        publish(self, tree, now)
        states.append(_state(self))

    def switched(self: Any, tree: Any, now: float, total: Any, respecced: Any, changed: Any = None) -> bool:
        if not incremental:
            self.forget_changes()
            return False
        done = changes(self, tree, now, total, respecced, changed)
        used[0] += done
        return done

    update = SchedulerCore.update_fair_share

    def checked(self: Any, now: float) -> Any:
        """The (usage, needed) the core hands the input (kept per operation while unchanged) are current."""
        result = update(self, now)
        for operation_id, controller in self.controllers.items():
            found = self.input_resources.resources(operation_id)
            assert found is not None
            assert found[0].tolist() == self.strategy.operation_usage(operation_id).tolist(), operation_id
            assert found[1].tolist() == np.asarray(controller.needed_resources).tolist(), operation_id
        return result

    with monkeypatch.context() as patch:
        patch.setattr(SchedulerCore, "update_fair_share", checked)
        patch.setattr(TreeScheduler, "publish", recorded)
        patch.setattr(ChangedPublisher, "publish_changes", switched)
        # every re-keyed operation's satisfaction through the bulk path (`satisfaction_ratios`), which a tree of
        # this size would otherwise reach only in busy publishes; the direct test below keeps the per-element one
        patch.setattr(heap_changes_module, "_BULK_SATISFACTION", 1)
        Simulation(parse_scenario(copy.deepcopy(document), source="test")).run()
    return states, used[0]


TWO_SIMULATIONS = settings(
    max_examples=3,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: each example is two simulations
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
"""Hypothesis settings of a test whose example runs a busy simulation twice (also `test_update_in_parts.py`)."""
BUSY_SEEDS = given(seed=st.integers(1, 10_000), jitter=st.sampled_from(["0s", "200ms", "700ms"]))
"""The seed and heartbeat jitter of `mixed_document`'s busy simulation."""


@TWO_SIMULATIONS
@BUSY_SEEDS
def test_incremental_publish_equals_three_passes(monkeypatch, seed, jitter):
    # monkeypatch.context() inside _states undoes its patches for every example
    document = mixed_document(until="8m", seed=seed)
    document["scheduler"]["node_heartbeat_jitter"] = jitter
    incremental, used = _states(document, monkeypatch, incremental=True)
    full, _ = _states(document, monkeypatch, incremental=False)
    assert used > len(incremental) // 2  # most publishes took the incremental path
    assert len(incremental) == len(full)
    for number, (mine, theirs) in enumerate(zip(incremental, full, strict=True)):
        assert mine == theirs, f"publish {number} differs"
    counts = [row[-4] for row in incremental[-1][0] if len(row) > 15]
    assert any(counts)  # idle operations were counted


class _Controller(ControllerDefaults):
    """A controller whose pending work also changes without the strategy hearing of it (as a live one may)."""

    def __init__(
        self, operation_id: str, pending: int, *, watchers: list[tuple[set[str], str]] | None = None
    ):
        self.pending_watchers = watchers
        self.speculation: Speculation | None = None
        self.initial_min_needed_resources: Any = None
        self.operation_id = operation_id
        self.pending_allocation_count = pending
        self.started = 0

    @property
    def needed_resources(self) -> Any:
        return vector(user_slots=1, cpu=0.1, memory=0.3 * GiB) * self.pending_allocation_count

    @property
    def min_needed_resources(self) -> Any:
        return vector(user_slots=1, cpu=0.1, memory=0.3 * GiB)

    def schedule_allocation(self, node: Any, available: Any, now: float) -> Allocation | None:
        if self.pending_allocation_count <= 0 or available[1] < 0.1:
            return None
        self.pending_allocation_count -= 1
        self.started += 1
        resources = vector(user_slots=1, cpu=0.1, memory=0.3 * GiB)
        return Allocation(f"{self.operation_id}/{self.started}", self.operation_id, resources)

    def on_allocation_finished(self, allocation: Allocation, finished: Any, now: float) -> None:
        if finished.state != "completed":
            self.pending_allocation_count += 1


_POOLS = {"a": ROOT_ID, "b": ROOT_ID, "a1": "a", "a2": "a"}
_OPS = {"x": "a1", "y": "a1", "z": "a2", "w": "b", "v": "b"}


def _spec(element_id: str, share: tuple[float, float, bool], parent: str | None = None) -> ElementSpec:
    if element_id == ROOT_ID:
        return ElementSpec(
            id=ROOT_ID,
            parent=None,
            fair_share=np.ones(5),
            demand_share=np.ones(5),
            scheduling_status=SchedulingStatus.NORMAL,
        )
    fair, demand, below = share
    return ElementSpec(
        id=element_id,
        parent=parent or _OPS.get(element_id) or _POOLS[element_id],
        kind="operation" if parent or element_id in _OPS else "pool",
        fair_share=np.array([fair, fair, fair / 2, fair, 0.0]),
        demand_share=np.array([demand, demand, demand / 2, demand, 0.0]),
        scheduling_status=SchedulingStatus.BELOW_FAIR_SHARE if below else SchedulingStatus.NORMAL,
        preemption_mode="graceful" if element_id == "v" else "normal",
    )


def _random_shares(rng: random.Random) -> tuple[dict[str, Any], dict[str, ElementSpec]]:
    """Random (fair, demand, below) shares of every pool and operation, and the specs made from them."""
    shares = {
        name: (rng.choice([0.1, 0.2, 0.3]), rng.choice([0.1, 0.3]), rng.random() < 0.3)
        for name in [*_POOLS, *_OPS]
    }
    specs = {name: _spec(name, shares.get(name, (1.0, 1.0, False))) for name in [ROOT_ID, *shares]}
    return shares, specs


def _incremental_and_full(
    total: Any, specs: dict[str, ElementSpec], config: StrategyConfig
) -> tuple[SchedulingTree, list[TreeScheduler]]:
    """The tree of ``specs`` and two schedulers of it: the incremental one, and one whose every publish runs
    the three passes (its incremental step is refused) and which takes a tree derived by operation changes as a
    new structure (its ``delta`` hidden: every element numbered and every heap made anew)."""
    current = SchedulingTree(total, list(specs.values()), config)
    schedulers = [TreeScheduler(current), TreeScheduler(current)]
    full = schedulers[1]
    refused = full.publisher.changes
    refused.publish_changes = lambda tree, now, total, respecced, changed=None: (  # type: ignore[method-assign]
        refused.forget_changes(),
        False,
    )[1]
    publish = full.publish

    def whole(tree: SchedulingTree, now: float | None) -> None:
        if tree.delta is not None:
            tree = copy.copy(tree)
            tree.delta = None
        publish(tree, now)

    full.publish = whole  # type: ignore[method-assign]
    return current, schedulers


@settings(max_examples=25, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(seed=st.integers(0, 2**32 - 1))
def test_incremental_publish_follows_controllers_and_heartbeats(seed):
    """Direct `TreeScheduler` use: shares move on some elements, heartbeats start and finish allocations,
    operations come and go (trees derived by `with_operation_changes`), and controllers change their pending work
    behind the strategy's back; after every publish the incremental scheduler's state equals the one of a
    scheduler whose every publish runs the three passes (and numbers every element after operation changes).
    Allocations use amounts whose sums are inexact in binary, so a pool re-summed differently than a rebuild
    would show."""
    _follow_controllers_and_heartbeats(seed)


@settings(max_examples=10, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(seed=st.integers(0, 2**32 - 1), gap=st.sampled_from([1, 2, 3, 5]))
def test_operation_changes_without_room_between_order_keys(seed, gap):
    """As above with order keys packed tightly (`order.GAP` of a few units): added operations find no room
    between their neighbours, so blocks are numbered anew in place (their kept heap entries re-keyed) or every
    element is numbered again (every heap made anew); the state stays the one of the full publishes."""
    saved = order_module.GAP
    order_module.GAP = gap
    try:
        _follow_controllers_and_heartbeats(seed)
    finally:
        order_module.GAP = saved


def _follow_controllers_and_heartbeats(seed: int) -> None:
    rng = random.Random(seed)
    config = StrategyConfig(fair_share_starvation_timeout=3.0, fair_share_aggressive_starvation_timeout=6.0)
    limits = vector(user_slots=4, cpu=4, memory=4 * GiB)
    total = limits * 4
    # some elements start below their fair share: the first timed publish must evaluate every status (the one
    # at construction has no time)
    shares, specs = _random_shares(rng)
    current, schedulers = _incremental_and_full(total, specs, config)
    full = schedulers[1]
    controllers: list[dict[str, _Controller]] = [{}, {}]

    def register(op: str, pending: int) -> None:
        for scheduler, owned in zip(schedulers, controllers, strict=True):
            owned[op] = _Controller(op, pending)
            scheduler.register_operation(op, owned[op])

    for scheduler in schedulers:
        for index in range(4):
            scheduler.add_node(f"n{index}", limits)
    for op in _OPS:
        register(op, rng.randint(0, 6))
    running: list[list[str]] = [[], []]
    for step in range(40):
        now = float(step)
        ops = list(controllers[0])
        roll = rng.random()
        if roll < 0.15 and len(ops) > 2:  # an operation leaves
            gone = rng.choice(ops)
            for scheduler, owned in zip(schedulers, controllers, strict=True):
                scheduler.unregister_operation(gone)
                del owned[gone]
            del specs[gone], shares[gone]
            current = current.with_operation_changes(total, list(specs.values()), {gone}, [])
        elif roll < 0.3:  # one arrives
            new = f"op{step}"
            shares[new] = (rng.choice([0.05, 0.1, 0.2]), rng.choice([0.1, 0.3]), rng.random() < 0.3)
            specs[new] = _spec(new, shares[new], rng.choice(["a1", "a2", "b"]))
            register(new, rng.randint(0, 4))
            current = current.with_operation_changes(total, list(specs.values()), set(), [new])
        else:
            if rng.random() < 0.6:  # new specs for a few elements, the very same objects for the others
                for name in rng.sample(list(shares), rng.randint(1, 3)):
                    share = (rng.choice([0.05, 0.1, 0.2, 0.3]), rng.choice([0.1, 0.3]), rng.random() < 0.4)
                    shares[name] = share
                    specs[name] = _spec(name, share, specs[name].parent if name not in _POOLS else None)
            current = current.with_shares(total, list(specs.values()))
        for scheduler in schedulers:
            scheduler.publish(current, now)
        assert _state(schedulers[0]) == _state(full), f"step {step}"
        for _ in range(rng.randint(0, 3)):
            op = rng.choice(list(controllers[0]))
            count = rng.randint(0, 3)
            for owned in controllers:
                owned[op].pending_allocation_count = count
        for _ in range(rng.randint(1, 4)):
            address = f"n{rng.randrange(4)}"
            ends = [a for a in running[0] if schedulers[0].allocations.get(a) is not None]
            ended = rng.sample(ends, min(len(ends), rng.randint(0, 2)))
            state = rng.choice(["completed", "aborted"])
            results = []
            for index, scheduler in enumerate(schedulers):
                finished = [
                    FinishedAllocation(a, state)
                    for a in ended
                    if scheduler.allocations[a].node_address == address
                ]
                result = scheduler.process_heartbeat(NodeHeartbeat(address, limits, finished=finished), now)
                running[index].extend(a.id for a in result.allocations_to_start)
                results.append(
                    (
                        [a.id for a in result.allocations_to_start],
                        [r.allocation_id for r in result.allocations_to_preempt],
                    )
                )
            assert results[0] == results[1], f"step {step}"
    for scheduler in schedulers:
        for op in controllers[0]:
            scheduler.element_view(op)
    assert _state(schedulers[0]) == _state(full)


class _NotifyingController(_Controller):
    """A `_Controller` that reports every change of its pending count to its watchers (`pooltree.strategy.watch`),
    or, ``forgetful``, claims to and never does."""

    def __init__(self, operation_id: str, pending: int, *, forgetful: bool = False):
        self._forgetful = forgetful
        super().__init__(operation_id, pending, watchers=[])

    @property  # type: ignore[override]
    def pending_allocation_count(self) -> int:
        return self._count

    @pending_allocation_count.setter
    def pending_allocation_count(self, count: int) -> None:
        self._count = count
        if not self._forgetful:
            for into, key in self.pending_watchers or ():
                into.add(key)


def _timed_spec(name: str, below: bool, timeout: float | None, aggressive: bool | None) -> ElementSpec:
    spec = _spec(name, (0.2, 0.3, below))
    if name not in _OPS:  # a pool's own starvation timeout and aggressive switch (operations inherit them)
        spec.fair_share_starvation_timeout = timeout
        spec.enable_aggressive_starvation = aggressive
    return spec


@settings(max_examples=40, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(seed=st.integers(0, 2**32 - 1), pool_starvation=st.booleans(), notifying=st.booleans())
def test_starvation_deadlines_fall_due_without_other_changes(seed, pool_starvation, notifying):
    """Elements stay below their fair share with the very same spec objects, no heartbeat touches them, and time
    moves in uneven steps (sometimes not at all, sometimes back): the incremental publish skips them until their
    starvation deadline falls due (`StarvationState.due`), yet every status, clock and preemption priority equals
    the one of advancing every element at every publish. Controllers change their pending counts behind the
    strategy's back (with a timeout coefficient of 4 those move the deadlines of operations with fewer than 4
    pending allocations), reporting it to their watchers or not (then they are polled). A deadline passed but
    not acted on, or a moved pending count not seen, shows here."""
    rng = random.Random(seed)
    config = StrategyConfig(
        fair_share_starvation_timeout=rng.choice([2.0, 5.0, 7.5]),
        fair_share_aggressive_starvation_timeout=rng.choice([9.0, 14.0]),
        allocation_count_preemption_timeout_coefficient=4.0,
        enable_pool_starvation=pool_starvation,
    )
    total = vector(user_slots=16, cpu=16, memory=16 * GiB)
    names = [*_POOLS, *_OPS]
    timeouts = {name: rng.choice([None, 1.0, 3.0, 11.0]) for name in _POOLS}
    aggressive = {name: rng.choice([None, True, False]) for name in _POOLS}
    below = {name: rng.random() < 0.8 for name in names}
    specs = {name: _timed_spec(name, below[name], timeouts.get(name), aggressive.get(name)) for name in names}
    specs[ROOT_ID] = _spec(ROOT_ID, (1.0, 1.0, False))
    current, schedulers = _incremental_and_full(total, specs, config)
    full = schedulers[1]
    controllers: list[dict[str, _Controller]] = [{}, {}]
    kind = _NotifyingController if notifying else _Controller
    for op in _OPS:
        pending = rng.randint(0, 6)
        for scheduler, owned in zip(schedulers, controllers, strict=True):
            owned[op] = kind(op, pending)
            scheduler.register_operation(op, owned[op])
    now = 0.0
    seen: set[Any] = set()
    for step in range(60):
        roll = rng.random()
        if roll < 0.1:
            now -= rng.choice([0.5, 3.0])  # time going back re-evaluates every element below
        elif roll < 0.25:
            pass  # the same time again
        else:
            now += rng.choice([0.25, 0.5, 1.0, 1.5, 4.0])
        if rng.random() < 0.1:  # rarely a new spec (status may flip), else the very same objects
            name = rng.choice(names)
            below[name] = not below[name]
            specs[name] = _timed_spec(name, below[name], timeouts.get(name), aggressive.get(name))
        if rng.random() < 0.2:
            op = rng.choice(list(_OPS))
            count = rng.randint(0, 6)
            for owned in controllers:
                owned[op].pending_allocation_count = count
        current = current.with_shares(total, list(specs.values()))
        for scheduler in schedulers:
            scheduler.publish(current, now)
        assert _state(schedulers[0]) == _state(full), f"step {step} at {now}"
        seen.update(schedulers[0].state.elements[name].starvation for name in names)
    # the deadlines were reached (not a test of statuses that never move)
    assert len(seen) >= 2


def test_element_views_leave_the_publish_step(monkeypatch):
    """An element view reads the lazy deactivation counts without adding them (`ChangedPublisher.deactivation_reasons`):
    after every publish of a busy simulation, viewing every operation leaves the publish's step as it was, and
    the counts viewed are those adding them would give."""
    publish = TreeScheduler.publish
    checked = [0]

    def viewed(self: Any, tree: Any, now: Any) -> None:
        publish(self, tree, now)
        step = self.publisher.changes.step
        if step is None:
            return
        before = (dict(step.counted), step.serial)
        ops = [e for e in self.state.elements.values() if e.is_op and e.op is not None]
        views = {element.id: self.element_view(element.id)["deactivation_reasons"] for element in ops}
        assert (dict(step.counted), step.serial) == before
        added = {element.op.id: Counter(element.op.deactivation_reasons) for element in ops}
        for element, (runtime, reason, start) in step.counted.items():
            if start <= step.serial and runtime.id in added and element.op is runtime:
                added[runtime.id][reason] += step.serial - start + 1
        assert views == {key: dict(counts) for key, counts in added.items()}
        checked[0] += len(ops)

    with monkeypatch.context() as patch:
        patch.setattr(TreeScheduler, "publish", viewed)
        Simulation(parse_scenario(mixed_document(until="10m"), source="test")).run()
    assert checked[0] > 0
