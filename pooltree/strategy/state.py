"""`StrategyState`: everything one tree's strategy keeps between heartbeats and fair-share updates, in one object.

`TreeScheduler` (scheduler.py) makes one `StrategyState` and hands it to each part it is composed of: the best-leaf
heaps (`best_leaf.py`), the regular stage (`stages.py`), the preemptive stages (`preemption.py`), gang restarts
(`gang.py`) and the publisher of fair-share updates (`publish.py`, `changes.py`). Each part keeps its own
bookkeeping; what more than one of them reads or writes lives here, every field declared in `__init__`. The few
methods are the usage accounting every part shares (an allocation's usage added to or taken from its operation
and the pools above it) and the event sink.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pooltree.strategy.change_log import ChangeLog
from pooltree.strategy.elements import EventSink, OperationRuntime, StarvationState, _Element
from pooltree.strategy.heartbeat_deadline import HeartbeatDeadline
from pooltree.strategy.model import Allocation, ExecNode, HeartbeatResult, PreemptionPriority
from pooltree.strategy.shares import add_floats as _add_list
from pooltree.strategy.shares import share_floats as _share
from pooltree.strategy.shares import sub_floats as _sub_list
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig


class StrategyState:
    """The shared state of one tree's strategy (see the module docstring)."""

    __slots__ = (
        "allocations",
        "changes",
        "config",
        "deadline",
        "elements",
        "event_sink",
        "last_update_time",
        "nodes",
        "operations",
        "ops_by_priority",
        "publishes",
        "queued_preemptions",
        "serial",
        "spare",
        "start_serial",
        "starvation",
        "total",
        "tree",
    )

    def __init__(self, tree: SchedulingTree, event_sink: EventSink | None) -> None:
        self.tree = tree
        """The published `SchedulingTree` (the last fair-share update)."""
        self.config: StrategyConfig = tree.config
        """The published tree's strategy options."""
        self.nodes: dict[str, ExecNode] = {}
        self.operations: dict[str, OperationRuntime] = {}
        self.allocations: dict[str, Allocation] = {}
        self.starvation: dict[str, StarvationState] = {}
        """Each published element's starvation clock (§c)."""
        self.elements: dict[str, _Element] = {}
        """The published elements by id (made or reused by each publish)."""
        self.changes = ChangeLog()
        """The operations changed since each reader read (`change_log.py`): every part writes a change there once
        (usage, lists, satisfaction, activity, registrations; the controllers their pending work), and the
        incremental publish and the core's fair-share input each read what is new to them."""
        self.deadline = HeartbeatDeadline(None, 0.0)
        """The current heartbeat's scheduling deadline."""
        self.ops_by_priority: dict[PreemptionPriority, list[_Element]] = {}
        """The starving operations by preemption priority (§e.2), in tree order: the preemptive stages' candidates."""
        self.serial = 0
        """Serial of the last best-leaf pass (`_Pass`): an element excluded in a pass holds that pass's serial."""
        self.start_serial = 0
        """Serial of the last allocation started: ``last_start`` of its operation and pools."""
        self.publishes = 0
        """Publishes begun so far (`publish.TreePublisher.publish`, the only place that changes ``elements`` and
        their specs): what is derived from the specs alone stays current while it is unchanged."""
        self.event_sink = event_sink
        self.last_update_time: float | None = None
        """When the last publish with a time took place."""
        self.queued_preemptions: dict[str, HeartbeatResult] = {}
        """Stops and job restarts decided for a node outside its heartbeat (job time limits, gang incarnation
        switches), delivered in the node's next heartbeat answer."""
        self.spare: tuple[float, ...] = ()
        """``min_spare_allocation_resources_on_node`` of the published config, as floats."""
        self.total: tuple[float, ...] = ()
        """The published tree's total resources, as floats."""

    # ------------------------------------------------------------------ accounting shared by every part

    def usage_share(self, element: _Element) -> list[float]:
        """The element's usage over the tree's total resources."""
        return _share(element.usage, self.total)

    def pool_total(self) -> tuple[float, ...] | None:
        """The tree's resources while some pool uses its own satisfaction (`pool_satisfaction.py`), else None."""
        return self.total if self.tree.pool_satisfaction_used else None

    def account(
        self,
        runtime: OperationRuntime,
        element: _Element | None,
        amounts: Sequence[float],
        apply: Callable[[list[float], Sequence[float]], None],
    ) -> None:
        """Apply a usage change (``add_floats`` or ``sub_floats``) to the operation and, if published, its pools."""
        apply(runtime.usage, amounts)
        self.changes.usage.add(runtime.id)
        if element is not None and element.op is runtime:
            cursor = element.parent
            while cursor is not None:
                apply(cursor.usage, amounts)
                cursor = cursor.parent
            element.usage = runtime.usage

    def stamp_start(self, element: _Element) -> None:
        """A start under ``element``: the next start serial, as ``last_start`` of it and every pool above it."""
        self.start_serial += 1
        cursor: _Element | None = element
        while cursor is not None:
            cursor.last_start = self.start_serial
            cursor = cursor.parent

    def release(self, allocation: Allocation, runtime: OperationRuntime, element: _Element | None) -> None:
        """An allocation stops counting: out of the operation's preemptible lists and usage (and its pools'),
        `account` with ``sub_floats`` (`tests/strategy/test_charge_walk.py`)."""
        runtime.lists_settled = False
        runtime.lists.remove(allocation)
        self.account(runtime, element, allocation.amounts, _sub_list)

    def charge(self, allocation: Allocation, runtime: OperationRuntime, element: _Element) -> None:
        """An allocation starts under ``element``: the next start serial stamped on it and every pool above it
        (`stamp_start`), its usage into the operation's (and, published, its pools') usage (`account` with
        ``add_floats``) in the same walk up, and the allocation into the operation's preemptible lists. The same
        fields, floats and serials as `stamp_start` then `account` (`tests/strategy/test_charge_walk.py`)."""
        amounts = allocation.amounts
        serial = self.start_serial + 1
        self.start_serial = serial
        element.last_start = serial
        _add_list(runtime.usage, amounts)
        self.changes.usage.add(runtime.id)
        cursor = element.parent
        if element.op is runtime:
            while cursor is not None:
                cursor.last_start = serial
                _add_list(cursor.usage, amounts)
                cursor = cursor.parent
            element.usage = runtime.usage
        else:
            while cursor is not None:
                cursor.last_start = serial
                cursor = cursor.parent
        runtime.lists_settled = False
        runtime.lists.add(allocation)

    def emit(self, event: dict[str, Any]) -> None:
        if self.event_sink is not None:
            self.event_sink(event)

    def queued_for(self, address: str) -> HeartbeatResult:
        """The answer kept for a node's next heartbeat (stops and restarts decided outside its heartbeat)."""
        return self.queued_preemptions.setdefault(address, HeartbeatResult(address=address))
