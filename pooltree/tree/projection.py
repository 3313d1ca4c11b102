"""One projection of a runtime tree per period, and the one static cache both per-period builds read (issue 28).

Every fair-share period reads the runtime tree twice: the fair-share input (`fair_share_input.py`: one model element
per pool and running operation) and the strategy's element rows (`pooltree.strategy.build`: one static spec part per
pool and running operation, the shares come later). Both parts of an element are pure functions of the same few
objects: the runtime element, its frozen config or spec objects, its flags, limits, start time and weight, and the
configuration chain of its pool (the tree config, then the configs from the root down), which also decides the
inherited starvation tolerance. `TreeProjection` finds those objects once per period (`advance`, with the period's
`PeriodDelta`: the whole tree after a change of the pools or the config, only the operations the delta names
otherwise, nothing when the tree is unchanged) and keeps, per element, one `Projected` entry: that key and the two
consumers' static parts made from it. An entry whose key changed is a new entry, so a part is never stale; each
consumer makes its part the first time it needs it (the fair-share input's part also depends on the tree's nodes,
for scheduling tag filters: it is kept with the nodes object it was made with).

`SchedulerCore` keeps one projection per tree and hands it to both builds with the period's delta; the first build
of the period advances it, the second finds it advanced. A build given its own projection (a test, a one-off
build) advances that one.

The projection is also the one walk of the tree: it lists each pool's child pools and running operations and
every running operation in registration order, and classifies the operations a delta names (`OperationChanges`);
the builds read those, never the tree's pools and operations themselves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from pooltree.tree.delta import PeriodDelta, RuntimeTree, period_delta
from pooltree.tree.elements import PoolElement, TreeOperation, frozen_spec, pool_key

SPEC_FIELDS = (
    "scheduling_tag_filter",
    "enable_aggressive_starvation",
    "max_unpreemptible_allocation_count",
    "fair_share_starvation_tolerance",
    "fair_share_starvation_timeout",
    "non_preemptible_resource_usage_threshold",
    "preemption_mode",
    "interruption_signal",
    "is_gang",
)
"""The fields of a plain-map spec a key holds (the strategy's static part reads these; the fair-share input never
keeps a part made from a plain map, which may change in place)."""


class Projected:
    """One pool or running operation of the projection: ``key`` (what both static parts are computed from), the
    configuration ``chain`` and inherited starvation ``tolerance`` of the pool (an operation's: of its pool), and
    the parts made from them so far (``None``: not made yet).

    ``input`` is the fair-share input's model element (`pooltree.fairshare.model.Pool` / ``Operation``), made with
    the nodes object ``input_nodes``; ``row`` is the strategy's static spec part (`pooltree.strategy.build_static`).
    A pool's entry also lists its place in the tree as of the last `TreeProjection.advance`: ``children`` (its
    child pools' names, in the tree's order) and ``running`` (its running operations' ids, in the pool's order),
    which is what the fair-share input's children lists are made of.
    """

    __slots__ = ("chain", "children", "input", "input_nodes", "key", "row", "running", "tolerance")

    def __init__(self, key: tuple[Any, ...], chain: tuple[Any, ...], tolerance: float) -> None:
        self.key = key
        self.chain = chain
        self.tolerance = tolerance
        self.input: Any = None
        self.input_nodes: Any = None
        self.row: dict[str, Any] | None = None
        self.children: tuple[str, ...] = ()
        self.running: list[str] = []

    @property
    def element(self) -> Any:
        """The runtime object (`PoolElement` or `TreeOperation`): the first part of the key."""
        return self.key[0]


class OperationChanges:
    """The period's operation changes as the projection found them when it advanced with a delta that names
    operations (`TreeProjection.changes`), read by both builds to bring their previous rows up to date.

    ``before``: each named operation that ran at the previous period → the pool it ran in (its row is gone or
    re-made); ``running``: the named operations running now, as (registration index, id, operation) in
    registration order (each gets a row again); ``frozen``: whether every one of those has a frozen spec (a
    plain map may change in place: the builds then walk the tree).
    """

    __slots__ = ("before", "frozen", "running")

    def __init__(
        self, before: dict[str, str], running: list[tuple[int, str, TreeOperation]], frozen: bool
    ) -> None:
        self.before = before
        self.running = running
        self.frozen = frozen

    def pools(self) -> set[str]:
        """The pools whose running operations changed: where a named operation ran before or runs now."""
        return {*self.before.values(), *(op.pool.name for _, _, op in self.running)}


def spec_values(spec: Any) -> Any:
    """What a key holds of an operation spec: a frozen model itself (it cannot change, and tuple equality tests
    identity first), else the `SPEC_FIELDS` values (a plain map may change in place)."""
    if spec is None:
        return ()
    if frozen_spec(spec):
        return spec
    if isinstance(spec, Mapping):
        return tuple(spec.get(name) for name in SPEC_FIELDS)
    return tuple(getattr(spec, name, None) for name in SPEC_FIELDS)


def operation_key(op: TreeOperation, chain: tuple[Any, ...]) -> tuple[Any, ...]:
    """What an operation's static parts are computed from: the runtime object, its spec, limits, pool,
    running/suspended flags, start time, weight and its pool's configuration chain."""
    limits = op.resource_limits
    return (
        op,
        spec_values(op.spec),
        tuple(limits.tolist() if type(limits) is np.ndarray else np.asarray(limits, dtype=float).tolist()),
        op.pool,
        op.running,
        op.suspended,
        op.start_time,
        op.weight,
        chain,
    )


def pool_tolerance(tree: RuntimeTree, pool: PoolElement, parent_tolerance: float) -> float:
    """The pool's ``fair_share_starvation_tolerance``: its own, else its parent's; the root's is the tree's."""
    config = pool.config
    tolerance = parent_tolerance
    if config is not None and config.fair_share_starvation_tolerance is not None:
        tolerance = float(config.fair_share_starvation_tolerance)
    if pool.is_root:
        tolerance = float(tree.config.fair_share_starvation_tolerance)
    return tolerance


class TreeProjection:
    """The pools and running operations of one runtime tree as of the last `advance`, each a `Projected` entry."""

    def __init__(self) -> None:
        self.pools: dict[str, Projected] = {}
        """Every pool of the tree, in the tree's order."""
        self.operations: dict[str, Projected] = {}
        """Every running operation of the tree (pending ones are not elements of the tree, as in YTsaurus), in the
        tree's (registration) order while ``ordered``; `running` restores that order."""
        self.ordered = True
        """Whether ``operations`` is in the tree's order (an operation that starts running again, or is activated
        from a queue, is appended at the end: `running` re-orders it when a build walks)."""
        self.last_index = 0
        """The registration index of the last operation appended to ``operations``."""
        self._out_of_order = False
        """A walk met a pool before its parent (the parent was projected on the spot): ``pools`` is re-ordered."""
        self.departed: dict[str, Projected] = {}
        """Operations the last `advance` dropped (they stopped running or left): their entries, for the builds that
        still have rows of them."""
        self.tree: Any = None
        self.revision: int | None = None
        """The tree's revision at the last `advance` (None: never advanced, or it failed half-way)."""
        self.exact = True
        """False when a running operation's spec is a plain map (it may change in place without a revision): every
        period's `advance` then walks the tree."""
        self.advanced_with: PeriodDelta | None = None
        """The delta of the last `advance` (the second build of a period finds the projection advanced with it)."""
        self.changes: OperationChanges | None = None
        """The operations the last `advance`'s delta named, classified once for both builds; None when that advance
        walked the tree (the pools changed, or the projection did not stand at the delta's start)."""

    def changes_with(self, delta: PeriodDelta) -> OperationChanges | None:
        """The operation changes of ``delta`` as this projection classified them when it advanced with it (every
        consumer of the period reads them here); None when it walked the tree for it, or last advanced with
        another delta (the consumer then walks the tree too)."""
        return self.changes if self.advanced_with is delta else None

    def delta(self, tree: RuntimeTree, resources: Collection[str] | None = None) -> PeriodDelta:
        """This period's delta of ``tree``: what changed since the revision the projection stands at (the previous
        period's), found once for every build of the period (``resources``: see `PeriodDelta`)."""
        return period_delta(tree, self.revision if tree is self.tree else None, resources)

    def advance(self, tree: RuntimeTree, delta: PeriodDelta) -> None:
        """Bring the projection to ``delta``'s revision of ``tree``: nothing when it is there already, the operations
        the delta names when it was at the delta's start, else a walk of the whole tree."""
        if delta is self.advanced_with or (
            self.exact and tree is self.tree and self.revision == delta.revision
        ):
            return
        revision, self.revision = self.revision, None  # unknown until this advance is complete
        self.advanced_with = None
        self.changes = None
        self.departed = {}
        if self.exact and delta.applies_to(tree, revision if tree is self.tree else None):
            self.changes = self._operations_changed(tree, delta.operations or ())
        else:
            self._walk(tree)
        self.tree = tree
        self.revision = delta.revision
        self.advanced_with = delta

    def running(self, tree: RuntimeTree) -> dict[str, Projected]:
        """Every running operation's entry in the tree's (registration) order, the order of the strategy's rows."""
        if not self.ordered:
            operations = self.operations
            self.operations = {op_id: operations[op_id] for op_id in tree.operations if op_id in operations}
            self.ordered = True
        return self.operations

    def _walk(self, tree: RuntimeTree) -> None:
        """The one walk of the tree: every pool (in the tree's order, with its child pools and running operations)
        and every running operation (in registration order) anew, keeping the entries whose key is the same."""
        previous_pools, previous_operations = self.pools, self.operations
        pools: dict[str, Projected] = {}
        self._out_of_order = False
        for name, pool in tree.pools.items():
            pools[name] = self._pool(tree, pool, pools, previous_pools.get(name))
        if self._out_of_order:
            pools = {name: pools[name] for name in tree.pools}
        for entry in pools.values():
            pool = entry.key[0]
            entry.children = tuple(pool.children)
            entry.running = [op_id for op_id, op in pool.operations.items() if op.running]
        operations: dict[str, Projected] = {}
        exact = True
        last_index = 0
        for op_id, op in tree.operations.items():
            if not op.running:
                continue
            if exact and not frozen_spec(op.spec):
                exact = False
            operations[op_id] = self._operation(op, pools[op.pool.name], previous_operations.get(op_id))
            last_index = op.registration_index
        self.departed = {
            op_id: entry for op_id, entry in previous_operations.items() if op_id not in operations
        }
        self.pools, self.operations, self.exact = pools, operations, exact
        self.ordered, self.last_index = True, last_index

    def _pool(
        self, tree: RuntimeTree, pool: PoolElement, pools: dict[str, Projected], previous: Projected | None
    ) -> Projected:
        parent = pool.parent
        if parent is None:
            chain: tuple[Any, ...] = (tree.config, pool.config)
            tolerance = pool_tolerance(tree, pool, float(tree.config.fair_share_starvation_tolerance))
        else:
            above = pools.get(parent.name)
            if above is None:  # the parent listed after the child: project it on the spot
                above = pools[parent.name] = self._pool(tree, parent, pools, self.pools.get(parent.name))
                self._out_of_order = True
            chain = (*above.chain, pool.config)
            tolerance = pool_tolerance(tree, pool, above.tolerance)
        key = (*pool_key(pool), parent, None if parent is None else parent.name, chain)
        if previous is not None and previous.key == key:
            return previous
        return Projected(key, chain, tolerance)

    def _operation(self, op: TreeOperation, pool: Projected, previous: Projected | None) -> Projected:
        key = operation_key(op, pool.chain)
        # tuple equality tests identity first, so unchanged objects compare in O(length)
        if previous is not None and previous.key == key:
            return previous
        return Projected(key, pool.chain, pool.tolerance)

    def _operations_changed(self, tree: RuntimeTree, changed: Any) -> OperationChanges | None:
        """Only the operations ``changed`` changed since the last advance (the pools did not): their entries anew,
        their pools' running lists, and what changed, classified for the builds (None: a pool they name is gone,
        so the tree was walked instead)."""
        operations = self.operations
        before: dict[str, str] = {}
        running: list[tuple[int, str, TreeOperation]] = []
        frozen = True
        for op_id in changed:
            op = tree.operations.get(op_id)
            previous = operations.get(op_id)
            if previous is not None:
                before[op_id] = previous.key[3].name  # the pool it ran in (`operation_key`)
            if op is not None and op.running:
                if not frozen_spec(op.spec):
                    self.exact = frozen = False
                index = op.registration_index
                if previous is None:  # appended: still in the tree's order only after every other one
                    if index < self.last_index:
                        self.ordered = False
                    else:
                        self.last_index = index
                operations[op_id] = self._operation(op, self.pools[op.pool.name], previous)
                running.append((index, op_id, op))
            elif previous is not None:
                del operations[op_id]
                self.departed[op_id] = previous
        running.sort(key=_first)
        changes = OperationChanges(before, running, frozen)
        pools = tree.pools
        touched = changes.pools()
        if not touched <= pools.keys() or not touched <= self.pools.keys():  # not a change of operations only
            self._walk(tree)
            return None
        for name in touched:  # their running operations, in the pool's order
            self.pools[name].running = [op_id for op_id, op in pools[name].operations.items() if op.running]
        return changes


def _first(item: tuple[int, str, TreeOperation]) -> int:
    return item[0]
