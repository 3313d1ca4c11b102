"""A same-structure publish that costs what changed since the previous publish (issue 16).

Between two fair-share updates of a tree whose structure is unchanged, most elements keep their spec (the build
hands out the very same `ElementSpec` object), their usage and their activity. The heartbeat path marks what it
touches: `StrategyState.account` (usage and preemptible lists), `BestLeaf.refresh_leaf` (satisfaction, activity) and
operation (un)registration write the operation's id into the change log's ``usage`` (`change_log.py`), which this
publish reads from where it last read. `ChangedPublisher.publish_changes` then
leaves every element, operation runtime, starvation state and heap as `SnapshotPublisher._publish_same_structure`
(three passes over every element) leaves them, while doing per-element work only for:

- elements whose spec changed (named by the tree when it was derived from the last published one,
  `SchedulingTree.respecced`; otherwise a spec-identity check per element, in one comprehension);
- touched operations and the pools above them (usage re-summed from the children, bit-identical to a rebuild
  because no other child's list changed since it was last summed);
- operations whose preemptible lists the last publish left unsettled;
- starvation of the elements whose status can change: those whose new spec gives another scheduling status,
  operations with a new runtime, added elements, elements below their fair share whose deadline the publish's
  time passed (a heap of `StarvationState.due`: the clock start plus a timeout not passed yet) and operations
  below whose controller's pending allocation count moved (it shrinks their timeouts; looked for among the
  operations whose controllers reported moved pending work or cannot report). Every other element would leave
  `StarvationState.advance` as it is (usage and shares do not enter the rules). The first publish of a step (the
  counts the last evaluation read are unknown), a time going back or another config re-evaluates every element
  below. Preemption priorities are recomputed only for the operations whose own or an ancestor's starvation
  status moved, new runtimes and added operations (`starvation_changes.update_priorities_of`);
- operations whose controller's pending count crossed zero without the strategy hearing of it (looked for among
  the same notified or polled operations) and their ancestors' heap entries.

Heaps are not rebuilt: a changed element gets a new entry (its ``version`` moves, so its old entry goes stale and
`BestLeaf.peek` drops it) and each pool above re-reads its best child the way `BestLeaf.recompute` does. The best entry is the
same one a rebuild gives, since entries are ordered by (key, least recently served, order key) and the order key
is unique. A heap holding more than twice as many entries as children (plus 8) is compacted at every publish. From
`heap_changes._BULK_SATISFACTION` re-keyed operations on, their satisfactions are computed in bulk (`satisfaction_ratios`, bit
for bit the per-element floats). Deactivation counts (one per publish per operation
inactive for `FAIR_SHARE_EXCEEDED` or `NO_AVAILABLE_DEMAND`) are kept lazily: the step remembers from which
publish an idle operation counts and adds the sum when its reason changes, when the step ends and before an
element view reads the counter, which adds what the step holds without changing it
(`ChangedPublisher.deactivation_reasons`).

A period in which operations arrived or left (`SnapshotPublisher._apply_operation_changes` brought the elements to
the new tree first) runs the same way with the added operations as touched ones with a new spec and the removed
ones' parents re-summed and re-queued (their entries went stale: the removed elements' ``version`` moved); the
step drops only the removed operations' elements (`PublishStep.follow`), the priority lists are re-made only when one of
them held a removed operation. Elements keep their order keys (``index`` increases along the tree order without
being a position, `pooltree/strategy/order.py`), so no other element is renumbered and no heap is rebuilt; only
when `order.place` finds no room in a pool is every element numbered again and every heap made anew.

Anything else falls back to the three-pass path: the total resources changed, or some element's spec leaves its
scheduling status or demand share to the strategy (both are then functions of usage: they would need recomputing
for every usage change). `tests/sim/test_publish_changes.py` compares this path with the three-pass one on
randomized busy trees; the simulator's exactness tests compare both with fresh trees every period.
"""

from __future__ import annotations

from typing import Any

from pooltree.resources import RESOURCE_COUNT
from pooltree.strategy.best_leaf import BestLeaf
from pooltree.strategy.change_log import PUBLISH, UNSETTLED
from pooltree.strategy.elements import StarvationState, _Element, _floats
from pooltree.strategy.heap_changes import requeue
from pooltree.strategy.priorities import configure_lists, update_priorities
from pooltree.strategy.publish_step import PublishStep
from pooltree.strategy.shares import blocked_mask
from pooltree.strategy.snapshot import SchedulingTree
from pooltree.strategy.starvation_changes import element_index, update_priorities_of, update_starvation_of
from pooltree.strategy.state import StrategyState


class ChangedPublisher:
    """The incremental same-structure publish, a part of `SnapshotPublisher` (see the module docstring)."""

    def __init__(self, state: StrategyState, heaps: BestLeaf) -> None:
        self.state = state
        self.heaps = heaps
        self.step: PublishStep | None = None
        """What the incremental publish keeps about the published structure (None: no step to continue)."""
        self.statuses_timed = False
        """The last publish that evaluated every element did so with a time (a publish without one leaves every
        status normal, so an incremental step may not start from it)."""
        self.unconfigured: list[_Element] = []
        """Operations whose preemptible lists the last publish left to configure (`configure_lists`)."""

    def forget_changes(self) -> None:
        """A publish that recomputes every element: what was touched before it is accounted for."""
        self.state.changes.skip(PUBLISH)
        self._drop_step()

    def _drop_step(self) -> None:
        """End the step: its lazy counts added; the lists it would have configured again are configured by the
        publish that ends it (every operation's)."""
        self.state.changes.skip(UNSETTLED)
        if self.step is not None:
            self.step.flush()
            self.step = None

    def deactivation_reasons(self, element: _Element) -> dict[str, int]:
        """The deactivation counts of ``element``'s operation, with what the step holds lazily (the step and the
        operation's counter left as they are)."""
        runtime = element.op
        assert runtime is not None
        counts = dict(runtime.deactivation_reasons)
        lazy = None if self.step is None else self.step.lazy_count(element)
        if lazy is not None:
            counts[lazy[0]] = counts.get(lazy[0], 0) + lazy[1]
        return counts

    def publish_changes(
        self,
        tree: SchedulingTree,
        now: float,
        total: tuple[float, ...],
        respecced: list[Any] | None,
        changed: tuple[list[str], list[_Element], list[_Element], bool] | None = None,
    ) -> bool:
        """Publish ``tree`` (same skeleton as the last one) doing work only where something changed; ``False``
        (nothing done) when the three-pass path must run instead. ``respecced``: the specs of ``tree`` that are not
        the last published tree's very objects, when the tree says which (`SchedulingTree.respecced`); ``None``:
        unknown.

        ``changed``: the tree differs from the last one by operation changes, already applied to the elements
        (`SnapshotPublisher._apply_operation_changes`): the added operations' ids, the parents the removed
        ones had, their elements, and whether every element was numbered anew. The added elements are then
        handled as touched ones with a new spec, the parents re-summed and re-queued (the removed ones' heap
        entries are stale), the priority lists re-made if a removed operation was on one; every heap is
        rebuilt only after a new numbering (heap entries carry the order keys).
        """
        touched = self.state.changes.take(PUBLISH)
        if total != self.state.total:
            self._drop_step()
            return False
        found = self._step_for(tree, changed)
        if found is None:
            return False
        step, ordered, resort = found
        specs = tree.elements
        fresh = self._respecced_elements(tree, ordered, respecced)
        for element in fresh:
            spec = specs[element.id]
            if spec.scheduling_status is None or spec.demand_share is None:
                self._drop_step()
                return False
        self.step = step
        self._take_specs(tree, fresh)
        removed_parents: list[_Element] = []
        if changed is not None:
            added = [self.state.elements[element_id] for element_id in changed[0]]
            for element in added:  # a new element's blocked mask is computed by the passes
                shares = (element.fair_share, element.demand_share)
                if shares != element.blocked_for:
                    element.blocked = blocked_mask(*shares)
                    element.blocked_for = shares
            fresh = [*fresh, *added]
            touched.update(changed[0])
            removed_parents = changed[1]
        changed_ops, rerun = self._take_touched(touched, fresh, removed_parents, changed is None)
        self._configure_changed(changed_ops)
        if changed is not None:
            rerun.extend(added)
        moved = update_starvation_of(self.state, step, fresh, rerun, now)
        if moved or rerun or resort:
            update_priorities_of(self.state, step, moved, rerun, resort)
        self.state.last_update_time = now
        renumbered = changed is not None and changed[3]
        # a pool's own satisfaction (`pool_satisfaction.py`) moves with any usage below it: every heap anew
        rebuild = renumbered or self.state.tree.pool_satisfaction_used
        requeue(self.state, self.heaps, step, fresh, changed_ops, total, removed_parents, rebuild=rebuild)
        return True

    def _step_for(
        self, tree: SchedulingTree, changed: tuple[list[str], list[_Element], list[_Element], bool] | None
    ) -> tuple[PublishStep, list[_Element] | None, bool] | None:
        """The step this publish continues (`PublishStep`): the last one, the last one following ``changed``'s
        operation changes, or a new one from the statuses of a publish with a time; with the elements in tree
        order when it had to list them and whether the priority lists must be re-sorted. None (the step
        dropped) when the three-pass path must run instead."""
        step = self.step
        elements = self.state.elements
        ordered: list[_Element] | None = None
        resort = False
        if step is not None and step.skeleton is tree.skeleton:
            return step, ordered, resort
        states = self.state.starvation
        if (
            step is not None
            and changed is not None
            and self.statuses_timed
            and _all_given(elements[element_id] for element_id in changed[0])
        ):  # the step of the tree the operation changes were applied to (its other specs were checked)
            resort = step.follow(tree.skeleton, elements, changed[2])
            for element_id in changed[0]:  # every other element has its state after a publish with a time
                if element_id not in states:
                    states[element_id] = StarvationState()
        else:
            self._drop_step()
            if not self.statuses_timed or not _all_given(elements.values()):
                # a step starts from statuses a publish with a time evaluated for every element
                return None
            ordered = [elements[element_id] for element_id in tree.order]
            step = PublishStep(tree.skeleton, ordered)
            self.state.changes.lists.update(  # the new step's first publish configures them again
                element.id
                for element in ordered
                if element.is_op and element.op is not None and not element.op.lists_settled
            )
            if changed is not None:  # the lists still hold the elements the operation changes removed
                update_priorities(self.state)
            step.priorities = {
                element: priority
                for priority, listed in self.state.ops_by_priority.items()
                for element in listed
            }
        if len(states) < len(elements):  # every element has its state after a publish with a time
            for element_id in tree.order:
                if element_id not in states:
                    states[element_id] = StarvationState()
        return step, ordered, resort

    def _respecced_elements(
        self, tree: SchedulingTree, ordered: list[_Element] | None, respecced: list[Any] | None
    ) -> list[_Element]:
        """The elements whose spec in ``tree`` is not the one they hold, in tree order: those the tree names as
        re-specced when it was derived from the last one, else found by comparing every element's spec."""
        elements = self.state.elements
        if respecced is not None:  # a tree derived from the last one with these specs new
            return sorted(
                {element for spec in respecced if (element := elements[spec.id]).spec is not spec},
                key=element_index,
            )
        if ordered is None:
            ordered = [elements[element_id] for element_id in tree.order]
        specs = tree.elements
        return [
            element
            for element, spec in zip(ordered, map(specs.__getitem__, tree.order), strict=True)
            if spec is not element.spec
        ]

    # ------------------------------------------------------------------ pass 1: specs, usage, lists

    def _take_specs(self, tree: SchedulingTree, fresh: list[_Element]) -> None:
        """The new specs' fair share, FIFO key, demand share and ``blocked`` (as `_publish_same_structure`).

        A bulk build hands the three tuples over in columns (`build_rows._Prepared.columns`): its ``blocked`` is the
        mask of the two shares, so the element takes it as it is and forgets what its mask was memoised for."""
        specs = tree.elements
        prepared = tree.prepared
        columns = getattr(prepared, "columns", None)
        if columns is not None:
            rows, fair_column, demand_column, blocked_column = columns()
        else:
            rows, fair_column, demand_column, blocked_column = {}, [], [], []
        row_of = rows.get
        for element in fresh:
            element_id = element.id
            spec = specs[element_id]
            element.spec = spec
            element.fifo_key = float(spec.fifo_index)
            k = row_of(element_id)
            if k is not None:
                element.fair_share = fair_column[k]
                demand = demand_column[k]
                if (
                    demand != element.demand_share
                ):  # else the element's equal tuple stays (one object less kept)
                    element.demand_share = demand
                element.blocked = blocked_column[k]
                element.blocked_for = None
                continue
            ready = prepared.get(element_id)
            if ready is None:
                element.fair_share = tuple(_floats(spec.fair_share))
                element.demand_share = tuple(_floats(spec.demand_share))
            else:
                element.fair_share = ready[0]
                element.demand_share = ready[1]
            shares = (element.fair_share, element.demand_share)
            if shares != element.blocked_for:  # a function of these two only
                element.blocked = ready[2] if ready is not None else blocked_mask(*shares)
                element.blocked_for = shares

    def _take_touched(
        self,
        touched: set[str],
        fresh: list[_Element],
        removed_parents: list[_Element],
        in_order: bool = False,
    ) -> tuple[list[_Element], list[_Element]]:
        """Touched operations take their runtime's usage; the pools above them are re-summed bottom-up.
        ``in_order``: ``fresh`` is in tree order, each element once.

        Returns the operations to re-key (touched or with a new spec), in tree order, and those whose runtime
        changed."""
        elements = self.state.elements
        operations = self.state.operations
        ops = [element for element in fresh if element.is_op]
        known: set[_Element] | None = None
        extra: list[_Element] = []
        pools: dict[int, _Element] = {}
        runtime_changed: list[_Element] = []
        for element_id in touched:
            element = elements.get(element_id)
            if element is None or not element.is_op:
                continue
            if known is None:
                known = set(ops)
            if element not in known:
                known.add(element)
                extra.append(element)
            runtime = operations.get(element_id)
            if runtime is not None:
                element.usage = runtime.usage
            elif element.op is not None:
                element.usage = [0.0] * RESOURCE_COUNT
            if element.op is not runtime:
                runtime_changed.append(element)
                element.op = runtime
            cursor = element.parent
            while cursor is not None and cursor.index not in pools:
                pools[cursor.index] = cursor
                cursor = cursor.parent
        for cursor in removed_parents:
            while cursor is not None and cursor.index not in pools:
                pools[cursor.index] = cursor
                cursor = cursor.parent
        for index in sorted(pools, reverse=True):  # children before their parents
            # `add_floats` of each child's usage into zeros, unrolled into locals: the same additions in the
            # same order (bit for bit the same sums) without a call and five list writes per child
            u0 = u1 = u2 = u3 = u4 = 0.0
            for child in pools[index].children:
                c = child.usage
                u0 += c[0]
                u1 += c[1]
                u2 += c[2]
                u3 += c[3]
                u4 += c[4]
            pools[index].usage = [u0, u1, u2, u3, u4]
        if extra or not in_order:
            ops = sorted({*ops, *extra}, key=element_index)
        return ops, runtime_changed

    def _configure_changed(self, changed_ops: list[_Element]) -> None:
        """Name the operations whose preemptible lists this publish must configure (the changed ones and those the
        last publish left unsettled); `configure_lists` configures them. Nothing else a publish computes reads
        the lists, so configuring them after the rest of the publish leaves the same state."""
        elements = self.state.elements
        unsettled = {
            element
            for operation_id in self.state.changes.take(UNSETTLED)
            if (element := elements.get(operation_id)) is not None and element.is_op
        }
        # in tree order, not the set's (identity-hashed elements: their order would follow memory addresses), so
        # that configuring in parts (`configure_lists` with a limit) takes the same operations first in every process
        self.unconfigured.extend(sorted(unsettled.union(changed_ops), key=element_index, reverse=True))

    def configure_lists(self, limit: int | None = None) -> bool:
        """Configure the preemptible lists the last publish named (`_configure_changed`), at most ``limit``
        operations of them (None: all); whether none is left. Each operation's lists are a function of its own
        published shares, the total and the thresholds, so they can be configured one operation at a time: the
        live service does it in short holds of its lock (`server/live/updates.py`), as YTsaurus updates each
        operation's preemptible allocation list while node shards go on scheduling."""
        pending = self.unconfigured
        unsettled = self.state.changes.lists  # the next publish configures these again
        count = len(pending) if limit is None else min(limit, len(pending))
        for _ in range(count):
            element = pending.pop()
            if element.op is not None:
                configure_lists(self.state, element)
                if not element.op.lists_settled:
                    unsettled.add(element.id)
        return not pending

    # ------------------------------------------------------------------ pass 2: statuses and starvation


def _all_given(elements: Any) -> bool:
    """Whether every element's spec gives its scheduling status and demand share (the incremental path's
    precondition: the strategy computes neither from usage)."""
    return all(
        element.spec.scheduling_status is not None and element.spec.demand_share is not None
        for element in elements
    )
