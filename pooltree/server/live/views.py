"""Read views of the live scheduler: the orchid's tree views of the last published update, the strategy fields of
its elements, and an operation's job counts.

Read with the scheduler's lock held (``scheduler.py``: ``scheduler.views``, ``scheduler.strategy_views``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pooltree.errors import PooltreeError
from pooltree.orchid import tree_view, unpublished_operation_view
from pooltree.server.live.model import LiveOperation
from pooltree.strategy.build_static import operation_aggressive_preemption_allowed
from pooltree.strategy.core import SchedulerCore

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


class TreeViews(Mapping[str, dict[str, Any]]):
    """``tree → orchid view`` of the last published fair-share update, built on first read and kept until the
    next update of that tree. Building a view costs per element of the tree (shares, placement, strategy
    fields), far more than the update at thousands of pending operations, so it is paid only when read (the
    orchid, ``/metrics``). Read with the scheduler's lock held."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler
        self._built: dict[str, dict[str, Any]] = {}

    def forget(self, tree: str) -> None:
        self._built.pop(tree, None)

    def _published(self) -> list[str]:
        return [name for name, core in self.scheduler.cores.items() if core.last_result is not None]

    def _published_core(self, tree: object) -> SchedulerCore | None:
        """``tree``'s core when it has published a fair-share update (a view can be built), else None."""
        core = self.scheduler.cores.get(tree) if isinstance(tree, str) else None
        return core if core is not None and core.last_result is not None else None

    def __getitem__(self, tree: str) -> dict[str, Any]:
        view = self._built.get(tree)
        if view is not None:
            return view
        core = self._published_core(tree)
        if core is None:
            raise KeyError(tree)
        view = tree_view(core.pool_tree, core.last_result, core.total_resources)
        missing = [i for i in core.pool_tree.operations if i not in core.last_result.elements]
        if missing:
            positions = core.pool_tree.pending_positions()
            for operation_id in missing:
                view["operations"][operation_id] = unpublished_operation_view(
                    core.pool_tree, operation_id, positions.get(operation_id)
                )
        for section in ("pools", "operations"):
            for element_id, entry in view[section].items():
                try:
                    extra = core.strategy.element_view(element_id)
                except PooltreeError:
                    continue
                if section == "operations":
                    for old_name, name in _ORCHID_JOB_NAMES:  # YTsaurus's operation orchid still says "job"
                        if name in extra:
                            extra[old_name] = extra[name]
                    registered = core.pool_tree.operations.get(element_id)
                    if registered is not None:
                        extra["aggressive_preemption_allowed"] = operation_aggressive_preemption_allowed(
                            core.pool_tree, registered.spec
                        )
                    controller = core.controllers.get(element_id)
                    if controller is not None:
                        extra["progress"] = controller.progress()
                entry.update(extra)
        if core.strategy.segments.enabled:
            view["scheduling_segments"] = core.segments_view()
        if core.strategy.gpu_policy.config.planning:
            view["gpu_assignment_plan"] = core.gpu_policy_view()
        self._built[tree] = view
        return view

    def __contains__(self, tree: object) -> bool:
        """Whether ``tree`` has a view, without building it (``Mapping``'s own test reads the item)."""
        return tree in self._built or self._published_core(tree) is not None

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
