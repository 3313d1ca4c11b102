"""Read views of the live scheduler: the orchid's tree views of the last published update, the strategy fields of
its elements, and an operation's job counts.

Read with the scheduler's lock held (``scheduler.py``: ``scheduler.views``, ``scheduler.strategy_views``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from pooltree.errors import PooltreeError
from pooltree.fairshare.model import FairShareResult
from pooltree.fairshare.results import element_kinds
from pooltree.orchid import ViewParts, assemble_tree_view, operation_pool, pool_entry, view_parts
from pooltree.server.live.model import LiveOperation
from pooltree.strategy.build_static import aggressive_preemption_rule
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.element_fields import ElementFields, fields_view

if TYPE_CHECKING:
    from pooltree.server.live.scheduler import LiveScheduler


def progress(op: LiveOperation) -> dict[str, Any]:
    """Job counts as ``brief_progress.jobs`` needs them (running, completed, pending, failed, aborted, lost)."""
    controller = op.controller
    running = op.running_job_count
    pending = controller.pending_allocation_count if not op.is_final else 0
    if op.is_final:
        running = 0
    completed = controller.completed_job_count
    return {
        "running": running,
        "completed": completed,
        "pending": max(pending - controller.reserved_count, 0),
        "failed": controller.failed_job_count,
        "aborted": op.aborted_jobs,
        "lost": op.lost_jobs,
        "total": running + completed + max(pending - controller.reserved_count, 0),
    }


class ViewCapture:
    """What a tree's orchid view shows of the scheduler's state that can change after its update: read under the
    lock (``capture_view``, per element of the tree) and assembled into the view once, on first read, without it
    (``view``: the shares' formatting, most of a view's cost, reads only the update's result, which no one
    changes)."""

    def __init__(
        self,
        result: FairShareResult,
        total_resources: np.ndarray,
        parts: ViewParts,
        extras: dict[str, ElementCapture],
        segments: dict[str, Any] | None,
        gpu_plan: dict[str, Any] | None,
    ) -> None:
        self.result = result
        self.total_resources = total_resources
        self.parts = parts
        """The tree's placements, unpublished operations' facts (formatted by the assembly: thousands of pending
        operations cost the lock ~1 us each, not ~6), alerts and discretized flags (``orchid.view_parts``)."""
        self.extras = extras
        """Element or operation → the strategy's fields and counts overlaid on its entry, as captured (their maps
        are made by ``view``)."""
        self.segments = segments
        self.gpu_plan = gpu_plan
        self._view: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def view(self) -> dict[str, Any]:
        """The assembled view (made once; readers must not change it)."""
        view = self._view
        if view is None:
            with self._lock:
                view = self._view
                if view is None:
                    view = self._view = assemble_view(self)
        return view

    def pools_view(self) -> dict[str, dict[str, Any]]:
        """The view's ``pools`` (readers must not change them): the assembled view's when it was made, else made
        alone (a tree's few pools, not its thousands of operations: the pool history samples them under the lock
        at an update)."""
        view = self._view
        if view is not None:
            return view["pools"]  # type: ignore[no-any-return]
        return assemble_pools(self)

    def operation_pool(self, operation_id: str) -> Any:
        """``view()["operations"][operation_id].get("pool")`` (None: no such entry), without assembling the view."""
        view = self._view
        if view is not None:
            entry = view["operations"].get(operation_id)
            return None if entry is None else entry.get("pool")
        return operation_pool(self.parts, operation_id)

    @property
    def pools(self) -> list[str]:
        """The tree's pools in the view, in its order."""
        return [
            element_id for element_id, is_operation in element_kinds(self.result.elements) if not is_operation
        ]

    @property
    def operations(self) -> list[str]:
        """The tree's operations in the view, in its order."""
        published = [
            element_id for element_id, is_operation in element_kinds(self.result.elements) if is_operation
        ]
        return [*published, *self.parts.unpublished]


class ElementCapture(NamedTuple):
    """What a view overlays on one element's entry, as the capture takes it under the lock: the strategy's fields
    (plain values, ``TreeScheduler.element_fields``), and for an operation whether it may be preempted aggressively
    (``_UNSET``: not registered in the tree) and its controller's progress (None: no controller)."""

    fields: ElementFields
    is_operation: bool
    aggressive_preemption_allowed: Any
    progress: dict[str, Any] | None


_UNSET = object()
"""``ElementCapture.aggressive_preemption_allowed`` of an element with no such field (a pool, an operation no
longer registered)."""


def capture_view(core: SchedulerCore, previous: ViewParts | None = None) -> ViewCapture:
    """The mutable part of ``core``'s view of its last published update (the scheduler's lock held); operations
    whose facts did not change since ``previous`` (the tree's last capture) keep them (``orchid.view_parts``). The
    elements' fields are taken as plain values; their maps are made with the view, off the lock (``extra_of``)."""
    tree, result = core.pool_tree, core.last_result
    assert result is not None
    parts = view_parts(tree, result, previous)
    unpublished = parts.unpublished
    extras: dict[str, ElementCapture] = {}
    strategy = core.strategy
    element_fields = strategy.element_fields
    strategy_elements = strategy.state.elements  # element_fields refuses any other (pending operations)
    registered_operations = tree.operations
    controllers = core.controllers
    aggressive_preemption_allowed = aggressive_preemption_rule(tree)
    kinds = [*element_kinds(result.elements), *((operation_id, True) for operation_id in unpublished)]
    for element_id, is_operation in kinds:  # the update's element results are made off the lock (``view``)
        if element_id not in strategy_elements:
            continue
        try:
            fields = element_fields(element_id)
        except PooltreeError:
            continue
        if not is_operation:
            extras[element_id] = ElementCapture(fields, False, _UNSET, None)
            continue
        registered = registered_operations.get(element_id)
        controller = controllers.get(element_id)
        extras[element_id] = ElementCapture(
            fields,
            True,
            _UNSET if registered is None else aggressive_preemption_allowed(registered.spec),
            None if controller is None else controller.progress(),
        )
    return ViewCapture(
        result=result,
        total_resources=np.array(core.total_resources, dtype=float),
        parts=parts,
        extras=extras,
        segments=core.segments_view() if strategy.segments.enabled else None,
        gpu_plan=core.gpu_policy_view() if strategy.gpu_policy.config.planning else None,
    )


def extra_of(capture: ElementCapture) -> dict[str, Any]:
    """The fields a view overlays on an element's entry, made from its capture (without the lock)."""
    extra = fields_view(capture.fields)
    if capture.is_operation:
        for old_name, name in _ORCHID_JOB_NAMES:  # YTsaurus's operation orchid still says "job"
            if name in extra:
                extra[old_name] = extra[name]
        if capture.aggressive_preemption_allowed is not _UNSET:
            extra["aggressive_preemption_allowed"] = capture.aggressive_preemption_allowed
        if capture.progress is not None:
            extra["progress"] = capture.progress
    return extra


def assemble_view(capture: ViewCapture) -> dict[str, Any]:
    """The orchid view of a captured tree (``pooltree.orchid.tree_view``'s layout, the strategy's fields overlaid),
    without the lock."""
    view = assemble_tree_view(capture.parts, capture.result, capture.total_resources)
    for section in (view["pools"], view["operations"]):
        for element_id, entry in section.items():
            _overlay(entry, capture.extras.get(element_id))
    if capture.segments is not None:
        view["scheduling_segments"] = capture.segments
    if capture.gpu_plan is not None:
        view["gpu_assignment_plan"] = capture.gpu_plan
    return view


def assemble_pools(capture: ViewCapture) -> dict[str, dict[str, Any]]:
    """The pools of ``capture``'s view, as ``assemble_view`` makes them, alone."""
    elements = capture.result.elements
    pools: dict[str, dict[str, Any]] = {}
    for element_id, is_operation in element_kinds(elements):
        if not is_operation:
            entry = pool_entry(capture.parts, element_id, elements[element_id])
            _overlay(entry, capture.extras.get(element_id))
            pools[element_id] = entry
    return pools


def _overlay(entry: dict[str, Any], captured: ElementCapture | None) -> None:
    if captured is not None:
        entry.update(extra_of(captured))


class TreeViews(Mapping[str, dict[str, Any]]):
    """``tree → orchid view`` of the last published fair-share update, built on first read and kept until the
    next update of that tree. Building a view costs per element of the tree (shares, placement, strategy
    fields), far more than the update at thousands of pending operations, so it is paid only when read (the
    metrics, the pool history, an operation's pending reason). Read with the scheduler's lock held; the orchid
    and the web pages read the published snapshot's (``snapshot.py``: captured per update, assembled off the
    lock)."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler
        self._captured: dict[str, ViewCapture] = {}
        self._last: dict[str, ViewParts] = {}
        """Per tree, the parts of its last capture: the next capture keeps the facts of the operations that did
        not change since (a capture a second at thousands of pending operations)."""

    def forget(self, tree: str) -> None:
        """``tree``'s view no longer shows its state: captured again when read, and published (``snapshot.py``)."""
        self._captured.pop(tree, None)
        self.scheduler.snapshots.changed()

    def capture(self, tree: str) -> ViewCapture:
        """``tree``'s capture, made now unless one was made since the tree's view was last forgotten (KeyError: no
        published update)."""
        captured = self._captured.get(tree)
        if captured is not None:
            return captured
        core = self.published_core(tree)
        if core is None:
            raise KeyError(tree)
        for gone in [name for name in self._last if name not in self.scheduler.cores]:
            del self._last[gone]  # a tree removed: its facts are no one's to keep
        captured = self._captured[tree] = capture_view(core, self._last.get(tree))
        self._last[tree] = captured.parts
        return captured

    def _published(self) -> list[str]:
        return [name for name, core in self.scheduler.cores.items() if core.last_result is not None]

    def published_core(self, tree: object) -> SchedulerCore | None:
        """``tree``'s core when it has published a fair-share update (a view can be built), else None."""
        core = self.scheduler.cores.get(tree) if isinstance(tree, str) else None
        return core if core is not None and core.last_result is not None else None

    def __getitem__(self, tree: str) -> dict[str, Any]:
        return self.capture(tree).view()

    def __contains__(self, tree: object) -> bool:
        """Whether ``tree`` has a view, without building it (``Mapping``'s own test reads the item)."""
        return tree in self._captured or self.published_core(tree) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._published())

    def __len__(self) -> int:
        return len(self._published())


_ORCHID_JOB_NAMES = (
    ("preemptible_job_count", "preemptible_allocation_count"),
    ("aggressively_preemptible_job_count", "aggressively_preemptible_allocation_count"),
)


class StrategyViews(Mapping[str, "ElementStrategyViews"]):
    """``tree → element id → strategy fields`` (starvation, satisfaction, ...) of the published tree, each read
    from the strategy when looked up (one element costs one element)."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler

    def __getitem__(self, tree: str) -> ElementStrategyViews:
        core = self.scheduler.cores.get(tree)
        if core is None or core.last_result is None:
            raise KeyError(tree)
        return ElementStrategyViews(core)

    def __iter__(self) -> Iterator[str]:
        return iter(name for name, core in self.scheduler.cores.items() if core.last_result is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ElementStrategyViews(Mapping[str, dict[str, Any]]):
    """The strategy fields of the elements of one published tree, read when looked up."""

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core

    def __getitem__(self, element_id: str) -> dict[str, Any]:
        result = self.core.last_result
        if result is None or element_id not in result.elements:
            raise KeyError(element_id)
        try:
            return self.core.strategy.element_view(element_id)
        except PooltreeError:
            raise KeyError(element_id) from None

    def __iter__(self) -> Iterator[str]:
        result = self.core.last_result
        return iter(result.elements if result is not None else ())

    def __len__(self) -> int:
        result = self.core.last_result
        return len(result.elements) if result is not None else 0
