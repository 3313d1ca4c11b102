"""The strategy's side of scheduling segments: what the segments update reads from one tree, and the forceful
preemption of allocations left on a node of another segment or module (``segments.py`` holds the rules)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pooltree.config.segments import MODULE_AWARE_SEGMENTS, SchedulingSegmentsConfig, SegmentSpec
from pooltree.errors import ConfigError
from pooltree.resources import GPU, RESOURCE_COUNT, Vector
from pooltree.strategy.change_log import DEFAULT_SEGMENT, PENDING_WORK, ChangeLog
from pooltree.strategy.gpu_policy_inputs import priority_module_binding
from pooltree.strategy.model import (
    AbortReason,
    ExecNode,
    HeartbeatResult,
    PreemptionStatus,
    SchedulingStage,
)
from pooltree.strategy.segments import SegmentNode, SegmentOperation, SegmentsManager
from pooltree.tree.delta import RuntimeTree
from pooltree.tree.elements import TreeOperation
from pooltree.tree.values import spec_option

SHARE_EPSILON = 1e-9


def segments_config(tree_config: Any, path: str) -> SchedulingSegmentsConfig:
    """The tree's ``scheduling_segments`` (kept raw in the tree config's extras), validated."""
    extra = getattr(tree_config, "model_extra", None) or {}
    raw = (
        tree_config.get("scheduling_segments")
        if isinstance(tree_config, Mapping)
        else extra.get("scheduling_segments")
    )
    return SchedulingSegmentsConfig.from_options(raw, f"{path}.scheduling_segments")


def segment_nodes(strategy: Any, manager: SegmentsManager, now: float) -> list[SegmentNode]:
    """Every node with its GPUs, module and move penalty (GPU time of its running allocations)."""
    nodes = []
    for address, node in strategy.nodes.items():
        priority = regular = 0.0
        for allocation in node.allocations.values():
            if allocation.preempted:
                continue
            gpu_time = allocation.amounts[GPU] * max(0.0, now - allocation.start_time)
            regular += gpu_time
            if allocation.preemption_status is not PreemptionStatus.PREEMPTIBLE:
                priority += gpu_time
        nodes.append(
            SegmentNode(
                address=address,
                gpu=float(node.resource_limits[GPU]),
                module=manager.module_of(node.tags),
                penalty=(priority, regular),
                tags=node.tags,
            )
        )
    return nodes


def segment_operations(
    strategy: Any, pool_tree: RuntimeTree, manager: SegmentsManager, initial_gpu: dict[str, float]
) -> list[SegmentOperation]:
    """Every published operation with its per-allocation GPUs, demand and fair share of the tree's GPUs.

    ``initial_gpu`` remembers each operation's per-allocation GPUs from the first time it asked for allocations
    (YTsaurus's aggregated *initial* min needed resources), so the segment does not change as its tasks end.
    """
    total = strategy.tree.total_resources
    total_gpu = float(total[GPU])
    found = []
    for operation_id, runtime in strategy.operations.items():
        element = strategy.state.elements.get(operation_id)
        if element is None or not element.is_op:
            continue
        static = registered_operation(operation_id, runtime.controller, pool_tree, initial_gpu)
        op = pool_tree.operations.get(operation_id)
        demand = element.demand_share
        fair = element.fair_share
        found.append(
            SegmentOperation(
                id=operation_id,
                allocation_gpu=static.allocation_gpu,
                demand_gpu=demand[GPU] * total_gpu,
                fair_share_gpu=fair[GPU],
                gang=static.gang,
                single_allocation_vanilla=static.single_allocation_vanilla,
                demand_satisfied=runtime.controller.pending_allocation_count <= 0,
                fair_share_covers_demand=all(
                    fair[r] + SHARE_EPSILON >= demand[r] for r in range(RESOURCE_COUNT)
                ),
                zero_usage_and_fair_share=not any(element.usage) and all(f <= SHARE_EPSILON for f in fair),
                spec=static.spec,
                priority_assignment_enabled=priority_module_binding(op.pool if op is not None else None),
            )
        )
    for gone in [op for op in initial_gpu if op not in strategy.operations]:
        del initial_gpu[gone]
    return found


def registered_operation(
    operation_id: str, controller: Any, pool_tree: RuntimeTree, initial_gpu: dict[str, float]
) -> SegmentOperation:
    """What decides an operation's segment, known from its registration on (YTsaurus sets the segment when the
    operation's needs are known, before it schedules anything): per-allocation GPUs, gang, spec."""
    if operation_id not in initial_gpu and controller.pending_allocation_count > 0:
        initial_gpu[operation_id] = float(controller.min_needed_resources[GPU])
    op = pool_tree.operations.get(operation_id)
    spec = op.spec if op is not None else None
    try:
        segment_spec = SegmentSpec.from_spec(spec)
    except ConfigError:
        segment_spec = SegmentSpec()  # refused when the spec was accepted; never here
    return SegmentOperation(
        id=operation_id,
        allocation_gpu=initial_gpu.get(operation_id),
        demand_gpu=0.0,
        fair_share_gpu=0.0,
        gang=bool(spec_option(spec, "is_gang", False)),
        single_allocation_vanilla=_single_allocation_vanilla(op, spec),
        spec=segment_spec,
    )


def _single_allocation_vanilla(op: TreeOperation | None, spec: Any) -> bool:
    if op is None or op.operation_type != "vanilla":
        return False
    tasks = spec_option(spec, "tasks", None) or {}
    counts = [spec_option(task, "job_count", None) for task in tasks.values()]
    return len(counts) == 1 and counts[0] == 1


def has_incompatible_allocations(strategy: Any, node: ExecNode) -> bool:
    """Whether the node runs an allocation its operation may no longer run there (segment or module moved)."""
    manager: SegmentsManager = strategy.segments
    if not manager.enabled:
        return False
    return any(
        not allocation.preempted and not manager.compatible(allocation.operation_id, node.address, node.tags)
        for allocation in node.allocations.values()
    )


def preempt_incompatible(
    manager: SegmentsManager, preemption: Any, node: ExecNode, now: float, result: HeartbeatResult
) -> None:
    """Preempt every allocation on ``node`` whose operation belongs to another segment or module (YTsaurus's
    forcefully preemptible allocations, reason ``incompatible_scheduling_segment``); ``preemption`` is the
    tree's `PreemptiveStages`."""
    if not manager.enabled:
        return
    segment = manager.state.node_segment(node.address)
    module = manager.module_of(node.tags)
    for allocation in sorted(node.allocations.values(), key=lambda a: (a.start_time, a.id)):
        if allocation.preempted or manager.compatible(allocation.operation_id, node.address, node.tags):
            continue
        op_state = manager.state.operations.get(allocation.operation_id)
        preemption.preempt(
            allocation,
            node,
            now,
            result,
            (AbortReason.INCOMPATIBLE_SCHEDULING_SEGMENT, SchedulingStage.PREEMPTIVE_NORMAL),
            f"Allocation is forcefully preempted: it runs on a node of segment {segment!r} (module {module!r}) "
            f"while its operation is in segment {op_state.segment if op_state else 'default'!r} "
            f"(module {op_state.module if op_state else None!r})",
        )


def several_trees_error(
    segment: str | None, operation: SegmentOperation, op: TreeOperation | None, allow_single: bool
) -> Any:
    """YTsaurus's refusal of a module-aware-segment operation launched in several pool trees, or None."""
    if segment not in MODULE_AWARE_SEGMENTS:
        return None
    trees = spec_option(op.spec if op is not None else None, "pool_trees", None)
    if trees is None or len(trees) <= 1:
        return None
    if operation.single_allocation_vanilla and allow_single:
        return None
    return {
        "code": 1,
        "message": "Scheduling in several trees is forbidden for operations in module-aware scheduling segments, "
        'specify a single tree or use the "schedule_in_single_tree" spec option',
        "attributes": {"segment": segment, "pool_trees": list(trees)},
    }


class DefaultSegmentPending:
    """The componentwise minimum of the min needed resources of the default segment's operations with pending
    allocations: what a node of the default segment can start at most (operations of a module-aware segment never
    run there). `SchedulerCore.heartbeat_is_noop` asks it; it is recomputed only when some controller's pending
    work moved (the strategy's change log, read as `DEFAULT_SEGMENT`), an operation came or went, the segments'
    state is a new one, or a controller cannot notify."""

    def __init__(self, log: ChangeLog) -> None:
        self.log = log
        log.follow(DEFAULT_SEGMENT, (PENDING_WORK,))
        self._state: object = None
        self._minimum: Vector | None = None
        self._fresh = False

    def changed(self) -> None:
        """An operation came or went (or changed its controller)."""
        self._fresh = False

    def minimum(self, controllers: Mapping[str, Any], manager: SegmentsManager) -> Vector | None:
        if self._fresh and self._state is manager.state and not self.log.moved_since(DEFAULT_SEGMENT):
            return self._minimum
        found: Vector | None = None
        operations = manager.state.operations
        for operation_id, controller in controllers.items():
            if controller.pending_allocation_count <= 0:
                continue
            op_state = operations.get(operation_id)
            if op_state is not None and op_state.segment in MODULE_AWARE_SEGMENTS:
                continue
            needed = controller.min_needed_resources
            found = needed.copy() if found is None else np.minimum(found, needed)
        self.log.skip(DEFAULT_SEGMENT)
        self._state, self._minimum, self._fresh = manager.state, found, True
        return found


def has_starving_operations_for(strategy: Any, node: ExecNode) -> bool:
    """Whether an operation with a preemption priority (a starving one) may run on the node: the preemptive stages
    start allocations only for such operations, and only where their segment and module allow."""
    manager: SegmentsManager = strategy.segments
    for elements in strategy.state.ops_by_priority.values():
        for element in elements:
            if manager.compatible(element.id, node.address, node.tags):
                return True
    return False
