"""What a forecast starts from: one moment of a cluster as plain, picklable data.

A ``ClusterState`` is taken from the live scheduler (`pooltree.forecast.live.take_state`) or from a running
simulation (`pooltree.forecast.replay`); the forecast never reads the scheduler itself, so it can run in another
process on a copy. Times are seconds on the source's clock (the live service's wall clock, or simulated seconds);
``ClusterState.now`` is the moment of the copy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pooltree.config.pool_trees import PoolTreeDefinition
from pooltree.resources import Vector


@dataclass(frozen=True)
class NodeState:
    """An online exec node: its address, resource limits and tags."""

    address: str
    resource_limits: Vector
    tags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RunningJob:
    """A job running at the moment of the copy: on ``node`` since ``start_time``."""

    node: str
    start_time: float


@dataclass(frozen=True)
class TaskState:
    """One task of an operation: the resources of one job and how many jobs wait, run and completed."""

    name: str
    resources: Vector
    pending: int
    running: tuple[RunningJob, ...] = ()
    completed: int = 0
    interruptible: bool = False
    gang_size: int | None = None
    durations: tuple[float, ...] = ()
    """Run times (seconds) of this task's completed jobs that started at or after ``durations_since``: every one
    of them (`pooltree.forecast.window`, bounded by the source)."""
    durations_since: float = -math.inf
    """Start time of the window ``durations`` covers (-inf: every completed job)."""


@dataclass(frozen=True)
class TreePlace:
    """Where an operation runs in one more of its pool trees: the pool there and its runtime parameters."""

    tree: str
    pool: str
    weight: float | None = None
    resource_limits: Mapping[str, float] | None = None


@dataclass(frozen=True)
class OperationState:
    """An operation that has not finished: its spec and where it stands in ``tree``.

    ``spec`` is the raw spec document; ``tree`` and ``pool`` are where it runs now (a pool changed by
    ``update_operation_parameters`` or made ephemeral by the tree is the current one), ``weight`` and
    ``resource_limits`` its runtime parameters in that tree; an operation of several pool trees runs in
    ``other_trees`` too (each with its own pool and parameters). ``start_time`` is when it was submitted,
    ``first_job_time`` when its first job started (None: none yet).
    """

    id: str
    user: str
    type: str
    spec: Mapping[str, Any]
    tree: str
    pool: str
    start_time: float
    tasks: tuple[TaskState, ...]
    state: str = "running"
    """``running`` or ``pending`` (queued by a running-operation count limit)."""
    weight: float | None = None
    resource_limits: Mapping[str, float] | None = None
    first_job_time: float | None = None
    below_fair_share_since: float | None = None
    """The strategy's starvation clock: below its fair share since then (None: not below)."""
    suspended: bool = False
    revision: int = 0
    """Moves whenever the source changed the operation (readers may cache what they derived from it)."""
    other_trees: tuple[TreePlace, ...] = ()
    """The other pool trees it runs in, after ``tree`` (the simulator schedules it in each)."""

    @property
    def trees(self) -> tuple[str, ...]:
        """Every pool tree it runs in, ``tree`` first."""
        return (self.tree, *(place.tree for place in self.other_trees))


@dataclass(frozen=True)
class SubmittedTask:
    """One task of a submitted operation: a job's resources and how many jobs it had."""

    name: str
    resources: Vector
    job_count: int


@dataclass(frozen=True)
class Submission:
    """An operation the cluster saw submitted (whatever happened to it since)."""

    time: float
    tree: str
    pool: str
    user: str
    type: str
    tasks: tuple[SubmittedTask, ...]


@dataclass(frozen=True)
class ClusterState:
    """Pool trees, nodes and unfinished operations (in registration order) at ``now``."""

    now: float
    pool_trees: Mapping[str, PoolTreeDefinition]
    default_tree: str | None
    nodes: tuple[NodeState, ...]
    operations: tuple[OperationState, ...]
    fair_share_update_period: float = 1.0
    heartbeat_period: float = 1.0
    pool_durations: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Pool → run times of completed jobs of its operations, finished ones included: every one that started at or
    after the pool's ``pool_durations_since`` (`pooltree.forecast.window`, bounded by the source)."""
    pool_durations_since: Mapping[str, float] = field(default_factory=dict)
    """Pool → start time of the window its ``pool_durations`` cover (absent: every completed job)."""
    integral: Mapping[str, IntegralState] = field(default_factory=dict)
    """Tree → its integral guarantees' state after the last fair-share update (trees without one: absent)."""
    submissions: tuple[Submission, ...] = ()
    """Operations submitted recently (any state since), oldest first: what future submissions are drawn from
    (`pooltree.forecast.arrivals`)."""
    submissions_since: float | None = None
    """Where the source's submission history begins (None: it keeps none, no arrivals are drawn)."""


@dataclass(frozen=True)
class IntegralState:
    """One tree's integral guarantee volumes as its last fair-share update left them (``UpdateState``)."""

    update_time: float | None
    """When that update ran (the state's clock)."""
    volumes: Mapping[str, tuple[float, ...]]
    """Integral pool → accumulated resource volume (a resource vector)."""
    ratios: Mapping[str, float]
    """Integral pool → its last integral share ratio."""
