"""Domain objects of the scheduling strategy: allocations, exec nodes, heartbeats and their results.

Everything here is plain data; the rules live in the other modules of :mod:`pooltree.strategy`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pooltree.resources import Vector, zeros


class SchedulingStatus(enum.StrEnum):
    """Whether an element gets its fair share (with tolerance): ``normal`` or ``below_fair_share``."""

    NORMAL = "normal"
    BELOW_FAIR_SHARE = "below_fair_share"


class StarvationStatus(enum.StrEnum):
    """How long an element has been below its fair share."""

    NON_STARVING = "non_starving"
    STARVING = "starving"
    AGGRESSIVELY_STARVING = "aggressively_starving"


class PreemptionStatus(enum.StrEnum):
    """Class of an allocation within its operation's start order (§d)."""

    NON_PREEMPTIBLE = "non_preemptible"
    AGGRESSIVELY_PREEMPTIBLE = "aggressively_preemptible"
    PREEMPTIBLE = "preemptible"


_PREEMPTIBLE = PreemptionStatus.PREEMPTIBLE
"""Read by every `Allocation` made (an enum member read through its class costs ~0.1 us)."""

PREEMPTION_STATUS_RANK: dict[PreemptionStatus, int] = {
    PreemptionStatus.NON_PREEMPTIBLE: 0,
    PreemptionStatus.AGGRESSIVELY_PREEMPTIBLE: 1,
    PreemptionStatus.PREEMPTIBLE: 2,
}


class PreemptionLevel(enum.IntEnum):
    """How preemptible an allocation is in a preemptive stage (§e.3); larger is more preemptible. The two SSD
    levels are those of SSD allocations on an SSD node (``strategy/ssd_preemption.py``)."""

    SSD_NON_PREEMPTIBLE = -2
    SSD_AGGRESSIVELY_PREEMPTIBLE = -1
    NON_PREEMPTIBLE = 0
    AGGRESSIVELY_PREEMPTIBLE = 1
    PREEMPTIBLE = 2


class PreemptionPriority(enum.IntEnum):
    """Operation preemption priority: which preemptive stage may start its allocations."""

    NONE = 0
    NORMAL = 1
    AGGRESSIVE = 2
    SSD_NORMAL = 3
    """A starving SSD operation on an SSD node (``ssd_priority_preemption``; never an operation's own priority)."""
    SSD_AGGRESSIVE = 4
    DEFAULT_GPU_FULL_HOST = 5
    """A default-segment full-host GPU operation that waited too long (``default_gpu_full_host_preemption``)."""


STARVATION_RANK: dict[StarvationStatus, int] = {
    StarvationStatus.NON_STARVING: 0,
    StarvationStatus.STARVING: 1,
    StarvationStatus.AGGRESSIVELY_STARVING: 2,
}
"""A starvation status's severity: an operation's preemption priority comes from the most severe rank among
itself and (unless the scope is ``operation_only``) its ancestors (§e.2)."""
PRIORITY_OF_RANK = (PreemptionPriority.NONE, PreemptionPriority.NORMAL, PreemptionPriority.AGGRESSIVE)
"""The preemption priority of a severity rank (`STARVATION_RANK`)."""


class SchedulingStage(enum.StrEnum):
    """Heartbeat stages in the order they run."""

    GRACEFUL_PREEMPTION = "graceful_preemption"
    REGULAR_HIGH_PRIORITY = "regular_high_priority"
    """Operations below their promised guarantee (``enable_guarantee_priority_scheduling``)."""
    REGULAR_MEDIUM_PRIORITY = "regular_medium_priority"
    REGULAR_PACKING_FALLBACK = "regular_packing_fallback"
    """At most one allocation with the tree's ``packing`` ignored, after the preemptive stages (`packing.py`)."""
    PREEMPTIVE_SSD_AGGRESSIVE = "preemptive_ssd_aggressive"
    """SSD operations on an SSD node (``ssd_priority_preemption``; ``strategy/ssd_preemption.py``)."""
    PREEMPTIVE_SSD_NORMAL = "preemptive_ssd_normal"
    PREEMPTIVE_AGGRESSIVE = "preemptive_aggressive"
    PREEMPTIVE_NORMAL = "preemptive_normal"
    PREEMPTIVE_DEFAULT_GPU_FULL_HOST = "preemptive_default_gpu_full_host"
    """Whole hosts for full-host GPU operations (``default_gpu_full_host_preemption``; ``full_host_preemption.py``)."""
    OVERCOMMIT = "overcommit"
    GPU = "gpu"
    """The GPU scheduling policy's heartbeat (``policy_kind: gpu``; ``strategy/gpu_policy.py``)."""


class AbortReason(enum.StrEnum):
    """Why an allocation was stopped by the scheduler (PRODUCT.md §4 ``aborted_job_count_by_reason`` keys)."""

    PREEMPTION = "preemption"
    AGGRESSIVE_PREEMPTION = "aggressive_preemption"
    GRACEFUL_PREEMPTION = "graceful_preemption"
    SSD_PREEMPTION = "ssd_preemption"
    SSD_AGGRESSIVE_PREEMPTION = "ssd_aggressive_preemption"
    DEFAULT_GPU_FULL_HOST_PREEMPTION = "default_gpu_full_host_preemption"
    RESOURCE_OVERCOMMIT = "resource_overcommit"
    RESOURCE_LIMITS_VIOLATED = "resource_limits_violated"
    SCHEDULING_RESOURCE_OVERCOMMIT = "scheduling_resource_overcommit"
    JOB_TIME_LIMIT_EXCEEDED = "job_time_limit_exceeded"
    """The job ran longer than its ``job_time_limit`` (YTsaurus error 1202 "Job time limit exceeded")."""
    INCOMPATIBLE_SCHEDULING_SEGMENT = "incompatible_scheduling_segment"
    """The allocation's node moved to another scheduling segment, or its operation to another module
    (YTsaurus's forcefully preemptible allocations; ``strategy/segments.py``)."""
    FULL_HOST_AGGRESSIVE_PREEMPTION = "full_host_aggressive_preemption"
    """The GPU policy cleared a host for a full-host gang that waited too long (``strategy/gpu_policy.py``)."""
    EVICTION_FROM_SCHEDULING_MODULE = "eviction_from_scheduling_module"
    OPERATION_BOUND_TO_OTHER_MODULE = "operation_bound_to_other_module"
    NODE_UNSCHEDULABLE = "node_unschedulable"
    OPERATION_INCARNATION_CHANGED = "operation_incarnation_changed"
    SPECULATIVE_RUN_WON = "speculative_run_won"
    """The job's speculative copy completed first (``pooltree/controllers/speculative.py``)."""
    SPECULATIVE_RUN_LOST = "speculative_run_lost"
    """This speculative copy's original completed first."""
    """A ranked job of the same gang operation (a vanilla task with ``gang_options``) failed, was aborted or was
    interrupted: the operation switched to a new incarnation and every running job restarts in its allocation."""


PREEMPTION_REASONS: dict[PreemptionPriority, AbortReason] = {
    PreemptionPriority.NORMAL: AbortReason.PREEMPTION,
    PreemptionPriority.AGGRESSIVE: AbortReason.AGGRESSIVE_PREEMPTION,
    PreemptionPriority.SSD_NORMAL: AbortReason.SSD_PREEMPTION,
    PreemptionPriority.SSD_AGGRESSIVE: AbortReason.SSD_AGGRESSIVE_PREEMPTION,
    PreemptionPriority.DEFAULT_GPU_FULL_HOST: AbortReason.DEFAULT_GPU_FULL_HOST_PREEMPTION,
}
"""The abort reason of a victim of each preemptive stage's target (YTsaurus's ``EAllocationPreemptionReason``)."""


class DeactivationReason(enum.StrEnum):
    """Why an operation was skipped while scheduling on a node (orchid ``deactivation_reasons``)."""

    NO_AVAILABLE_DEMAND = "no_available_demand"
    MIN_NEEDED_RESOURCES_UNSATISFIED = "min_needed_resources_unsatisfied"
    RESOURCE_LIMITS_EXCEEDED = "resource_limits_exceeded"
    SCHEDULING_TAG_FILTER_MISMATCH = "scheduling_tag_filter_mismatch"
    FAIR_SHARE_EXCEEDED = "fair_share_exceeded"
    NO_CANDIDATE_ALLOCATIONS = "no_candidate_allocations"
    NOT_SCHEDULABLE = "not_schedulable"
    SCHEDULING_RESOURCE_OVERCOMMIT = "scheduling_resource_overcommit"
    INCOMPATIBLE_SCHEDULING_SEGMENT = "incompatible_scheduling_segment"
    SATURATED_IN_TENTATIVE_TREE = "saturated_in_tentative_tree"
    BAD_PACKING = "bad_packing"
    REGULAR_ALLOCATION_ON_SSD_NODE_FORBIDDEN = "regular_allocation_on_ssd_node_forbidden"


class Allocation:
    """One allocation (a running job slot) of an operation on an exec node.

    ``resources`` is the usage the scheduler accounts for it. ``payload`` belongs to the operation controller
    (task name, input range, ...). Once preempted, ``preemption`` records why and the allocation's usage no
    longer counts (the node still runs it until it reports it finished). ``amounts`` mirrors ``resources`` as a
    tuple of Python floats for the heartbeat hot path; replace ``resources`` (never mutate it in place) so the two
    stay equal.
    """

    __slots__ = (
        "_resources",
        "amounts",
        "id",
        "interruptible",
        "interruption_signal",
        "node_address",
        "operation_id",
        "payload",
        "preemption",
        "preemption_status",
        "reserve",
        "restarted",
        "revived",
        "start_order",
        "start_time",
        "task",
    )

    def __init__(
        self,
        id: str,
        operation_id: str,
        resources: Vector,
        *,
        task: str = "",
        payload: Any = None,
        interruptible: bool = False,
        interruption_signal: str | None = None,
        node_address: str = "",
        start_time: float = 0.0,
        amounts: tuple[float, ...] | None = None,
    ):
        """``amounts``: ``tuple(resources.tolist())`` where the caller made it already, ``resources`` then being a
        float vector (a controller's start, `OperationControllerBase.schedule_allocation`): not made again."""
        self.id = id
        self.operation_id = operation_id
        if amounts is None:
            reserve = self._resources = np.asarray(
                resources, dtype=float
            )  # the ``resources`` setter's two steps
            amounts = tuple(reserve.tolist())
        else:
            reserve = self._resources = resources
        self.amounts: tuple[float, ...] = amounts
        self.reserve: Vector = reserve
        """What the allocation was started with (the controller's reserve); node reports above it raise
        ``resources`` (``usage_above_reserve``), never below it."""
        self.task = task
        self.payload = payload
        self.interruptible = interruptible
        self.interruption_signal = interruption_signal
        self.node_address = node_address
        self.start_time = start_time
        self.start_order = 0
        """Its place in its operation's start order (`PreemptibleLists` numbers it): the preemption classes are
        read from it against the lists' boundaries (`PreemptibleLists.status`)."""
        self.preemption_status = _PREEMPTIBLE
        self.preemption: PreemptionRecord | None = None
        self.restarted = False
        self.revived = False
        """Its job already ran before a scheduler restart and is re-attached: it keeps its ``start_time`` (set by the
        controller) and its place in the operation's start order, as YTsaurus's revived allocations do."""
        """Its job was restarted in a new allocation by a gang incarnation switch: the controller already took
        the job back, so the node's report of this allocation's end goes no further than the strategy."""

    @property
    def resources(self) -> Vector:
        return self._resources

    @resources.setter
    def resources(self, value: Vector) -> None:
        self._resources = np.asarray(value, dtype=float)
        self.amounts = tuple(self._resources.tolist())

    @property
    def preempted(self) -> bool:
        return self.preemption is not None

    def __repr__(self) -> str:
        return f"Allocation({self.id!r}, op={self.operation_id!r}, node={self.node_address!r})"


@dataclass
class PreemptionRecord:
    """A decision to stop an allocation: reason, timeout for the node, preemptor and the §e.4 explanation."""

    allocation_id: str
    operation_id: str
    node_address: str
    reason: AbortReason
    timeout: float
    explanation: str
    stage: SchedulingStage
    time: float
    preemptor_allocation_id: str | None = None
    preemptor_operation_id: str | None = None
    interruption_signal: str | None = None
    interruptible: bool = False
    allocation_status: PreemptionStatus = PreemptionStatus.PREEMPTIBLE
    error: dict[str, Any] | None = None
    """The YTsaurus error the job ends with, when the stop has one (job time limit)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"error": self.error} if self.error is not None else {}),
            "allocation_id": self.allocation_id,
            "operation_id": self.operation_id,
            "node_address": self.node_address,
            "reason": self.reason.value,
            "timeout": self.timeout,
            "explanation": self.explanation,
            "stage": self.stage.value,
            "time": self.time,
            "preemptor_allocation_id": self.preemptor_allocation_id,
            "preemptor_operation_id": self.preemptor_operation_id,
            "interruption_signal": self.interruption_signal,
            "allocation_status": self.allocation_status.value,
        }


class ExecNode:
    """Scheduler-side view of an exec node: limits, tags, running allocations and their accounted usage."""

    __slots__ = (
        "address",
        "allocations",
        "last_preemptive_scheduling_time",
        "resource_limits",
        "tags",
        "usage",
    )

    def __init__(self, address: str, resource_limits: Vector, tags: frozenset[str] | Sequence[str] = ()):
        self.address = address
        self.resource_limits = np.asarray(resource_limits, dtype=float)
        self.tags = frozenset(tags)
        self.allocations: dict[str, Allocation] = {}
        self.usage: Vector = zeros()
        self.last_preemptive_scheduling_time: float | None = None

    @property
    def free_resources(self) -> Vector:
        return self.resource_limits - self.usage

    def __repr__(self) -> str:
        return f"ExecNode({self.address!r}, allocations={len(self.allocations)})"


@dataclass
class FinishedAllocation:
    """A node's report that an allocation ended.

    ``state`` is ``completed``, ``failed`` or ``aborted``; ``processed_fraction`` tells a map-like controller how
    much of the job's input was processed when an interrupted job completed early. ``abort_reason`` is the
    node's own reason (e.g. ``resource_overdraft``) and the two ``*_max_memory`` peaks feed memory digests.
    """

    allocation_id: str
    state: str = "completed"
    processed_fraction: float | None = None
    abort_reason: str | None = None
    user_job_max_memory: float | None = None
    job_proxy_max_memory: float | None = None

    def __post_init__(self) -> None:
        if self.state not in ("completed", "failed", "aborted"):
            raise ValueError(
                f"finished allocation {self.allocation_id}: state must be completed, failed or aborted"
            )


@dataclass
class NodeHeartbeat:
    """What a node tells the scheduler: its limits, tags, usage of running allocations, finished allocations."""

    address: str
    resource_limits: Vector
    tags: frozenset[str] = frozenset()
    running: Mapping[str, Vector] | None = None
    finished: Sequence[FinishedAllocation] = ()


@dataclass
class HeartbeatResult:
    """What the scheduler answers: allocations to start and allocations to preempt (with reason and timeout)."""

    address: str
    allocations_to_start: list[Allocation] = field(default_factory=list)
    allocations_to_preempt: list[PreemptionRecord] = field(default_factory=list)
    preemptive_scheduling_performed: bool = False
    scheduled_with_preemption: str | None = None
    schedule_attempts: int = 0
    timeout_expired: bool = False
    """Scheduling stopped at the tree's ``schedule_allocations_timeout`` (live only, `heartbeat_deadline.py`)."""

    @property
    def preempted_ids(self) -> list[str]:
        return [record.allocation_id for record in self.allocations_to_preempt]
