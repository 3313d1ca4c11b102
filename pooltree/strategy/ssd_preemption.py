"""The tree's ``ssd_priority_preemption``: on SSD nodes, operations that need an SSD medium preempt first.

YTsaurus (its classic policy's ``SsdPriorityPreemption``): with ``ssd_priority_preemption: {enable: true,
node_tag_filter, medium_names}``, a node whose tags match ``node_tag_filter`` is an *SSD node*. An operation whose
disk requests use one of ``medium_names`` (a user job's ``disk_request.medium_name``; none named means the
``default`` medium) is an *SSD operation*, and an allocation of such a task an *SSD allocation*. On an SSD node
only:

- A starving SSD operation has the preemption priority ``ssd_normal`` (``ssd_aggressive`` when aggressively
  starving) instead of ``normal`` (``aggressive``). Two preemptive stages run before the usual ones:
  ``preemptive_ssd_aggressive`` (target ``ssd_aggressive``; victims: every allocation but an SSD allocation that
  is non-preemptible, or aggressively preemptible without aggressive preemption allowed) and
  ``preemptive_ssd_normal`` (target ``ssd_normal``; victims: every allocation that is not an SSD allocation,
  even a non-preemptible one). The usual ``preemptive_aggressive`` and ``preemptive_normal`` stages leave SSD
  operations out (their priority is not the stage's target).
- An SSD allocation's preemption level drops below the usual ones: non-preemptible becomes
  ``ssd_non_preemptible``, aggressively preemptible (with aggressive preemption allowed) becomes
  ``ssd_aggressively_preemptible``; so a non-SSD operation never preempts an SSD allocation aggressively, while a
  preemptible SSD allocation stays preemptible for everyone.
- In the SSD stages a non-SSD victim has no preemption-blocking ancestor (starvation, satisfaction thresholds
  and ``allow_normal_preemption`` protect nothing), except that graceful-mode operations keep their allocations.
- A non-SSD operation under a pool with ``allow_regular_allocations_on_ssd_nodes: false`` (alias
  ``allow_regular_jobs_on_ssd_nodes``) gets no allocation there, in any stage (deactivation reason
  ``regular_allocation_on_ssd_node_forbidden``).

Preempted allocations get the abort reasons ``ssd_preemption`` / ``ssd_aggressive_preemption``. Off (the default),
or on a node outside the filter, nothing changes. pooltree's nodes have no disk space resource, so only the media
of the disk requests matter here (YTsaurus also checks the node's free disk quota per medium).

This module is pure: :class:`SsdPreemption` is the strategy's (``TreeScheduler.ssd``) and the preemptive stages ask
it (``preemption.py``). The classification of the running operations is a value, :class:`SsdOperations`: every
fair-share period's publish makes the next one from the previous period's with the period's delta
(:func:`classify_ssd_operations`), keeps it in the period's ``KeptState`` and hands it to ``SsdPreemption``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pooltree.config.ssd_preemption import (
    DEFAULT_MEDIUM,
    SsdPriorityPreemptionConfig,
    regular_allocations_allowed,
)
from pooltree.strategy.model import (
    Allocation,
    ExecNode,
    PreemptionLevel,
    PreemptionPriority,
    SchedulingStage,
)
from pooltree.strategy.time_limits import user_jobs
from pooltree.tree.delta import PeriodDelta
from pooltree.tree.projection import TreeProjection

Stage = tuple[SchedulingStage, PreemptionPriority, PreemptionLevel]

SSD_STAGES: tuple[Stage, ...] = (
    (
        SchedulingStage.PREEMPTIVE_SSD_AGGRESSIVE,
        PreemptionPriority.SSD_AGGRESSIVE,
        PreemptionLevel.SSD_AGGRESSIVELY_PREEMPTIBLE,
    ),
    (SchedulingStage.PREEMPTIVE_SSD_NORMAL, PreemptionPriority.SSD_NORMAL, PreemptionLevel.NON_PREEMPTIBLE),
)
_BASE = {
    PreemptionPriority.SSD_AGGRESSIVE: PreemptionPriority.AGGRESSIVE,
    PreemptionPriority.SSD_NORMAL: PreemptionPriority.NORMAL,
}
_SSD_OF = {value: key for key, value in _BASE.items()}
_ALL = frozenset(_BASE) | frozenset(_SSD_OF)
_SSD_LEVEL = {
    PreemptionLevel.NON_PREEMPTIBLE: PreemptionLevel.SSD_NON_PREEMPTIBLE,
    PreemptionLevel.AGGRESSIVELY_PREEMPTIBLE: PreemptionLevel.SSD_AGGRESSIVELY_PREEMPTIBLE,
}


def disk_request_media(spec: Any) -> dict[str, frozenset[str]]:
    """Task (user job) name → the media of its ``disk_request`` (``default`` when it names none); tasks without
    a disk request are left out. ``spec`` is an ``OperationSpec`` or a plain map."""
    media: dict[str, frozenset[str]] = {}
    for name, job in user_jobs(spec).items():
        raw = job if isinstance(job, Mapping) else getattr(job, "model_extra", None) or {}
        request = raw.get("disk_request")
        if isinstance(request, Mapping):
            medium = request.get("medium_name") or DEFAULT_MEDIUM
            media[str(name)] = frozenset({str(medium)})
    return media


class SsdPreemption:
    """The SSD state of one tree: the config, the SSD operations and tasks, the pools' allowances, and whether
    the node of the current preemptive stages is an SSD node."""

    def __init__(self) -> None:
        self.config = SsdPriorityPreemptionConfig()
        self.ssd_tasks: Mapping[str, frozenset[str]] = {}
        """SSD operation → its tasks whose disk requests use an SSD medium."""
        self.disallowed: frozenset[str] = frozenset()
        """Operations whose pools set ``allow_regular_allocations_on_ssd_nodes`` to false (SSD ones included)."""
        self.forbidden: frozenset[str] = frozenset()
        """Non-SSD operations whose pools keep them off SSD nodes (``allow_regular_allocations_on_ssd_nodes``)."""
        self.node_enabled = False
        """The node of the preemptive stages running now is an SSD node (set by :meth:`start_node`)."""
        self._matches: dict[frozenset[str], bool] = {}

    @property
    def enabled(self) -> bool:
        return self.config.enable

    def configure(self, config: SsdPriorityPreemptionConfig) -> None:
        if config != self.config:
            self.config = config
            self._matches.clear()
        if not config.enable:
            self.ssd_tasks, self.node_enabled = {}, False
            self.disallowed = self.forbidden = frozenset()

    def take(self, operations: SsdOperations) -> None:
        """The classification of the period just finished (`classify_ssd_operations`)."""
        self.ssd_tasks = operations.ssd_tasks
        self.disallowed = operations.disallowed
        self.forbidden = operations.forbidden

    def is_ssd_node(self, node: ExecNode) -> bool:
        if not self.config.enable:
            return False
        matched = self._matches.get(node.tags)
        if matched is None:
            matched = self._matches[node.tags] = self.config.node_tag_filter.matches(node.tags)
        return matched

    def start_node(self, node: ExecNode) -> bool:
        """Enter the preemptive stages of ``node``; returns whether it is an SSD node."""
        self.node_enabled = self.is_ssd_node(node)
        return self.node_enabled

    def is_ssd_operation(self, operation_id: str) -> bool:
        return operation_id in self.ssd_tasks

    def is_ssd_allocation(self, allocation: Allocation) -> bool:
        tasks = self.ssd_tasks.get(allocation.operation_id)
        return tasks is not None and allocation.task in tasks

    def stages(self, usual: tuple[Stage, ...]) -> tuple[Stage, ...]:
        """The preemptive stages of the current node: the SSD ones first on an SSD node."""
        return SSD_STAGES + usual if self.node_enabled else usual

    def operations_priority(self, target: PreemptionPriority) -> PreemptionPriority:
        """The operations' own priority (node-independent) a stage target draws its candidates from."""
        return _BASE.get(target, target)

    def eligible(self, operation_id: str, target: PreemptionPriority) -> bool:
        """Whether an operation of the stage's base priority is a candidate of ``target`` on the current node."""
        if not self.node_enabled or target not in _ALL:
            return True
        return self.is_ssd_operation(operation_id) == (target in _BASE)

    def priority(self, operation_id: str, own: PreemptionPriority) -> PreemptionPriority:
        """An operation's preemption priority on the current node (its SSD variant for an SSD operation)."""
        if self.node_enabled and self.is_ssd_operation(operation_id):
            return _SSD_OF.get(own, own)
        return own

    def level(self, level: PreemptionLevel, allocation: Allocation) -> PreemptionLevel:
        """An allocation's preemption level on the current node (its SSD variant for an SSD allocation)."""
        if self.node_enabled and self.is_ssd_allocation(allocation):
            return _SSD_LEVEL.get(level, level)
        return level

    def is_ssd_stage(self, target: PreemptionPriority) -> bool:
        return target in _BASE

    def ignores_blockers(self, target: PreemptionPriority, level: PreemptionLevel) -> bool:
        """In an SSD stage, a non-SSD victim has no preemption-blocking ancestor (graceful mode aside)."""
        return target in _BASE and level >= PreemptionLevel.NON_PREEMPTIBLE

    def operation_view(self, operation_id: str) -> dict[str, Any]:
        """The orchid's ``are_regular_jobs_on_ssd_nodes_allowed`` of an operation while the option is on."""
        if not self.config.enable:
            return {}
        return {"are_regular_jobs_on_ssd_nodes_allowed": operation_id not in self.disallowed}

    def forbids(self, operation_id: str, node: ExecNode) -> bool:
        """Whether the operation's pools keep it off ``node`` (an SSD node, and the operation needs no SSD)."""
        return bool(self.forbidden) and operation_id in self.forbidden and self.is_ssd_node(node)


@dataclass(frozen=True, slots=True, eq=False)
class SsdOperations:
    """The SSD classification of a tree's running operations made with one fair-share period's publish, with
    ``config``: a value, handed to the next period (``KeptState.ssd``) and to `SsdPreemption` (`SsdPreemption.take`)."""

    config: SsdPriorityPreemptionConfig
    ssd_tasks: Mapping[str, frozenset[str]]
    """SSD operation → its tasks whose disk requests use an SSD medium."""
    disallowed: frozenset[str]
    """Operations whose pools set ``allow_regular_allocations_on_ssd_nodes`` to false (SSD ones included)."""
    forbidden: frozenset[str]
    """Non-SSD operations among those: kept off SSD nodes."""


def classify_ssd_operations(
    previous: SsdOperations | None,
    config: SsdPriorityPreemptionConfig,
    projection: TreeProjection,
    delta: PeriodDelta,
) -> SsdOperations:
    """The SSD classification of the period of ``delta`` (made with its publish): ``previous`` (the previous period's, made with
    the same config) with only the operations the delta names classified again (the projection classified them,
    `OperationChanges`), the very ``previous`` when the tree is unchanged; without it (the first period, a config
    change, a period stopped before its publish), every running operation of the projection."""
    if previous is not None and previous.config == config:
        if delta.unchanged:
            return previous
        changes = projection.changes_with(delta)
        if changes is not None:
            arrived = [(op_id, op.spec, op.pool) for _, op_id, op in changes.running]
            return _classify(previous, changes.before.keys(), arrived)
    running = projection.running(delta.tree).values()
    every = [(entry.element.id, entry.element.spec, entry.element.pool) for entry in running]
    return _classify(SsdOperations(config, {}, frozenset(), frozenset()), (), every)


def _classify(
    previous: SsdOperations, gone: Iterable[str], arrived: Iterable[tuple[str, Any, Any]]
) -> SsdOperations:
    """``previous`` without the ``gone`` operations and with the ``arrived`` ``(operation id, spec, pool)`` triples
    classified (a pool's allowance: false when it or an ancestor sets ``allow_regular_allocations_on_ssd_nodes`` to
    false)."""
    media = previous.config.medium_names
    ssd_tasks = dict(previous.ssd_tasks)
    disallowed = set(previous.disallowed)
    for operation_id in gone:
        ssd_tasks.pop(operation_id, None)
        disallowed.discard(operation_id)
    allowed: dict[int, bool] = {}
    for operation_id, spec, pool in arrived:
        tasks = frozenset(task for task, used in disk_request_media(spec).items() if used & media)
        if tasks:
            ssd_tasks[operation_id] = tasks
        else:
            ssd_tasks.pop(operation_id, None)
        if _pool_allows(pool, allowed):
            disallowed.discard(operation_id)
        else:
            disallowed.add(operation_id)
    return SsdOperations(
        previous.config, ssd_tasks, frozenset(disallowed), frozenset(disallowed - ssd_tasks.keys())
    )


def _pool_allows(pool: Any, memo: dict[int, bool]) -> bool:
    if pool is None:
        return True
    key = id(pool)
    value = memo.get(key)
    if value is None:
        value = memo[key] = regular_allocations_allowed(getattr(pool, "config", None)) and _pool_allows(
            getattr(pool, "parent", None), memo
        )
    return value
