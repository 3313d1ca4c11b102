"""The strategy's side of the GPU scheduling policy (``gpu_policy.py`` holds the rules): the tree options it reads,
what the plan update reads from one tree (operations with their fair share, needs, starvation and pools' priority
module binding), and the heartbeat that carries the plan out on a node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pooltree.config.gpu_policy import GpuPolicyConfig
from pooltree.config.segments import SegmentSpec
from pooltree.errors import ConfigError
from pooltree.resources import RESOURCE_COUNT
from pooltree.strategy.gpu_plan import OperationFacts
from pooltree.strategy.gpu_policy import GpuPolicy
from pooltree.strategy.model import ExecNode, HeartbeatResult, SchedulingStage, StarvationStatus
from pooltree.tree.delta import RuntimeTree
from pooltree.tree.elements import PoolElement
from pooltree.tree.values import spec_option

PRIORITY_MODULE_BINDING = "enable_priority_scheduling_segment_module_assignment"
"""The pool option (inherited; root: false) that lets a pool's full-host operations bind to a module first and
evict other operations from it (the GPU policy's priority module binding, the segments' priority assignment)."""


def gpu_policy_config(tree_config: Any, path: str) -> GpuPolicyConfig:
    """The tree's ``policy_kind`` and ``gpu_scheduling_policy`` (kept raw in the tree config's extras), validated."""
    if isinstance(tree_config, Mapping):
        extra: Mapping[str, Any] = tree_config
    else:
        extra = getattr(tree_config, "model_extra", None) or {}
    return GpuPolicyConfig.from_tree_options(
        extra.get("policy_kind"), extra.get("gpu_scheduling_policy"), path
    )


def priority_module_binding(pool: PoolElement | None) -> bool:
    """The pool's effective ``enable_priority_scheduling_segment_module_assignment``: its own value, else its
    parent's, false at the root."""
    cursor = pool
    while cursor is not None:
        extra = getattr(cursor.config, "model_extra", None) or {}
        value = extra.get(PRIORITY_MODULE_BINDING)
        if value is not None:
            return value is True
        cursor = cursor.parent
    return False


def operation_facts(strategy: Any, pool_tree: RuntimeTree, gang_single_vanilla: bool) -> list[OperationFacts]:
    """Every published operation as the plan update reads it."""
    found = []
    for operation_id in sorted(strategy.operations):
        runtime = strategy.operations[operation_id]
        element = strategy.state.elements.get(operation_id)
        if element is None or not element.is_op or element.op is not runtime:
            continue
        op = pool_tree.operations.get(operation_id)
        spec = op.spec if op is not None else None
        operation_type = (op.operation_type if op is not None else None) or "vanilla"
        gang = bool(spec_option(spec, "is_gang", False))
        if not gang and gang_single_vanilla and operation_type == "vanilla":
            tasks = spec_option(spec, "tasks", None) or {}
            counts = [spec_option(task, "job_count", 0) for task in tasks.values()]
            gang = sum(int(count or 0) for count in counts) == 1
        try:
            modules = SegmentSpec.from_spec(spec).modules
        except ConfigError:
            modules = None  # refused when the spec was accepted; never here
        controller = runtime.controller
        room = None
        for limited in element.limited:
            assert limited.limits is not None
            free = tuple(max(0.0, limited.limits[r] - limited.usage[r]) for r in range(RESOURCE_COUNT))
            room = free if room is None else tuple(min(a, b) for a, b in zip(room, free, strict=True))
        found.append(
            OperationFacts(
                id=operation_id,
                type=operation_type,
                gang=gang,
                specified_modules=modules,
                fair_share=tuple(element.fair_share),
                pending_count=int(controller.pending_allocation_count),
                min_needed=tuple(float(x) for x in controller.min_needed_resources.tolist()),
                starving=strategy.starvation_status(operation_id) != StarvationStatus.NON_STARVING,
                priority_binding_enabled=priority_module_binding(op.pool if op is not None else None),
                limit_room=room,
            )
        )
    return found


def update_plan(strategy: Any, pool_tree: RuntimeTree, now: float) -> None:
    """One plan update of the tree's GPU policy from the published tree."""
    policy: GpuPolicy = strategy.gpu_policy
    gang_single = bool(pool_tree.config.consider_single_allocation_vanilla_operations_as_gang)
    elements = strategy.state.elements

    def tag_filter(operation_id: str, tags: frozenset[str]) -> bool:
        element = elements.get(operation_id)
        return element is None or strategy.regular.tag_matches(element, _TagsOnly(tags))

    policy.tag_filter = tag_filter
    policy.update(
        [strategy.nodes[a] for a in sorted(strategy.nodes)],
        operation_facts(strategy, pool_tree, gang_single),
        strategy.allocations,
        tuple(float(x) for x in strategy.tree.total_resources.tolist()),
        now,
    )


class _TagsOnly:
    """What `RegularStage.tag_matches` reads of a node."""

    __slots__ = ("tags",)

    def __init__(self, tags: frozenset[str]) -> None:
        self.tags = tags


def carry_out_plan(strategy: Any, node: ExecNode, now: float, result: HeartbeatResult) -> None:
    """The GPU policy's heartbeat on ``node``: preempt the allocations whose assignments the plan took away, then
    start one allocation for each preliminary assignment here (one that cannot start is dropped)."""
    policy: GpuPolicy = strategy.gpu_policy
    for allocation_id, (reason, description, preempted_for) in sorted(
        policy.take_preemptions(node.address).items()
    ):
        allocation = strategy.allocations.get(allocation_id)
        if allocation is None or allocation.preempted or allocation.node_address != node.address:
            continue
        strategy.preemption.preempt(
            allocation,
            node,
            now,
            result,
            (reason, SchedulingStage.GPU),
            description,
            preempted_for=preempted_for,
        )
    for assignment in policy.preliminary(node.address):
        element = strategy.state.elements.get(assignment.operation_id)
        if element is None or element.op is None:
            policy.drop(assignment)
            continue
        allocation, reason = strategy.regular.try_schedule(element, node, now, None, None)
        if allocation is None:
            if reason is not None:
                element.op.deactivation_reasons[reason.value] += 1
            policy.drop(assignment)
            continue
        strategy.regular.started(allocation, element, node, now, result, SchedulingStage.GPU, None)
        policy.realize(assignment, allocation)
