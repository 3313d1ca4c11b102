"""The preemptive stages: graceful preemption, preemptive scheduling, node overcommit, and preempting itself.

`PreemptiveStages` runs what yt-semantics §e.1 and §e.3–§e.5 describe: the graceful stage,
the analysis of a node's preemptible allocations (blocking ancestors, unconditional and conditional victims),
scheduling with preemption and choosing the minimal set of victims, the overcommit stage, `preempt` with its
record, and stops decided outside a heartbeat (job time limits), queued for the node's next heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pooltree.resources import RESOURCE_COUNT
from pooltree.strategy.best_leaf import BestLeaf
from pooltree.strategy.elements import (
    _FIT_EPSILON,
    OperationRuntime,
    _Analysis,
    _Element,
    _fits,
    _sub_np,
)
from pooltree.strategy.full_host_preemption import FullHostPreemption, full_host_blocker
from pooltree.strategy.model import (
    PREEMPTION_REASONS,
    PREEMPTION_STATUS_RANK,
    AbortReason,
    Allocation,
    ExecNode,
    HeartbeatResult,
    PreemptionLevel,
    PreemptionPriority,
    PreemptionRecord,
    PreemptionStatus,
    SchedulingStage,
    StarvationStatus,
)
from pooltree.strategy.pool_satisfaction import pool_key
from pooltree.strategy.preemptible import PreemptionClasses
from pooltree.strategy.priorities import priority_of
from pooltree.strategy.shares import (
    EPSILON,
)
from pooltree.strategy.shares import add_floats as _add_list
from pooltree.strategy.snapshot import ROOT_ID
from pooltree.strategy.ssd_preemption import SsdPreemption
from pooltree.strategy.stages import RegularStage
from pooltree.strategy.starving_victims import starvation_blocks
from pooltree.strategy.state import StrategyState

_GRACEFUL = (AbortReason.GRACEFUL_PREEMPTION, SchedulingStage.GRACEFUL_PREEMPTION)
_GRACEFUL_TEXT = "Preempted due to graceful preemption: operation usage exceeds its fair share"
_OVERCOMMIT = (AbortReason.RESOURCE_OVERCOMMIT, SchedulingStage.OVERCOMMIT)
_OVERCOMMIT_TEXT = "Preempted due to node resource ovecommit"  # sic: the YTsaurus text
_STAGES = (
    (
        SchedulingStage.PREEMPTIVE_AGGRESSIVE,
        PreemptionPriority.AGGRESSIVE,
        PreemptionLevel.AGGRESSIVELY_PREEMPTIBLE,
    ),
    (SchedulingStage.PREEMPTIVE_NORMAL, PreemptionPriority.NORMAL, PreemptionLevel.PREEMPTIBLE),
)


ClassReader = Callable[[OperationRuntime], PreemptionClasses]
"""An operation's preemption classes as the preemptive stages read them."""


def lists_of(runtime: OperationRuntime) -> PreemptionClasses:
    """An operation's classes from its own preemptible lists (the strategy that holds them)."""
    return runtime.lists


class PreemptiveStages:
    """Stages that stop allocations; see the module docstring."""

    def __init__(
        self,
        state: StrategyState,
        heaps: BestLeaf,
        regular: RegularStage,
        ssd: SsdPreemption,
        full_host: FullHostPreemption,
    ) -> None:
        self.state = state
        self.heaps = heaps
        self.regular = regular
        """The regular stage, whose checks and start bookkeeping a preemptive start reuses."""
        self.ssd = ssd
        """The tree's ``ssd_priority_preemption`` (`ssd_preemption.py`)."""
        self.full_host = full_host
        """The tree's ``default_gpu_full_host_preemption`` (`full_host_preemption.py`)."""
        self._graceful_publish = -1
        self._graceful_operations = True
        """Whether an element of the tree's last publish is in graceful preemption mode (`graceful`), and the
        publish it was read for (`StrategyState.publishes`)."""
        self.class_reader: ClassReader = lists_of
        """Where the stages read an operation's preemption classes (`classes`): its own lists (`lists_of`); a node
        shard's replica, which holds no lists, reads the leader's boundaries instead (`pooltree/shards/replica.py`,
        `read_classes_with`)."""

    # -------------------------------------------------------------- stage 1: graceful preemption

    def graceful(self, node: ExecNode, now: float, result: HeartbeatResult) -> None:
        """§e.1 graceful preemption (YTsaurus `PreemptAllocationsGracefully`): preempt the node's preemptible allocations of graceful operations."""
        state = self.state
        elements = state.elements
        if self._graceful_publish != state.publishes:  # specs change only when a publish begins
            self._graceful_publish = state.publishes
            self._graceful_operations = any(
                element.spec.preemption_mode == "graceful" for element in elements.values()
            )
        if not self._graceful_operations:  # no allocation's element is graceful: the filter below finds none
            return
        # the operation's mode first (it does not move while the stage runs): most nodes hold no graceful ones
        graceful = [
            allocation
            for allocation in node.allocations.values()
            if (element := elements.get(allocation.operation_id)) is not None
            and element.spec.preemption_mode == "graceful"
        ]
        for allocation in graceful:
            if allocation.preempted:
                continue
            if self.status(allocation) != PreemptionStatus.PREEMPTIBLE:
                continue
            timeout = self.state.config.allocation_graceful_preemption_timeout
            self.preempt(allocation, node, now, result, _GRACEFUL, _GRACEFUL_TEXT, timeout=timeout)

    # -------------------------------------------------------------- the classes the stages read

    def read_classes_with(self, reader: ClassReader) -> None:
        """The stages read operations' classes through ``reader`` from now on (a replica without the lists)."""
        self.class_reader = reader

    def classes(self, runtime: OperationRuntime) -> PreemptionClasses:
        """An operation's preemption classes as the stages read them: from the two boundaries of its start order
        alone (`PreemptibleLists.status`, which `ClassBoundaries` answers the same way), through `class_reader`."""
        return self.class_reader(runtime)

    def status(self, allocation: Allocation) -> PreemptionStatus:
        """A running allocation's class (preemptible, aggressively preemptible, not), through `classes`; an
        allocation whose operation left the strategy is listed nowhere and keeps the class it last had."""
        runtime = self.state.operations.get(allocation.operation_id)
        if runtime is None:
            return allocation.preemption_status
        return self.class_reader(runtime).status(allocation)

    # -------------------------------------------------------------- stage 3: preemptive scheduling

    def preemption_level(self, allocation: Allocation, element: _Element) -> PreemptionLevel:
        """An allocation's preemption level from its status (YTsaurus `GetAllocationPreemptionLevel`, SSD levels on SSD nodes)."""
        return self._level(self.status(allocation), allocation, element)

    def _level(self, status: PreemptionStatus, allocation: Allocation, element: _Element) -> PreemptionLevel:
        if status == PreemptionStatus.PREEMPTIBLE:
            return PreemptionLevel.PREEMPTIBLE
        if (
            status == PreemptionStatus.AGGRESSIVELY_PREEMPTIBLE
            and element.settings.allow_aggressive_preemption
        ):
            level = PreemptionLevel.AGGRESSIVELY_PREEMPTIBLE
        else:
            level = PreemptionLevel.NON_PREEMPTIBLE
        # on an SSD node an SSD allocation's level is its SSD variant (`ssd_preemption.py`)
        return self.ssd.level(level, allocation) if self.ssd.node_enabled else level

    def _current_satisfaction(self, element: _Element, memo: dict[_Element, float]) -> float:
        """Local satisfaction without recomputing: an operation keeps its own up to date (``sat`` is refreshed on
        every usage change); a pool's is memoised for the duration of one analysis, while usage stands still."""
        if element.is_op:
            return element.sat
        value = memo.get(element)
        if value is None:
            value = memo[element] = self.heaps.local_satisfaction(element)
        return value

    def _blocking_ancestor(
        self, element: _Element, target: PreemptionPriority, memo: dict[_Element, float]
    ) -> _Element | None:
        """FindPreemptionBlockingAncestor (§e.3): the element that protects this operation's allocations."""
        if target == PreemptionPriority.DEFAULT_GPU_FULL_HOST:
            return full_host_blocker(self.state.config, element)  # `full_host_preemption.py`
        if element.spec.preemption_mode == "graceful":
            return element
        if (
            target == PreemptionPriority.NORMAL
            and not element.settings.normal_preemption_allowed_by_ancestors
        ):
            return element
        config = self.state.config
        cursor: _Element | None = element
        while cursor is not None and cursor.parent is not None:
            if cursor.starvation != StarvationStatus.NON_STARVING and starvation_blocks(
                config, cursor, element
            ):
                return cursor
            if config.preemption_check_satisfaction:
                if cursor.settings.allow_aggressive_preemption and target >= PreemptionPriority.AGGRESSIVE:
                    threshold = config.aggressive_preemption_satisfaction_threshold
                else:
                    threshold = config.preemption_satisfaction_threshold
                if self._current_satisfaction(cursor, memo) < threshold + EPSILON:
                    return cursor
            cursor = cursor.parent
        return None

    def _analyze(self, node: ExecNode, target: PreemptionPriority, min_level: PreemptionLevel) -> _Analysis:
        """§e.3 the node's unconditional and conditional victims for a stage (YTsaurus `AnalyzePreemptibleAllocations`)."""
        analysis = _Analysis(target)
        blockers: dict[str, _Element | None] = {}
        memo: dict[_Element, float] = {}
        enable_conditional = self.state.config.enable_conditional_preemption
        elements = self.state.elements
        ssd_stage = self.ssd.node_enabled and self.ssd.is_ssd_stage(target)
        for allocation in node.allocations.values():
            if allocation.preempted:
                continue
            element = elements.get(allocation.operation_id)
            if element is None or element.op is None:
                continue
            status = self.status(allocation)
            level = self._level(status, allocation, element)
            if level < min_level:
                continue
            if (
                ssd_stage
                and self.ssd.ignores_blockers(target, level)
                and element.spec.preemption_mode != "graceful"
            ):
                blocker = None  # an SSD stage's non-SSD victim (`ssd_preemption.py`)
            elif element.id in blockers:
                blocker = blockers[element.id]
            else:
                blocker = blockers[element.id] = self._blocking_ancestor(element, target, memo)
            if blocker is None:
                analysis.unconditional.append(allocation)
                _add_list(analysis.discount, allocation.amounts)
                for limited in element.limited:
                    _add_list(
                        analysis.ancestor_discount.setdefault(limited.id, [0.0] * RESOURCE_COUNT),
                        allocation.amounts,
                    )
            elif blocker is not element and enable_conditional and status == PreemptionStatus.PREEMPTIBLE:
                analysis.conditional.setdefault(blocker.id, []).append(allocation)
                _add_list(
                    analysis.conditional_discount.setdefault(blocker.id, [0.0] * RESOURCE_COUNT),
                    allocation.amounts,
                )
        return analysis

    def _best_among(self, candidates: list[_Element]) -> _Element | None:
        """Best leaf of the subtree spanned by the candidates, by the same comparator as regular scheduling."""
        if not candidates:
            return None
        # children as ordered sets (dicts): a set of elements would iterate in memory-address order
        children: dict[_Element, dict[_Element, None]] = {}
        for element in candidates:
            cursor = element
            while cursor.parent is not None:
                children.setdefault(cursor.parent, {})[cursor] = None
                cursor = cursor.parent
        memo: dict[_Element, tuple[float, _Element]] = {}
        state = self.state
        sats = {element: element.sat for element in candidates}  # operations keep ``sat`` current

        def best(element: _Element) -> tuple[float, _Element]:
            if element.is_op:
                return sats[element], element
            if element in memo:
                return memo[element]
            options = []
            for child in children[element]:
                sat, leaf = best(child)
                key = child.fifo_key if child.use_fifo else sat
                options.append((key, child.last_start, child.index, sat, leaf))
            _, _, _, sat, leaf = min(options, key=lambda o: (o[0], o[1], o[2]))
            if state.tree.pool_satisfaction_used:
                sat = pool_key(element, sat, state.total)
            memo[element] = (sat, leaf)
            return memo[element]

        return best(state.elements[ROOT_ID])[1]

    def preemptive(self, node: ExecNode, now: float, result: HeartbeatResult) -> None:
        """§e.1 the preemptive stages on the node (YTsaurus `DoPreemptiveAllocationScheduling`, `BuildPreemptiveSchedulingStageList`)."""
        ssd = self.ssd
        ssd.start_node(node)
        try:
            self._run_stages(node, now, result, self.full_host.stages(ssd.stages(_STAGES)))
        finally:
            ssd.node_enabled = False

    def _run_stages(
        self,
        node: ExecNode,
        now: float,
        result: HeartbeatResult,
        stages: tuple[tuple[SchedulingStage, PreemptionPriority, PreemptionLevel], ...],
    ) -> None:
        """Each preemptive stage in turn until one starts an allocation (YTsaurus `RunPreemptiveSchedulingStage`)."""
        state = self.state
        ssd, full_host, starvation = self.ssd, self.full_host, state.starvation
        by_priority = state.ops_by_priority
        op_activity = self.heaps.op_activity
        routed = ssd.node_enabled or full_host.enabled  # SSD or full-host priorities decide the candidates
        for stage, target, min_level in stages:
            if routed:
                targets = [
                    e
                    for source in full_host.sources(ssd.operations_priority(target))
                    for e in by_priority.get(source, [])
                    if e.op is not None
                    and op_activity(e) is None
                    and ssd.eligible(e.id, target)
                    and full_host.eligible(e.id, target, starvation, now)
                ]
            else:
                targets = [
                    e for e in by_priority.get(target, []) if e.op is not None and op_activity(e) is None
                ]
            force = stage == SchedulingStage.PREEMPTIVE_NORMAL
            if not targets and (not force or self._nothing_to_stop(node)):
                continue
            if target == PreemptionPriority.DEFAULT_GPU_FULL_HOST and not full_host.may_preempt(
                node, now, state.elements, self.preemption_level
            ):
                analysis = _Analysis(target)  # too much progress to lose on this node
            else:
                analysis = self._analyze(node, target, min_level)
            started = None
            if targets and (
                analysis.unconditional or analysis.conditional or self.regular.can_start_more(node)
            ):
                started = self._schedule_with_preemption(node, now, targets, analysis, stage, result)
            self._preempt_after_scheduling(node, now, analysis, started, stage, result)
            if started is not None:
                result.scheduled_with_preemption = started[0].id
                return

    def _nothing_to_stop(self, node: ExecNode) -> bool:
        """Whether a stage with no operation to start stops nothing on the node: its resources are not overcommitted
        and no operation running there has a limited operation or pool. Then `_preempt_after_scheduling`, given no
        start, preempts nothing (its first loop ends at once on a node that fits, its second finds no violated
        limits) whatever `_analyze` finds, so the stage is skipped without analysing the node's allocations."""
        if not _fits(node.usage, node.resource_limits):
            return False
        elements = self.state.elements
        for allocation in node.allocations.values():
            element = elements.get(allocation.operation_id)
            if element is not None and element.limited:
                return False
        return True

    def _schedule_with_preemption(
        self,
        node: ExecNode,
        now: float,
        targets: list[_Element],
        analysis: _Analysis,
        stage: SchedulingStage,
        result: HeartbeatResult,
    ) -> tuple[Allocation, _Element] | None:
        """§e.3 start one allocation of a starving operation counting its victims as free (YTsaurus `ScheduleAllocation` with discounts)."""
        remaining = list(targets)
        attempts = 0
        state = self.state
        regular = self.regular
        while (
            remaining
            and attempts < state.config.max_schedule_attempts_per_heartbeat
            and not state.deadline.passed()
        ):
            leaf = self._best_among(remaining)
            if leaf is None:
                return None
            attempts += 1
            discount = list(analysis.discount)
            cursor = leaf.parent
            while cursor is not None:
                extra = analysis.conditional_discount.get(cursor.id)
                if extra is not None:
                    _add_list(discount, extra)
                cursor = cursor.parent
            if not regular.can_start_more(node, discount):
                result.schedule_attempts += attempts
                return None
            allocation, reason = regular.try_schedule(leaf, node, now, discount, analysis.ancestor_discount)
            if allocation is None:
                assert leaf.op is not None and reason is not None
                leaf.op.deactivation_reasons[reason.value] += 1
                remaining.remove(leaf)
                continue
            result.schedule_attempts += attempts
            regular.started(allocation, leaf, node, now, result, stage, None)
            return allocation, leaf
        result.schedule_attempts += attempts
        return None

    def _preempt_after_scheduling(
        self,
        node: ExecNode,
        now: float,
        analysis: _Analysis,
        started: tuple[Allocation, _Element] | None,
        stage: SchedulingStage,
        result: HeartbeatResult,
    ) -> None:
        """§e.4 the minimal set of victims, then limit violators (YTsaurus `PreemptAllocationsAfterScheduling`)."""
        conditional: set[str] = set()
        candidates = list(analysis.unconditional)
        if started is not None:
            cursor = started[1].parent
            while cursor is not None:
                for allocation in analysis.conditional.get(cursor.id, ()):
                    candidates.append(allocation)
                    conditional.add(allocation.id)
                cursor = cursor.parent
        ranks = {a.id: PREEMPTION_STATUS_RANK[self.status(a)] for a in candidates}
        candidates.sort(key=lambda a: (ranks[a.id], a.start_time), reverse=True)
        target = analysis.target
        reason = PREEMPTION_REASONS[target]
        preemptor = started[0] if started is not None else None
        elements = self.state.elements
        for allocation in candidates:
            if _fits(node.usage, node.resource_limits):
                break
            if allocation.preempted:
                continue
            text = "Node resource limits violated"
            if started is not None:
                element = elements[allocation.operation_id]
                status = self.status(allocation)
                own = priority_of(started[1])
                priority = self.full_host.priority(
                    started[1].id, self.ssd.priority(started[1].id, own), self.state.starvation, now
                )
                text = (
                    f"Preempted to start allocation {started[0].id} of operation {started[0].operation_id}; "
                    f"this allocation had status {status.value} and level "
                    f"{self._level(status, allocation, element).name.lower()}, preemptor operation local priority "
                    f"was {priority.name.lower()}, and scheduling stage target priority was {target.name.lower()}"
                )
                if allocation.id in conditional:
                    text += "; this allocation was conditionally preemptible"
            self.preempt(allocation, node, now, result, (reason, stage), text, preemptor=preemptor)
        for allocation in candidates:
            if allocation.preempted or allocation.id in conditional:
                continue
            element = elements[allocation.operation_id]
            violated = violated_limits(element)
            if violated is None:
                continue
            if violated is element:
                text = f"Preempted due to violation of resource limits of operation {element.id}"
            else:
                text = f'Preempted due to violation of limits on pool "{violated.id}"'
            self.preempt(allocation, node, now, result, (AbortReason.RESOURCE_LIMITS_VIOLATED, stage), text)

    # -------------------------------------------------------------- stage 4: node overcommit

    def overcommit(self, node: ExecNode, now: float, result: HeartbeatResult) -> None:
        """§e.5 abort allocations beyond the node's resources, least preemptible kept first (YTsaurus `AbortAllocationsSinceResourcesOvercommit`)."""
        if _fits(node.usage, node.resource_limits):
            return
        running = [a for a in node.allocations.values() if not a.preempted]
        ranks = {a.id: PREEMPTION_STATUS_RANK[self.status(a)] for a in running}
        running.sort(key=lambda a: (ranks[a.id], a.start_time))
        kept = np.zeros(RESOURCE_COUNT)
        for allocation in running:
            if allocation.preempted:
                continue
            candidate = kept + allocation.resources
            if np.all(candidate <= node.resource_limits + _FIT_EPSILON):
                kept = candidate
                continue
            self.preempt(allocation, node, now, result, _OVERCOMMIT, _OVERCOMMIT_TEXT)

    # -------------------------------------------------------------- preemption

    def preempt(
        self,
        allocation: Allocation,
        node: ExecNode,
        now: float,
        result: HeartbeatResult,
        why: tuple[AbortReason, SchedulingStage],
        explanation: str,
        *,
        timeout: float | None = None,
        preemptor: Allocation | None = None,
        preempted_for: str | None = None,
    ) -> PreemptionRecord:
        """Stop accounting the allocation now, ask the node to stop it within ``timeout`` (YTsaurus `PreemptAllocation`).

        ``why`` is the abort reason and the stage deciding it; ``timeout`` defaults to allocation_preemption_timeout
        (interruptible allocations get that long to finish), graceful preemption passes its own.
        """
        reason, stage = why
        state = self.state
        if timeout is None:
            timeout = state.config.allocation_preemption_timeout
        record = PreemptionRecord(
            allocation_id=allocation.id,
            operation_id=allocation.operation_id,
            node_address=node.address,
            reason=reason,
            timeout=timeout,
            explanation=explanation,
            stage=stage,
            time=now,
            preemptor_allocation_id=preemptor.id if preemptor is not None else None,
            preemptor_operation_id=preemptor.operation_id if preemptor is not None else preempted_for,
            interruption_signal=allocation.interruption_signal,
            interruptible=allocation.interruptible,
            allocation_status=self.status(allocation),
        )
        runtime = state.operations.get(allocation.operation_id)
        element = state.elements.get(allocation.operation_id)
        _sub_np(node.usage, allocation.resources)
        if runtime is not None:
            state.release(allocation, runtime, element)
            runtime.preempted_allocation_count += 1
        allocation.preemption = record
        if element is not None and element.op is runtime and runtime is not None:
            self.heaps.refresh_leaf(element)
        result.allocations_to_preempt.append(record)
        event = {"event": "allocation_preempted", **record.to_dict()}
        state.emit(event)
        return record

    def stop_allocation(
        self, allocation: Allocation, reason: AbortReason, explanation: str, now: float, error: Any = None
    ) -> PreemptionRecord | None:
        """Stop a running allocation outside a heartbeat (job time limit): released now, delivered to its node
        in its next heartbeat answer with no timeout."""
        node = self.state.nodes.get(allocation.node_address)
        if node is None or allocation.preempted:
            return None
        target = self.state.queued_for(node.address)
        record = self.preempt(
            allocation,
            node,
            now,
            target,
            (reason, SchedulingStage.PREEMPTIVE_NORMAL),
            explanation,
            timeout=0.0,
        )
        record.error = error
        record.interruptible = False  # aborted at once, never interrupted to finish its work
        return record


def violated_limits(element: _Element) -> _Element | None:
    """The nearest of the element and its ancestors whose usage exceeds its resource limits (§e.4), else None."""
    for limited in element.limited:
        assert limited.limits is not None
        if any(u > lim + _FIT_EPSILON for u, lim in zip(limited.usage, limited.limits, strict=True)):
            return limited
    return None
