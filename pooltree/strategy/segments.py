"""Scheduling segments: YTsaurus's classic GPU scheduling policy (``scheduling_segments``, mode ``large_gpu``).

What YTsaurus does (its scheduling segments manager and the classic scheduling policy; restated, not ported):

* **Operations get a segment** once their per-allocation needs are known: ``large_gpu`` when an allocation needs
  a full host (8 GPUs) and the operation is a gang (or the tree does not ask for gangs,
  ``allow_only_gang_operations_in_large_segment``; a one-allocation vanilla operation qualifies too), else
  ``default``; the spec's ``scheduling_segment`` overrides.
* **Operations of the module-aware segment (``large_gpu``) are bound to one module** (a data center or an
  InfiniBand cluster, ``module_type``), chosen among the configured modules (or the spec's
  ``scheduling_segment_modules``) by ``module_assignment_heuristic`` against each module's remaining capacity
  (its GPUs minus the fair amounts already bound there); only operations whose fair share covers their demand are
  assigned, biggest demand first. An operation that keeps failing to get all it asks for in its module for
  ``module_reconsideration_timeout`` loses the binding and is assigned again.
* **Nodes get a segment**: each segment's *fair resource amount* (the GPUs of its operations' fair share, per
  module for ``large_gpu``, plus ``reserve_fair_resource_amount``, formerly ``satisfaction_margins``) is compared
  with the GPUs of its nodes. After ``unsatisfied_segments_rebalancing_timeout`` of imbalance (never before
  ``initialization_timeout`` from the start), nodes move between segments, cheapest first: the move penalty of a
  node is the GPU time of its running non-preemptible allocations, then of all of them; a node is movable while
  its segment keeps its fair amount without it (default-segment nodes are "aggressively" movable for a module-aware
  segment when nothing else is left).
* **Scheduling**: an operation runs only on nodes of its segment (and, for ``large_gpu``, of its module); a
  running allocation on a node of another segment or module is *forcefully preemptible* and is preempted
  (``incompatible_scheduling_segment``) when the node next runs the preemptive stages -- that is what frees a
  whole host for a full-host gang after its node moved to ``large_gpu``.

The functions here are pure: :func:`update_segments` takes the state, the config and plain inputs and returns a
new state; `SegmentsManager` keeps that state for one tree and answers the heartbeat's compatibility checks.
* **Priority module assignment**: an operation whose pool enables ``enable_priority_scheduling_segment_module_
  assignment`` and that failed to get a module for longer than ``priority_module_assignment_timeout`` is assigned
  first; when no module fits it, non-priority operations assigned to one lose their module for it (the fewest
  fair GPUs evicted).

Not modelled: per-node specified segments (YTsaurus's node attribute ``scheduling_segment``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pooltree.config.segments import (
    DEFAULT_SEGMENT,
    FULL_HOST_GPU_DEMAND,
    INFINIBAND_CLUSTER_TAG_PREFIX,
    LARGE_GPU_SEGMENT,
    MODULE_AWARE_SEGMENTS,
    SEGMENTS,
    SchedulingSegmentsConfig,
    SegmentSpec,
    module_from_tags,
)

PRECISION = 1e-6
"""YTsaurus's ``ResourceAmountPrecision`` for comparing GPU amounts."""
LARGE_EPSILON = 1e-9


def node_module(tags: Iterable[str], config: SchedulingSegmentsConfig) -> str | None:
    """The node's module for the tree's ``module_type``: its tag naming a configured data center, or its
    ``infiniband_cluster:NAME`` tag with NAME configured; None when it has neither."""
    return module_from_tags(tags, config.module_type, config.modules)


@dataclass(frozen=True)
class SegmentNode:
    """One node as the segments update sees it."""

    address: str
    gpu: float
    module: str | None
    penalty: tuple[float, float] = (0.0, 0.0)
    """(GPU time of running non-preemptible allocations, GPU time of all running allocations)."""
    tags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SegmentOperation:
    """One operation as the segments update sees it (GPU amounts are absolute, shares are of the tree's GPUs)."""

    id: str
    allocation_gpu: float | None
    """GPUs one allocation needs (the operation's initial min needed resources); None until known."""
    demand_gpu: float
    fair_share_gpu: float
    gang: bool = False
    single_allocation_vanilla: bool = False
    demand_satisfied: bool = False
    """Its usage equals its demand (every allocation it asks for runs)."""
    fair_share_covers_demand: bool = False
    zero_usage_and_fair_share: bool = False
    spec: SegmentSpec = field(default_factory=SegmentSpec)
    priority_assignment_enabled: bool = False
    """Its pool's effective ``enable_priority_scheduling_segment_module_assignment``."""


@dataclass
class OperationSegmentState:
    segment: str | None = None
    module: str | None = None
    specified_modules: tuple[str, ...] | None = None
    failing_to_schedule_at_module_since: float | None = None
    failing_to_assign_to_module_since: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "scheduling_segment": self.segment,
            "scheduling_segment_module": self.module,
            "specified_scheduling_segment_modules": None
            if self.specified_modules is None
            else list(self.specified_modules),
            "failing_to_schedule_at_module_since": self.failing_to_schedule_at_module_since,
            "failing_to_assign_to_module_since": self.failing_to_assign_to_module_since,
            **({"error": self.error} if self.error else {}),
        }


@dataclass
class SegmentsState:
    """What the segments manager keeps between updates (YTsaurus persists the same: node segments, modules)."""

    node_segments: dict[str, str] = field(default_factory=dict)
    """Nodes outside the default segment."""
    operations: dict[str, OperationSegmentState] = field(default_factory=dict)
    imbalanced_since: float | None = None
    initialization_deadline: float | None = None
    previous_mode: str = "disabled"
    last_update: float | None = None
    moved_nodes: list[dict[str, str]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=lambda: {"mode": "disabled"})

    def node_segment(self, address: str) -> str:
        return self.node_segments.get(address, DEFAULT_SEGMENT)


class _Amounts:
    """Per segment: one amount (default) or module -> amount (module-aware)."""

    def __init__(self) -> None:
        self.flat: dict[str, float] = {s: 0.0 for s in SEGMENTS if s not in MODULE_AWARE_SEGMENTS}
        self.by_module: dict[str, dict[str | None, float]] = {s: {} for s in MODULE_AWARE_SEGMENTS}

    def get(self, segment: str, module: str | None = None) -> float:
        if segment in MODULE_AWARE_SEGMENTS:
            return self.by_module[segment].get(module, 0.0)
        return self.flat[segment]

    def add(self, segment: str, module: str | None, amount: float) -> None:
        if segment in MODULE_AWARE_SEGMENTS:
            self.by_module[segment][module] = self.by_module[segment].get(module, 0.0) + amount
        else:
            self.flat[segment] += amount

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.flat)
        for segment, values in self.by_module.items():
            out[segment] = {str(module): value for module, value in sorted(values.items(), key=_module_key)}
        return out


def _module_key(item: tuple[str | None, Any]) -> tuple[bool, str]:
    return (item[0] is None, item[0] or "")


def operation_segment(operation: SegmentOperation, config: SchedulingSegmentsConfig) -> str | None:
    """YTsaurus's choice of an operation's segment; None while its allocations' needs are unknown."""
    if operation.allocation_gpu is None:
        return None
    if operation.spec.segment is not None:
        return operation.spec.segment
    if config.mode == "large_gpu":
        gang_ok = operation.gang or not config.allow_only_gang_operations_in_large_segment
        full_host = abs(operation.allocation_gpu - FULL_HOST_GPU_DEMAND) < LARGE_EPSILON
        if (gang_ok or operation.single_allocation_vanilla) and full_host:
            return LARGE_GPU_SEGMENT
    return DEFAULT_SEGMENT


def update_segments(
    config: SchedulingSegmentsConfig,
    previous: SegmentsState,
    nodes: Sequence[SegmentNode],
    operations: Sequence[SegmentOperation],
    total_gpu: float,
    now: float,
    registered: Iterable[str] | None = None,
) -> SegmentsState:
    """One run of the segments manager at ``now``: a new state (``previous`` is not changed).

    ``registered``: every operation the tree holds (default: ``operations``); the state of one that is registered
    but not published yet (a pending operation) is kept, so its segment does not fall back to ``default``.
    """
    state = copy.deepcopy(previous)
    state.moved_nodes = []
    state.last_update = now
    if not config.enabled:
        if previous.previous_mode != "disabled":
            state.node_segments.clear()
            for op_state in state.operations.values():
                op_state.module = None
                op_state.failing_to_schedule_at_module_since = None
            state.imbalanced_since = None
            state.initialization_deadline = None
        state.previous_mode = config.mode
        state.info = {"mode": config.mode}
        return state
    if state.initialization_deadline is None or previous.previous_mode != config.mode:
        state.initialization_deadline = now + config.initialization_timeout
    known = {operation.id for operation in operations} | set(registered or ())
    for gone in [op_id for op_id in state.operations if op_id not in known]:
        del state.operations[gone]
    known_nodes = {node.address for node in nodes}
    for gone in [address for address in state.node_segments if address not in known_nodes]:
        del state.node_segments[gone]
    _init_operation_segments(config, state, operations)
    run = _Run(config, state, nodes, operations, total_gpu, now)
    run.collect_current()
    run.collect_fair()
    run.reset_module_assignments()
    run.assign_modules()
    run.validate_infiniband_tags()
    run.check_and_rebalance()
    state.previous_mode = config.mode
    state.info = run.info()
    return state


def _init_operation_segments(
    config: SchedulingSegmentsConfig, state: SegmentsState, operations: Sequence[SegmentOperation]
) -> None:
    for operation in operations:
        op_state = state.operations.setdefault(operation.id, OperationSegmentState())
        segment = operation_segment(operation, config)
        if segment is None or op_state.segment == segment:
            continue
        op_state.segment = segment
        op_state.specified_modules = operation.spec.modules
        op_state.error = None
        if segment in MODULE_AWARE_SEGMENTS:
            if op_state.specified_modules is not None and not set(op_state.specified_modules) & set(
                config.modules
            ):
                op_state.error = (
                    f"Segment modules {list(op_state.specified_modules)} are not found in the tree "
                    f"(modules: {list(config.modules)})"
                )
        else:
            op_state.module = None


class _Run:
    """The working amounts of one update (YTsaurus's update context)."""

    def __init__(
        self,
        config: SchedulingSegmentsConfig,
        state: SegmentsState,
        nodes: Sequence[SegmentNode],
        operations: Sequence[SegmentOperation],
        total_gpu: float,
        now: float,
    ) -> None:
        self.config = config
        self.state = state
        self.nodes = sorted(nodes, key=lambda node: node.address)
        self.operations = sorted(operations, key=lambda operation: operation.id)
        self.total_gpu = total_gpu
        self.now = now
        self.current = _Amounts()
        self.fair = _Amounts()
        self.fair_share = _Amounts()
        self.total_capacity: dict[str | None, float] = {}
        self.remaining: dict[str | None, float] = {}
        self.nodes_total = 0.0
        self.errors: list[str] = []

    def _segment_module(self, segment: str, module: str | None) -> str | None:
        return module if segment in MODULE_AWARE_SEGMENTS else None

    def collect_current(self) -> None:
        for node in self.nodes:
            segment = self.state.node_segment(node.address)
            self.current.add(segment, self._segment_module(segment, node.module), node.gpu)
            self.total_capacity[node.module] = self.total_capacity.get(node.module, 0.0) + node.gpu
            self.nodes_total += node.gpu
        self.remaining = dict(self.total_capacity)

    def collect_fair(self) -> None:
        for operation in self.operations:
            op_state = self.state.operations[operation.id]
            if op_state.segment is None:
                continue
            self.fair_share.add(
                op_state.segment,
                self._segment_module(op_state.segment, op_state.module),
                operation.fair_share_gpu,
            )
        for segment in SEGMENTS:
            if segment in MODULE_AWARE_SEGMENTS:
                for module in self.config.modules:
                    amount = self.fair_share.get(segment, module) * self.total_gpu
                    self.fair.add(segment, module, amount)
                    self.remaining[module] = self.remaining.get(module, 0.0) - amount
            else:
                self.fair.add(segment, None, self.fair_share.get(segment) * self.total_gpu)
        for segment in SEGMENTS:
            if segment in MODULE_AWARE_SEGMENTS:
                for module in self.config.modules:
                    reserve = max(
                        0.0, min(self.config.reserve(segment, module), self.remaining.get(module, 0.0))
                    )
                    self.fair.add(segment, module, reserve)
                    self.remaining[module] = self.remaining.get(module, 0.0) - reserve
            else:
                self.fair.add(segment, None, self.config.reserve(segment))

    def _reset_module(self, operation: SegmentOperation, op_state: OperationSegmentState) -> None:
        assert op_state.segment is not None and op_state.module is not None
        amount = operation.fair_share_gpu * self.total_gpu
        self.fair.add(op_state.segment, op_state.module, -amount)
        self.remaining[op_state.module] = self.remaining.get(op_state.module, 0.0) + amount
        op_state.module = None
        op_state.failing_to_schedule_at_module_since = None

    def reset_module_assignments(self) -> None:
        deadline = self.state.initialization_deadline
        if deadline is not None and self.now <= deadline:
            return
        for operation in self.operations:
            op_state = self.state.operations[operation.id]
            if op_state.segment not in MODULE_AWARE_SEGMENTS or op_state.module is None:
                continue
            if not operation.demand_satisfied:
                if op_state.failing_to_schedule_at_module_since is None:
                    op_state.failing_to_schedule_at_module_since = self.now
                since = op_state.failing_to_schedule_at_module_since
                if since + self.config.module_reconsideration_timeout < self.now:
                    self._reset_module(operation, op_state)
                    continue
            else:
                op_state.failing_to_schedule_at_module_since = None
            if (
                operation.zero_usage_and_fair_share
                and self.config.enable_module_reset_on_zero_fair_share_and_usage
            ):
                self._reset_module(operation, op_state)

    def _has_priority(self, operation: SegmentOperation, op_state: OperationSegmentState) -> bool:
        """YTsaurus's eligibility for the priority module assignment: the pool enables it and the operation has
        failed to get a module for longer than ``priority_module_assignment_timeout``."""
        since = op_state.failing_to_assign_to_module_since
        return (
            operation.priority_assignment_enabled
            and since is not None
            and self.now > since + self.config.priority_module_assignment_timeout
        )

    def assign_modules(self) -> None:
        candidates = []
        for operation in self.operations:
            op_state = self.state.operations[operation.id]
            if op_state.segment not in MODULE_AWARE_SEGMENTS or operation.demand_gpu <= 0:
                continue
            if op_state.module is not None or not operation.fair_share_covers_demand:
                continue
            candidates.append((operation, op_state, self._has_priority(operation, op_state)))
        module_count = len(self.config.modules)
        candidates.sort(
            key=lambda item: (
                not item[2],
                len(item[1].specified_modules) if item[1].specified_modules is not None else module_count,
                -item[0].demand_gpu,
                item[0].id,
            )
        )
        for operation, op_state, priority in candidates:
            best = self._best_module(operation.demand_gpu, op_state.specified_modules)
            if best is None and priority:
                best = self._preempt_for_priority(operation, op_state)
            if best is None:
                if op_state.failing_to_assign_to_module_since is None:
                    op_state.failing_to_assign_to_module_since = self.now
                continue
            assert op_state.segment is not None
            self.fair_share.add(op_state.segment, None, -operation.fair_share_gpu)
            self.fair_share.add(op_state.segment, best, operation.fair_share_gpu)
            op_state.module = best
            self.fair.add(op_state.segment, best, operation.demand_gpu)
            self.remaining[best] = self.remaining.get(best, 0.0) - operation.demand_gpu
            op_state.failing_to_assign_to_module_since = None

    def _preempt_for_priority(
        self, operation: SegmentOperation, op_state: OperationSegmentState
    ) -> str | None:
        """The module for a priority operation that fits none: one where it fits after all (no eviction), else the
        one whose non-priority assigned operations free its demand with the least fair GPUs (greedy: the biggest
        first, each time the smallest that suffices when one does); those operations lose their module (their
        allocations there become forcefully preemptible)."""
        assigned: dict[str, list[SegmentOperation]] = {}
        for other in self.operations:
            other_state = self.state.operations[other.id]
            if (
                other_state.segment in MODULE_AWARE_SEGMENTS
                and other_state.module is not None
                and not other.priority_assignment_enabled
            ):
                assigned.setdefault(other_state.module, []).append(other)
        best: tuple[float, str, list[SegmentOperation]] | None = None
        for module in self.config.modules:
            if op_state.specified_modules is not None and module not in op_state.specified_modules:
                continue
            needed = operation.demand_gpu - self.remaining.get(module, 0.0)
            if needed <= 0.0:
                return module
            found = self._evictions(needed, assigned.get(module, []))
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], module, found[1])
        if best is None:
            return None
        _, module, evicted = best
        for other in evicted:
            self._reset_module(other, self.state.operations[other.id])
        return module

    def _evictions(
        self, needed: float, assigned: list[SegmentOperation]
    ) -> tuple[float, list[SegmentOperation]] | None:
        def amount(operation: SegmentOperation) -> float:
            return operation.fair_share_gpu * self.total_gpu

        ordered = sorted(assigned, key=lambda o: (-amount(o), o.id))
        chosen: list[SegmentOperation] = []
        freed = 0.0
        index = 0
        while freed + PRECISION < needed and index < len(ordered):
            following = index + 1
            while following < len(ordered) and amount(ordered[following]) + freed + PRECISION >= needed:
                index, following = following, following + 1
            chosen.append(ordered[index])
            freed += amount(ordered[index])
            index += 1
        if freed + PRECISION < needed:
            return None
        return freed, chosen

    def _best_module(self, demand: float, specified: tuple[str, ...] | None) -> str | None:
        best: str | None = None
        if self.config.module_assignment_heuristic == "max_remaining_capacity":
            best_capacity = -float("inf")
            for module in self.config.modules:
                if specified is not None and module not in specified:
                    continue
                capacity = self.remaining.get(module, 0.0)
                if best_capacity < capacity:
                    best, best_capacity = module, capacity
        else:  # min_remaining_feasible_capacity
            best_capacity = float("inf")
            for module in self.config.modules:
                if specified is not None and module not in specified:
                    continue
                capacity = self.remaining.get(module, 0.0)
                if capacity + PRECISION >= demand and best_capacity > capacity:
                    best, best_capacity = module, capacity
        return best

    def validate_infiniband_tags(self) -> None:
        if not self.config.enable_infiniband_cluster_tag_validation:
            return
        clusters = set(self.config.infiniband_clusters)
        for node in self.nodes:
            tags = [t for t in sorted(node.tags) if t.startswith(INFINIBAND_CLUSTER_TAG_PREFIX)]
            names = [t[len(INFINIBAND_CLUSTER_TAG_PREFIX) :] for t in tags]
            if len(tags) != 1 or names[0] not in clusters:
                reason = "no infiniband cluster tags" if not tags else f"infiniband cluster tags {tags}"
                self.errors.append(
                    f"Node's infiniband cluster tags validation failed: node {node.address} has {reason} "
                    f"(configured clusters: {sorted(clusters)})"
                )
                return

    # ---------------------------------------------------------------------------------------- node rebalancing

    def _balance(self) -> tuple[bool, list[str], list[str]]:
        unsatisfied: list[str] = []
        oversatisfied: list[str] = []
        threshold = self.config.module_oversatisfaction_threshold
        for segment in SEGMENTS:
            if segment in MODULE_AWARE_SEGMENTS:
                for module in self.config.modules:
                    current, fair = self.current.get(segment, module), self.fair.get(segment, module)
                    if current + PRECISION < fair:
                        unsatisfied.append(f"{segment}@{module}")
                    if threshold is not None and fair + threshold + PRECISION < current:
                        oversatisfied.append(f"{segment}@{module}")
            elif self.current.get(segment) < self.fair.get(segment):
                unsatisfied.append(segment)
        return not unsatisfied and not oversatisfied, unsatisfied, oversatisfied

    def check_and_rebalance(self) -> None:
        balanced, _, _ = self._balance()
        if balanced:
            self.state.imbalanced_since = None
            return
        if self.state.imbalanced_since is None:
            self.state.imbalanced_since = self.now
        deadline = max(
            self.state.imbalanced_since + self.config.unsatisfied_segments_rebalancing_timeout,
            self.state.initialization_deadline or 0.0,
        )
        if self.now > deadline:
            self._rebalance()
            self.state.imbalanced_since = None

    def _movable(self) -> tuple[dict[str | None, list[SegmentNode]], dict[str | None, list[SegmentNode]]]:
        groups: dict[tuple[str, str | None], list[SegmentNode]] = {}
        for node in self.nodes:
            segment = self.state.node_segment(node.address)
            groups.setdefault((segment, self._segment_module(segment, node.module)), []).append(node)
        movable: dict[str | None, list[SegmentNode]] = {}
        aggressive: dict[str | None, list[SegmentNode]] = {}
        for segment in SEGMENTS:
            keys = self.config.modules if segment in MODULE_AWARE_SEGMENTS else (None,)
            for module in keys:
                current = self.current.get(segment, module)
                fair = self.fair.get(segment, module)
                for node in sorted(groups.get((segment, module), []), key=_penalty_key):
                    current -= node.gpu
                    if current + PRECISION > fair:
                        movable.setdefault(node.module, []).append(node)
                    elif segment not in MODULE_AWARE_SEGMENTS:
                        aggressive.setdefault(node.module, []).append(node)
        for lists in (movable, aggressive):
            for module in lists:
                lists[module].sort(key=_penalty_key, reverse=True)  # the cheapest is popped from the end
        return movable, aggressive

    def _move(self, node: SegmentNode, segment: str) -> None:
        old = self.state.node_segment(node.address)
        self.current.add(segment, self._segment_module(segment, node.module), node.gpu)
        self.current.add(old, self._segment_module(old, node.module), -node.gpu)
        if old == segment:
            return
        if segment == DEFAULT_SEGMENT:
            self.state.node_segments.pop(node.address, None)
        else:
            self.state.node_segments[node.address] = segment
        self.state.moved_nodes.append(
            {"node_address": node.address, "old_segment": old, "new_segment": segment}
        )

    def _try_rebalance(self, segment: str, unbalanced: Any, available: list[SegmentNode]) -> None:
        while unbalanced() and available:
            self._move(available.pop(), segment)

    def _rebalance(self) -> None:
        movable, aggressive = self._movable()
        threshold = self.config.module_oversatisfaction_threshold
        for module in self.config.modules:
            for segment in SEGMENTS:
                if segment not in MODULE_AWARE_SEGMENTS:
                    continue
                fair = self.fair.get(segment, module)

                def current(segment: str = segment, module: str = module) -> float:
                    return self.current.get(segment, module)

                if threshold is not None and fair + threshold < current():
                    self._try_rebalance(
                        DEFAULT_SEGMENT,
                        lambda fair=fair, current=current: fair + threshold + PRECISION < current(),
                        movable.setdefault(module, []),
                    )
                unsatisfied = lambda fair=fair, current=current: current() + PRECISION < fair  # noqa: E731
                self._try_rebalance(segment, unsatisfied, movable.setdefault(module, []))
                self._try_rebalance(segment, unsatisfied, aggressive.setdefault(module, []))
        rest = [node for nodes in movable.values() for node in nodes]
        rest.sort(key=_penalty_key, reverse=True)
        for segment in SEGMENTS:
            if segment in MODULE_AWARE_SEGMENTS:
                continue
            fair = self.fair.get(segment)
            self._try_rebalance(
                segment, lambda segment=segment, fair=fair: self.current.get(segment) + PRECISION < fair, rest
            )

    def info(self) -> dict[str, Any]:
        """The orchid's ``scheduling_segments`` map (YTsaurus's serialized scheduling segments info)."""
        balanced, unsatisfied, oversatisfied = self._balance()
        return {
            "mode": self.config.mode,
            "module_type": self.config.module_type,
            "scheduling_segment_modules": list(self.config.modules),
            "fair_share_per_segment": self.fair_share.to_dict(),
            "fair_resource_amount_per_segment": self.fair.to_dict(),
            "current_resource_amount_per_segment": self.current.to_dict(),
            "total_capacity_per_module": {
                str(m): v for m, v in sorted(self.total_capacity.items(), key=_module_key)
            },
            "remaining_capacity_per_module": {
                str(m): v for m, v in sorted(self.remaining.items(), key=_module_key)
            },
            "nodes_total_key_resource_limit": self.nodes_total,
            "balanced": balanced,
            "unsatisfied_segments": unsatisfied,
            "oversatisfied_segments": oversatisfied,
            "imbalanced_since": self.state.imbalanced_since,
            "initialization_deadline": self.state.initialization_deadline,
            "moved_nodes": list(self.state.moved_nodes),
            "errors": list(self.errors),
        }


def _placement(op_state: OperationSegmentState | None) -> tuple[str | None, str | None]:
    return (None, None) if op_state is None else (op_state.segment, op_state.module)


def _penalty_key(node: SegmentNode) -> tuple[float, float, str]:
    return (node.penalty[0], node.penalty[1], node.address)


class SegmentsManager:
    """One tree's segments: the config, the last state, and the heartbeat's checks against them."""

    def __init__(self, config: SchedulingSegmentsConfig | None = None) -> None:
        self.config = config if config is not None else SchedulingSegmentsConfig()
        self.state = SegmentsState()
        self._modules: dict[frozenset[str], str | None] = {}
        self._bound: dict[tuple[str, str | None], list[str]] = {}
        """(module-aware segment, module) -> the operations bound there, as of the last update."""
        self.placements_changed = False
        """Whether the last update moved a node or changed an operation's segment or module (nodes may then
        run what they could not, so a simulator wakes its sleeping nodes)."""

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def configure(self, config: SchedulingSegmentsConfig) -> None:
        if config != self.config:
            self.config = config
            self._modules.clear()

    def module_of(self, tags: frozenset[str]) -> str | None:
        found = self._modules.get(tags, ...)
        if found is ...:
            found = self._modules[tags] = node_module(tags, self.config)
        return found  # type: ignore[return-value]

    def due(self, now: float) -> bool:
        last = self.state.last_update
        return (
            last is None
            or now >= last + self.config.manage_period
            or (self.state.previous_mode != self.config.mode)
        )

    def update(
        self,
        nodes: Sequence[SegmentNode],
        operations: Sequence[SegmentOperation],
        total_gpu: float,
        now: float,
        registered: Iterable[str] | None = None,
    ) -> SegmentsState:
        before = self.state
        self.state = update_segments(self.config, self.state, nodes, operations, total_gpu, now, registered)
        self.placements_changed = self.state.node_segments != before.node_segments or any(
            (op.segment, op.module) != _placement(before.operations.get(op_id))
            for op_id, op in self.state.operations.items()
        )
        self._bound = {}
        for op_id, op_state in sorted(self.state.operations.items()):
            if op_state.segment in MODULE_AWARE_SEGMENTS and op_state.module is not None:
                self._bound.setdefault((op_state.segment, op_state.module), []).append(op_id)
        return self.state

    def module_aware_candidates(self, address: str, tags: frozenset[str]) -> list[str] | None:
        """For a node of a module-aware segment, the only operations that may run there (those bound to its
        segment and module); None for a node of the default segment (any default operation may)."""
        segment = self.state.node_segment(address)
        if segment not in MODULE_AWARE_SEGMENTS:
            return None
        return self._bound.get((segment, self.module_of(tags)), [])

    def init_operation(self, operation: SegmentOperation) -> None:
        """Give a newly registered operation its segment at once (its module waits for the next update)."""
        if self.config.enabled:
            _init_operation_segments(self.config, self.state, [operation])

    def compatible(self, operation_id: str, address: str, tags: frozenset[str]) -> bool:
        """Whether the operation may run on the node: the same segment and, for ``large_gpu``, its module.

        An operation whose segment is not known yet runs in ``default``; a ``large_gpu`` operation without a
        module runs nowhere until it is bound to one (YTsaurus's ``IsSchedulingSegmentCompatibleWithNode``).
        """
        if not self.config.enabled:
            return True
        op_state = self.state.operations.get(operation_id)
        segment = (
            op_state.segment if op_state is not None and op_state.segment is not None else DEFAULT_SEGMENT
        )
        if segment != self.state.node_segment(address):
            return False
        if segment in MODULE_AWARE_SEGMENTS:
            assert op_state is not None
            return op_state.module is not None and op_state.module == self.module_of(tags)
        return True

    def operation_view(self, operation_id: str) -> dict[str, Any]:
        op_state = self.state.operations.get(operation_id)
        if not self.config.enabled or op_state is None:
            return {}
        return op_state.to_dict()

    def view(self, node_tags: Mapping[str, frozenset[str]] | None = None) -> dict[str, Any]:
        """The tree's segments for the orchid: the last update's amounts, operations and node segments."""
        info = dict(self.state.info)
        if not self.config.enabled:
            return info
        info["operations"] = {op: s.to_dict() for op, s in sorted(self.state.operations.items())}
        if node_tags is not None:
            info["nodes"] = {
                address: {
                    "scheduling_segment": self.state.node_segment(address),
                    "scheduling_segment_module": self.module_of(tags),
                }
                for address, tags in sorted(node_tags.items())
            }
        return info
