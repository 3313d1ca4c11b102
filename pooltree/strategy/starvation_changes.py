"""The starvation and preemption priorities of an incremental publish (`changes.py`): §c's rules advanced only for the
elements whose status or clock can move (`update_starvation_of`), and the operations' preemption priorities (§e.2)
recomputed only where a starvation status moved (`update_priorities_of`). Every other element would keep what it
has: see `ChangedPublisher` for why."""

from __future__ import annotations

import heapq
import math

from pooltree.strategy.change_log import PENDING
from pooltree.strategy.elements import StarvationState, _Element
from pooltree.strategy.model import PRIORITY_OF_RANK, STARVATION_RANK, PreemptionPriority, SchedulingStatus
from pooltree.strategy.publish_step import PublishStep
from pooltree.strategy.state import StrategyState

_NORMAL = SchedulingStatus.NORMAL
_INF = math.inf


def update_starvation_of(
    state: StrategyState, step: PublishStep, fresh: list[_Element], rerun: list[_Element], now: float
) -> list[_Element]:
    """`priorities.update_priorities`' starvation rules for the elements whose status or clock can move: those
    whose new spec gives another scheduling status, ``rerun`` (operations with a new runtime, added
    elements), elements below their fair share whose deadline fell due (``now`` later than their
    `StarvationState.due`) and operations below their fair share whose pending allocation count moved
    (their timeouts follow it). The first publish of a step, one whose time went back or whose config is
    another re-evaluates every element below its fair share. Returns the elements whose starvation status
    changed.

    Every other element would leave `StarvationState.advance` with every field as it is: the rules read
    of an element its status (of the spec), parent, kind, settings (of the structure) and runtime, and,
    below its fair share, the time only through `StarvationState.due` and the pending count; usage and
    shares do not enter. So it is skipped: the result is the one of advancing every element."""
    visit = _starvation_visit(state, step, fresh, rerun, now)
    moved = _advance_starvation(state, step, visit, now)
    due = step.due
    if len(due) > 2 * len(step.deadlines) + 64:  # entries of re-evaluated or departed elements: compact
        step.due = [entry for entry in due if step.deadlines.get(entry[2]) == entry[1]]
        heapq.heapify(step.due)
    states = state.starvation
    if len(states) > len(state.elements):
        for stale in set(states) - set(state.elements):
            del states[stale]
    return moved


def _starvation_visit(
    state: StrategyState, step: PublishStep, fresh: list[_Element], rerun: list[_Element], now: float
) -> set[_Element]:
    """The elements whose starvation status or clock can move at ``now`` (see `update_starvation_of`); the
    step's clock moves to ``now`` (its deadlines start anew after a time going back or another config)."""
    config = state.config
    clock = step.clock
    visit = set(rerun)
    for element in fresh:
        status = element.spec.scheduling_status
        if status is element.status:  # the same member: the same status (the root's is normal either way)
            continue
        if type(status) is not SchedulingStatus:
            status = SchedulingStatus(status)
        if element.parent is None:
            status = _NORMAL
        if status is not element.status:
            visit.add(element)
    if clock is None or now < clock or config is not step.config:
        visit.update(step.below)
        step.due = []
        step.deadlines = {}
        step.pending = {}
        step.config = config
    else:
        due = step.due
        deadlines = step.deadlines
        pop = heapq.heappop
        while due and due[0][0] < now:
            _, number, element = pop(due)
            if deadlines.get(element) == number:
                del deadlines[element]
                visit.add(element)
        _pending_counts_moved(state, step, visit)
    step.clock = now
    return visit


def _advance_starvation(
    state: StrategyState, step: PublishStep, visit: set[_Element], now: float
) -> list[_Element]:
    """§c's starvation rules (`StarvationState.advance`) for the ``visit`` elements in tree order, with the
    step's sets of elements below their fair share, deadlines and pending counts kept; returns the elements
    whose starvation status changed."""
    config = state.config
    states = state.starvation
    below = step.below
    due = step.due
    deadlines = step.deadlines
    pending = step.pending
    push = heapq.heappush
    numbered = step.numbered
    moved: list[_Element] = []
    for element in sorted(visit, key=element_index):
        status = element.spec.scheduling_status
        if type(status) is not SchedulingStatus:
            status = SchedulingStatus(status)
        parent = element.parent
        if parent is None:
            status = _NORMAL
        element.status = status
        element_id = element.id
        state = states.get(element_id)
        if state is None:
            state = states[element_id] = StarvationState()
        own = state.advance(element, status is not _NORMAL, now, config)
        if element.starvation != own:
            element.starvation = own
            moved.append(element)
        if status is _NORMAL:
            below.discard(element)
            deadlines.pop(element, None)
            pending.pop(element, None)
            continue
        below.add(element)
        deadline = state.due
        if deadline < _INF:
            numbered += 1
            deadlines[element] = numbered
            push(due, (deadline, numbered, element))
        else:
            deadlines.pop(element, None)
        runtime = element.op
        if element.is_op and runtime is not None:
            pending[element] = runtime.controller.pending_allocation_count
        else:
            pending.pop(element, None)
    step.numbered = numbered
    return moved


def _pending_counts_moved(state: StrategyState, step: PublishStep, visit: set[_Element]) -> None:
    """Add to ``visit`` the operations below their fair share whose controller's pending allocation count is
    not the one their last evaluation read. Only operations whose controllers reported moved pending work
    since the last incremental publish or cannot report (the change log's pending work, `change_log.py`, which
    `heap_changes.requeue` takes afterwards) can be such."""
    counts = step.pending
    if not counts:
        return
    elements = state.elements
    for operation_id in state.changes.read(PENDING)[0]:
        element = elements.get(operation_id)
        if element is None:
            continue
        count = counts.get(element)
        if count is None:
            continue
        runtime = element.op
        if runtime is None or runtime.controller.pending_allocation_count != count:
            visit.add(element)


def update_priorities_of(
    state: StrategyState, step: PublishStep, moved: list[_Element], rerun: list[_Element], resort: bool
) -> None:
    """`priorities.update_priorities` for the operations whose preemption priority can have changed: those whose
    starvation status ``moved``, those below a pool whose status moved (unless the scope is
    ``operation_only``) and ``rerun`` (a new runtime or a new element). ``StrategyState.ops_by_priority`` is made anew
    from ``step.priorities`` in tree order when some priority changed or ``resort`` (tree indices moved)."""
    own_only = state.config.scheduling_preemption_priority_scope == "operation_only"
    visit = set(rerun)
    for element in moved:
        if element.is_op:
            visit.add(element)
        elif not own_only:  # every operation below the pool
            stack = list(element.children)
            while stack:
                child = stack.pop()
                if child.is_op:
                    visit.add(child)
                else:
                    stack.extend(child.children)
    priorities = step.priorities
    severity: dict[_Element, int] = {}
    changed = resort
    for element in visit:
        rank = STARVATION_RANK[element.starvation]
        parent = element.parent
        if not own_only and parent is not None:
            above = _severity(parent, severity)
            if above > rank:
                rank = above
        priority = PRIORITY_OF_RANK[rank]
        if element.op is not None:
            element.op.preemption_priority = priority
        if priorities.get(element) is not priority:
            if rank:
                priorities[element] = priority
            elif element in priorities:
                del priorities[element]
            else:
                continue
            changed = True
    if changed:
        by_priority: dict[PreemptionPriority, list[_Element]] = {
            PreemptionPriority.NORMAL: [],
            PreemptionPriority.AGGRESSIVE: [],
        }
        for element in sorted(priorities, key=element_index):
            by_priority[priorities[element]].append(element)
        state.ops_by_priority = by_priority


def element_index(element: _Element) -> int:
    """An element's order key (`order.py`): sorting by it gives the tree order."""
    return element.index


def _severity(pool: _Element, known: dict[_Element, int]) -> int:
    """The most severe starvation rank among ``pool`` and its ancestors (memoised in ``known``)."""
    rank = known.get(pool)
    if rank is None:
        rank = STARVATION_RANK[pool.starvation]
        parent = pool.parent
        if parent is not None:
            above = _severity(parent, known)
            if above > rank:
                rank = above
        known[pool] = rank
    return rank
