"""Plain state of the strategy: published elements, operation runtimes, starvation, analysis and pass records.

Everything here is data plus small vector helpers; what one tree's strategy shares between its parts is
`StrategyState` (`state.py`) and the behaviour lives in `best_leaf.py`, `stages.py`, `preemption.py`, `gang.py`,
`publish.py` / `changes.py` and `scheduler.py` (`TreeScheduler`, which composes them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pooltree.resources import RESOURCE_COUNT, Vector
from pooltree.strategy.limits_tolerance import tolerance_floats
from pooltree.strategy.model import (
    Allocation,
    DeactivationReason,
    ExecNode,
    FinishedAllocation,
    PreemptionPriority,
    SchedulingStatus,
    StarvationStatus,
)
from pooltree.strategy.preemptible import PreemptibleLists
from pooltree.strategy.shares import INFINITE_SATISFACTION_RATIO
from pooltree.strategy.snapshot import EffectiveSettings, ElementSpec, StrategyConfig

_INF = math.inf
NON_STARVING = StarvationStatus.NON_STARVING
STARVING = StarvationStatus.STARVING
AGGRESSIVELY_STARVING = StarvationStatus.AGGRESSIVELY_STARVING


def _lists_state(lists: PreemptibleLists) -> tuple[Any, ...]:
    """Class sizes and usage sums of preemptible lists. The three lists are consecutive segments of one
    start-ordered sequence, so equal sizes mean the same split (and statuses); with equal sums, the same state."""
    counts = lists.counts()
    return (
        counts["non_preemptible"],
        counts["aggressively_preemptible"],
        counts["preemptible"],
        lists.usage(0),
        lists.usage(1),
        lists.usage(2),
    )


def _floats(values: Any) -> list[float]:
    """Python floats of a vector (numpy array or sequence): ``tolist`` where possible, same values as float(x)."""
    if isinstance(values, np.ndarray) and values.dtype == np.float64:
        return values.tolist()  # already Python floats
    tolist = getattr(values, "tolist", None)
    return [float(x) for x in (tolist() if tolist is not None else values)]


_FIT_EPSILON = 1e-9


class Speculation(Protocol):
    """What the strategy asks of a controller's speculative jobs (`pooltree.controllers.speculative.SpeculativeJobs`)."""

    losers: list[tuple[str, str, str]]
    """``(allocation id, abort reason, explanation)`` of the copies a competitor beat, not yet taken."""

    def take_losers(self) -> list[tuple[str, str, str]]: ...


class OperationController(Protocol):
    """What the strategy asks of an operation controller (see :mod:`pooltree.controllers.operations`).

    Every member is read plainly (issue 28): a controller with nothing to say on one answers its default, as
    `ControllerDefaults` does for the methods and the property; the data members are set where the controller
    is made (``None`` where it has none)."""

    speculation: Speculation | None
    """Its speculative jobs; ``None``: it never speculates (the strategy then never asks for losers)."""

    pending_watchers: list[tuple[set[str], str]] | None
    """``(into, key)`` pairs told of every change of the pending work (`pooltree.strategy.watch`); ``None``: it
    cannot tell, its watchers poll it."""

    initial_min_needed_resources: Vector | None
    """One job's allocation as the operation started (discretized fair share's per-job vector); ``None``: the
    operation keeps its continuous fair-share function."""

    takes_float_lists: bool
    """Whether ``schedule_allocation`` takes ``available_resources`` as a list of Python floats too: the regular
    stage then hands it the list it checked (`stages.RegularStage.try_schedule`) instead of making an array of it
    per attempt (`pooltree.controllers.operations.OperationControllerBase`); ``ControllerDefaults``: ``False``
    (an array, as always)."""

    is_gang: bool
    """Whether the controller runs its jobs as a gang (a vanilla task's ``gang_options``: incarnations and ranks,
    which the live service puts into the jobs' environment); ``ControllerDefaults``: ``False``."""

    @property
    def pending_allocation_count(self) -> int: ...

    @property
    def needed_resources(self) -> Vector: ...

    @property
    def min_needed_resources(self) -> Vector: ...

    @property
    def is_completed(self) -> bool:
        """Whether the operation is done (the core then unregisters it); default ``False``."""
        ...

    def schedule_allocation(
        self, node: ExecNode, available_resources: Vector, now: float
    ) -> Allocation | None: ...

    def on_allocation_finished(
        self, allocation: Allocation, finished: FinishedAllocation, now: float
    ) -> None:
        """The allocation ended (``allocation.preemption`` tells whether the scheduler asked it to stop)."""

    def take_incarnation_switch(self) -> bool:
        """Whether the last finished allocation switched a gang operation's incarnation (and forget it); default
        ``False``."""
        ...

    def restart_job(self, allocation: Allocation, now: float) -> Allocation | None:
        """Restart the allocation's job in place after an incarnation switch (asked only after
        `take_incarnation_switch` answered ``True``); ``None``: the job waits as pending."""
        ...

    def pending_task_resources(self) -> dict[str, Vector] | None:
        """Per task with pending jobs, one job's resources (the tree's job resource limits check); default
        ``None``: the controller does not tell, the check is skipped."""
        ...

    def progress(self) -> dict[str, Any] | None:
        """Counters for the operation's orchid view; default ``None``: no ``progress`` field."""
        ...

    @property
    def can_take_back(self) -> bool:
        """Whether ``take_back`` undoes a ``schedule_allocation`` exactly (node shards grant ahead only then,
        `pooltree/shards/remote.py`); default ``False``."""
        ...

    def has_reservations(self, node_address: str) -> bool:
        """Whether the controller holds revived jobs for this node (only its next heartbeat may take them);
        default ``False``."""
        ...


class ControllerDefaults:
    """The defaults of the `OperationController` methods, properties, ``is_gang`` and ``takes_float_lists`` a
    controller has nothing to say on (a controller that lacks the behaviour subclasses it and sets the protocol's
    other data members itself)."""

    is_gang = False
    takes_float_lists = False

    @property
    def can_take_back(self) -> bool:
        return False

    def has_reservations(self, node_address: str) -> bool:
        return False

    @property
    def is_completed(self) -> bool:
        return False

    def take_incarnation_switch(self) -> bool:
        return False

    def restart_job(self, allocation: Allocation, now: float) -> Allocation | None:
        return None

    def pending_task_resources(self) -> dict[str, Vector] | None:
        return None

    def progress(self) -> dict[str, Any] | None:
        return None


@dataclass
class StarvationState:
    """Per-element starvation bookkeeping that survives fair-share updates."""

    status: StarvationStatus = StarvationStatus.NON_STARVING
    below_fair_share_since: float | None = None
    starving_since: float | None = None
    due: float = field(default=_INF, compare=False, repr=False)
    """After `advance`: while the element stays below its fair share with the same timeouts (its settings, the
    config and, for an operation, its controller's pending allocation count), a later `advance` leaves every
    field as it is unless ``now > due`` (``now`` not decreasing); ``inf``: never. The incremental publish
    (`changes.py`) re-evaluates an element only once it falls due."""

    def advance(self, element: _Element, below: bool, now: float, config: StrategyConfig) -> StarvationStatus:
        """The starvation rules (yt-semantics §c) for ``element`` at ``now``, ``below`` its fair share or not.

        The root, a pool while pool starvation is off, and an element not below its fair share are not
        starving and their clock stops; otherwise the clock starts at the first publish below, and the element
        is starving after its timeout below (aggressively after the aggressive one, when enabled). An
        operation's timeouts shrink by ``pending allocations / allocation_count_preemption_timeout_coefficient``
        when that is below 1. ``starving_since`` is when it last left non-starving. Returns the new status and
        sets ``due``: the earliest deadline (clock start plus a timeout) this publish has not passed yet, or, when
        the clock started now, the earliest one.
        """
        if element.parent is None or not below or (not element.is_op and not config.enable_pool_starvation):
            self.status = NON_STARVING
            self.below_fair_share_since = None
            self.starving_since = None
            self.due = _INF
            return NON_STARVING
        settings = element.settings
        timeout = settings.starvation_timeout
        aggressive_timeout = config.fair_share_aggressive_starvation_timeout
        if element.is_op and element.op is not None:
            factor = element.op.controller.pending_allocation_count / (
                config.allocation_count_preemption_timeout_coefficient
            )
            if factor < 1.0:
                timeout *= factor
                aggressive_timeout *= factor
        since = self.below_fair_share_since
        if since is None:
            self.below_fair_share_since = now
            deadline = now + timeout
            if settings.aggressive_starvation_enabled:
                aggressive = now + aggressive_timeout
                if aggressive < deadline:
                    deadline = aggressive
            self.due = deadline  # nothing was compared with the deadlines yet
            return self.status
        deadline = since + timeout
        previous = self.status
        if settings.aggressive_starvation_enabled:
            aggressive = since + aggressive_timeout
            if now > aggressive:
                self.status = AGGRESSIVELY_STARVING
            elif now > deadline:
                self.status = STARVING
            due = deadline if deadline >= now else _INF  # a deadline passed stays passed while ``now`` grows
            if aggressive >= now and aggressive < due:
                due = aggressive
        else:
            if now > deadline:
                self.status = STARVING
            due = deadline if deadline >= now else _INF
        if previous == NON_STARVING and self.status != previous:
            self.starving_since = now
        self.due = due
        return self.status


@dataclass
class OperationRuntime:
    """Strategy-side state of one registered operation."""

    id: str
    controller: OperationController
    lists: PreemptibleLists = field(default_factory=PreemptibleLists)
    usage: list[float] = field(default_factory=lambda: [0.0] * RESOURCE_COUNT)
    deactivation_reasons: Counter[str] = field(default_factory=Counter)
    preemption_priority: PreemptionPriority = PreemptionPriority.NONE
    preempted_allocation_count: int = 0
    lists_key: tuple[Any, ...] | None = None
    """The arguments of the last ``lists.configure``: an equal publish need not configure again."""
    lists_settled: bool = False
    """The last publish's rebalance moved nothing and no allocation was added, removed or resized since: with
    equal ``lists_key`` the next rebalance would see the very same state and move nothing either."""


class _Element:
    """One pool or operation in the published tree, with its dynamic scheduling attributes."""

    __slots__ = (
        "active",
        "blocked",
        "blocked_for",
        "children",
        "demand_share",
        "depth",
        "excluded",
        "fair_share",
        "fifo_key",
        "heap",
        "id",
        "inactive_reason",
        "index",
        "is_op",
        "keyed_start",
        "last_start",
        "limited",
        "limits",
        "limits_tolerance",
        "op",
        "parent",
        "sat",
        "sat_for",
        "sat_memo",
        "settings",
        "spec",
        "starvation",
        "status",
        "tag_cache",
        "threshold_key",
        "usage",
        "use_fifo",
        "version",
    )

    def __init__(self, spec: ElementSpec, index: int, settings: EffectiveSettings):
        self.id = spec.id
        self.spec = spec
        self.index = index
        """Order key: increases along the tree order, not a position (`pooltree/strategy/order.py`)."""
        self.settings = settings
        self.is_op = spec.is_operation
        self.parent: _Element | None = None
        self.children: list[_Element] = []
        self.depth = 0
        self.usage = [0.0] * RESOURCE_COUNT
        self.fair_share: tuple[float, ...] = tuple(_floats(spec.fair_share))
        self.demand_share: tuple[float, ...] = (0.0,) * RESOURCE_COUNT
        self.blocked: tuple[bool, ...] = (True,) * RESOURCE_COUNT
        self.blocked_for: tuple[tuple[float, ...], tuple[float, ...]] | None = None
        """The (fair share, demand share) ``blocked`` was computed from."""
        threshold = settings.non_preemptible_threshold
        self.threshold_key: tuple[float, ...] | None = (
            None if threshold is None else tuple(_floats(threshold))
        )
        limits = None if spec.specified_resource_limits is None else _floats(spec.specified_resource_limits)
        self.limits: tuple[float, ...] | None = (
            None if limits is None or not any(map(math.isfinite, limits)) else tuple(limits)
        )
        self.limited: tuple[_Element, ...] = ()
        self.limits_tolerance = tolerance_floats(spec.resource_limits_overcommit_tolerance)
        """The pool's ``resource_limits_overcommit_tolerance`` (preemptive stages only; `limits_tolerance.py`)."""
        self.sat = INFINITE_SATISFACTION_RATIO
        self.sat_for: tuple[Any, ...] | None = None
        """The (usage, fair share, blocked, total) ``sat_memo`` (an operation's publish-time satisfaction) is of."""
        self.sat_memo = INFINITE_SATISFACTION_RATIO
        self.fifo_key = float(spec.fifo_index)
        self.use_fifo = False
        self.version = 0
        self.last_start = 0
        """Serial of the latest allocation started in this subtree: equal satisfactions go to the one served least
        recently, so operations whose allocations finish together take turns instead of one always losing."""
        self.keyed_start = 0
        """``last_start`` as it is in this element's current entry of its parent's heap."""
        self.active = False
        self.excluded = -1
        self.heap: list[tuple[float, int, int, int, _Element]] = []
        self.status = SchedulingStatus.NORMAL
        self.starvation = StarvationStatus.NON_STARVING
        self.op: OperationRuntime | None = None
        self.inactive_reason: DeactivationReason | None = None
        self.tag_cache: dict[frozenset[str], bool] = {}


@dataclass
class _Analysis:
    """Result of §e.3 for one node and one preemptive stage."""

    target: PreemptionPriority
    unconditional: list[Allocation] = field(default_factory=list)
    conditional: dict[str, list[Allocation]] = field(default_factory=dict)
    discount: list[float] = field(default_factory=lambda: [0.0] * RESOURCE_COUNT)
    ancestor_discount: dict[str, list[float]] = field(default_factory=dict)
    conditional_discount: dict[str, list[float]] = field(default_factory=dict)


class _Pass:
    """Heartbeat-local bookkeeping: entries popped aside for deactivated operations, restored afterwards."""

    __slots__ = ("popped", "serial", "touched")

    def __init__(self, serial: int):
        self.serial = serial
        self.popped: list[tuple[list, tuple]] = []
        self.touched: set[_Element] = set()


EventSink = Callable[[dict[str, Any]], None]


def usage_above_reserve(reserve: Vector, reported: Vector | Sequence[float]) -> Vector:
    """An allocation's usage from a node report: the reported amount where it exceeds the reserve, else the reserve.

    The seeds: the memory reserve is a lower bound of what a job uses; nodes measure the rest. YTsaurus's node
    raises an allocation's resource usage to the job's measured memory above the reserve.
    """
    return np.maximum(np.asarray(reserve, dtype=float), np.asarray(reported, dtype=float))


def _lowest(element: _Element, predicate: Callable[[_Element], bool]) -> str | None:
    cursor: _Element | None = element
    while cursor is not None:
        if predicate(cursor):
            return cursor.id
        cursor = cursor.parent
    return None


def _fits(usage: Vector, limits: Vector) -> bool:
    """Every resource's usage is within its limit (+ ``_FIT_EPSILON``): ``(usage <= limits + eps).all()``, compared as
    Python floats (the same double arithmetic; a NaN fails both), about a fifth of numpy's add, compare and reduce
    on five resources (every heartbeat asks it, `PreemptiveStages.overcommit`). Written out for the five: the
    same comparisons in the same order as the loop it replaced (`tests/strategy/test_fits_vectors.py`)."""
    u0, u1, u2, u3, u4 = usage.tolist()
    l0, l1, l2, l3, l4 = limits.tolist()
    return (
        u0 <= l0 + _FIT_EPSILON
        and u1 <= l1 + _FIT_EPSILON
        and u2 <= l2 + _FIT_EPSILON
        and u3 <= l3 + _FIT_EPSILON
        and u4 <= l4 + _FIT_EPSILON
    )


def _sub_np(target: Vector, values: Vector) -> None:
    target -= values
