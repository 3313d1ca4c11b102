"""The GPU scheduling policy's plan (``gpu_policy.py`` holds the rules that update it): its nodes, its operations
and their assignments (a planned place for one allocation of an operation on a node, preliminary until a heartbeat
starts it), what the plan reads of each published operation, and its statistics."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pooltree.config.gpu_policy import GpuPolicyConfig
from pooltree.config.segments import module_from_tags
from pooltree.resources import GPU, RESOURCE_COUNT, RESOURCES
from pooltree.strategy.model import AbortReason

EPSILON = 1e-6
"""Share epsilon (YTsaurus's ``TResourceVector::Epsilon``)."""
FULL_HOST_GPU = 8.0

Floats = tuple[float, ...]


@dataclass(eq=False)
class Assignment:
    """A planned place for one allocation of an operation on a node."""

    operation_id: str
    node: str
    resources: Floats
    creation_time: float
    preemptible: bool = False
    allocation_id: str | None = None
    preemptible_progress_start_time: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_address": self.node,
            "operation_id": self.operation_id,
            "allocation_group_name": "task",
            "resource_usage": _named(self.resources),
            "creation_time": self.creation_time,
            "preemptible": self.preemptible,
            "allocation_id": self.allocation_id,
            "preemptible_progress_start_time": self.preemptible_progress_start_time,
        }


@dataclass(eq=False)
class PlanNode:
    address: str
    limits: Floats
    tags: frozenset[str]
    module: str | None
    schedulable: bool
    assignments: list[Assignment] = field(default_factory=list)
    assigned: list[float] = field(default_factory=lambda: [0.0] * RESOURCE_COUNT)
    to_preempt: dict[str, tuple[AbortReason, str, str | None]] = field(default_factory=dict)
    """Allocation id → (reason, description, operation preempted for): preempted at the node's next heartbeat."""
    preliminary: int = 0
    """How many of its assignments wait for an allocation (the heartbeat's work)."""

    def unassigned_gpu(self) -> float:
        return self.limits[GPU] - self.assigned[GPU]

    def to_dict(self) -> dict[str, Any]:
        return {
            "assignments": [a.to_dict() for a in self.assignments],
            "assigned_resource_usage": _named(self.assigned),
            "resource_limits": _named(self.limits),
            "scheduling_module": self.module,
            "schedulable": self.schedulable,
            "allocations_to_preempt": sorted(self.to_preempt),
        }


@dataclass(eq=False)
class PlanOperation:
    id: str
    type: str
    gang: bool
    specified_modules: tuple[str, ...] | None
    initial_resources: Floats | None = None
    initial_count: int = 0
    module: str | None = None
    waiting_for_module_binding_since: float | None = None
    waiting_for_assignments_since: float | None = None
    preemptible: bool = False
    starving: bool = False
    priority_binding_enabled: bool = False
    assignments: list[Assignment] = field(default_factory=list)
    assigned: list[float] = field(default_factory=lambda: [0.0] * RESOURCE_COUNT)
    needed: Floats = (0.0,) * RESOURCE_COUNT
    ready: int = 0
    extra: int = 0

    @property
    def initialized(self) -> bool:
        return self.initial_resources is not None

    @property
    def full_host(self) -> bool:
        return self.initial_resources is not None and abs(self.initial_resources[GPU] - FULL_HOST_GPU) < 1e-9

    @property
    def full_host_module_bound(self) -> bool:
        return self.full_host and self.gang

    def used_module(self, nodes: Mapping[str, PlanNode]) -> str | None:
        if not self.assignments:
            return None
        node = nodes.get(self.assignments[0].node)
        return node.module if node is not None else None

    def to_dict(self) -> dict[str, Any]:
        initial = (
            {}
            if self.initial_resources is None
            else {
                "task": {
                    "min_needed_resources": _named(self.initial_resources),
                    "allocation_count": self.initial_count,
                }
            }
        )
        return {
            "assignments": [a.to_dict() for a in self.assignments],
            "type": self.type,
            "enabled": True,
            "gang": self.gang,
            "full_host_module_bound": self.full_host_module_bound,
            "initial_grouped_needed_resources": initial,
            "assigned_resource_usage": _named(self.assigned),
            "specified_scheduling_modules": None
            if self.specified_modules is None
            else list(self.specified_modules),
            "priority_module_binding_enabled": self.priority_binding_enabled,
            "waiting_for_module_binding_since": self.waiting_for_module_binding_since,
            "waiting_for_assignments_since": self.waiting_for_assignments_since,
            "preemptible": self.preemptible,
            "starving": self.starving,
            "scheduling_module": self.module,
            "ready_to_assign_allocation_count": self.ready,
            "extra_allocation_count": self.extra,
            "allocations": sorted(a.allocation_id for a in self.assignments if a.allocation_id is not None),
        }


@dataclass(frozen=True)
class OperationFacts:
    """What the plan reads of one published operation (``gpu_policy_inputs``)."""

    id: str
    type: str
    gang: bool
    specified_modules: tuple[str, ...] | None
    fair_share: Floats
    pending_count: int
    min_needed: Floats
    starving: bool
    priority_binding_enabled: bool
    limit_room: Floats | None = None
    """The least room (limits minus usage) of the operation and its pools with resource limits; None without."""


@dataclass
class PlanStatistics:
    planned: int = 0
    preempted: int = 0
    planned_by_stage: dict[str, int] = field(default_factory=dict)
    preempted_by_stage: dict[str, int] = field(default_factory=dict)


def node_module(tags: Iterable[str], config: GpuPolicyConfig) -> str | None:
    """The node's module for ``module_type``: its data center tag or ``infiniband_cluster:NAME`` tag, when that
    module is configured."""
    return module_from_tags(tags, config.module_type, config.modules)


def _named(values: Iterable[float]) -> dict[str, float]:
    return {name: float(value) for name, value in zip(RESOURCES, values, strict=True)}
