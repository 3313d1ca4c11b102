"""The read snapshot's tree views (``views.capture_view`` under the scheduling lock, ``ViewCapture.view`` off it):
assembled on first read, however the scheduler changed before that read (jobs started and completed, operations
activated from a queue, starvation, another update), each equals the view the capture of session 35 made at its
publication (``_reference_view``: its code kept here as the reference, the strategy's ``element_view`` included),
and so do its pools and operations' pools read without the view (``pools_view``, ``operation_pool``: the pool
history's reads under the lock). The capture makes none of the update's element results (~20 array copies each):
the view's assembly does."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pooltree.config import parse_pool_trees
from pooltree.errors import PooltreeError
from pooltree.fairshare.results import ElementResults
from pooltree.node import wire
from pooltree.orchid import assemble_tree_view, view_parts
from pooltree.resources import RESOURCES
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler, views
from pooltree.server.live.snapshot import ReadSnapshot
from pooltree.server.live.views import ViewCapture, assemble_view
from pooltree.server.store import open_store
from pooltree.strategy import TreeScheduler
from pooltree.strategy.build_static import operation_aggressive_preemption_allowed
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.elements import StarvationState, _lowest
from pooltree.strategy.model import StarvationStatus
from pooltree.web.history import PoolHistory

LIMITS = {"user_slots": 4, "cpu": 4, "memory": 16 << 30}
TREES = {
    "default": {
        "config": {"fair_share_starvation_timeout": 1000, "fair_share_starvation_tolerance": 0.9},
        "pools": {
            "queue": {"max_running_operation_count": 2},
            "hungry": {"strong_guarantee_resources": {"cpu": 6}},
        },
    }
}
"""Pool ``queue`` runs two operations at a time (the others pending, unpublished); pool ``hungry`` is guaranteed
more than it gets at first (below its fair share, starving after 1 s)."""


class _Node:
    """A node without processes: the jobs it was told to start run until ``complete`` finishes them, or an answer
    preempts or aborts them."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.running: dict[str, dict[str, Any]] = {}
        self.finished: list[dict[str, Any]] = []

    def heartbeat(self, scheduler: LiveScheduler, now: float) -> None:
        body = {
            "node_address": self.address,
            "resource_limits": LIMITS,
            "running_jobs": [
                wire.running_job(
                    job_id,
                    job["operation_id"],
                    "main",
                    start_time=job["start_time"],
                    resource_usage={"cpu": 1},
                )
                for job_id, job in self.running.items()
            ],
            "finished_jobs": self.finished,
        }
        self.finished = []
        answer = scheduler.process_heartbeat(parse_heartbeat(body), now)
        stops = [entry[0] for entry in answer.get(wire.PREEMPT, ())]
        stops += [
            entry["job_id"] if isinstance(entry, dict) else entry for entry in answer.get(wire.ABORT, ())
        ]
        for job_id in stops:
            self._finish(job_id, "aborted", now)
        for spec in answer.get(wire.START, ()):
            self.running[spec["job_id"]] = {"operation_id": spec["operation_id"], "start_time": now}

    def complete(self, count: int, now: float) -> None:
        for job_id in list(self.running)[:count]:
            self._finish(job_id, "completed", now)

    def _finish(self, job_id: str, state: str, now: float) -> None:
        job = self.running.pop(job_id, None)
        if job is not None:
            self.finished.append(
                wire.finished_job(job_id, job["operation_id"], "main", state, job["start_time"], now)
            )


# ----------------------------------------------------------------- session 35's capture, kept as the reference

_ORCHID_JOB_NAMES = (
    ("preemptible_job_count", "preemptible_allocation_count"),
    ("aggressively_preemptible_job_count", "aggressively_preemptible_allocation_count"),
)


def _reference_element_view(strategy: TreeScheduler, element_id: str) -> dict[str, Any]:
    """``TreeScheduler.element_view`` as session 35 wrote it."""
    element = strategy.state.elements.get(element_id)
    if element is None:
        raise PooltreeError(f"no element {element_id}", code=500)
    state = strategy.starvation.get(element_id, StarvationState())
    lowest = _lowest(element, lambda e: e.starvation != StarvationStatus.NON_STARVING)
    lowest_aggressive = _lowest(element, lambda e: e.starvation == StarvationStatus.AGGRESSIVELY_STARVING)
    view: dict[str, Any] = {
        "scheduling_status": element.status.value,
        "starvation_status": state.status.value,
        "below_fair_share_since": state.below_fair_share_since,
        "starving_since": state.starving_since,
        "lowest_starving_ancestor": lowest,
        "lowest_aggressively_starving_ancestor": lowest_aggressive,
        "local_satisfaction_ratio": strategy.heaps.local_satisfaction(element),
        "effective_fair_share_starvation_tolerance": element.settings.starvation_tolerance,
        "effective_fair_share_starvation_timeout": element.settings.starvation_timeout,
        "effective_aggressive_starvation_enabled": element.settings.aggressive_starvation_enabled,
        "effective_aggressive_preemption_allowed": element.settings.allow_aggressive_preemption,
        "resource_usage": {name: element.usage[i] for i, name in enumerate(RESOURCES)},
    }
    runtime = element.op
    if element.is_op and runtime is not None:
        counts = runtime.lists.counts()
        view.update(
            {
                "preemptible_allocation_count": counts["preemptible"],
                "aggressively_preemptible_allocation_count": counts["aggressively_preemptible"],
                "non_preemptible_allocation_count": counts["non_preemptible"],
                "running_allocation_count": len(runtime.lists),
                "preempted_allocation_count": runtime.preempted_allocation_count,
                "deactivation_reasons": strategy.publisher.changes.deactivation_reasons(element),
                "preemption_priority": runtime.preemption_priority.name.lower(),
                "preemption_mode": element.spec.preemption_mode,
                "allocation_preemption_timeout": strategy.config.allocation_preemption_timeout,
                "allocation_graceful_preemption_timeout": strategy.config.allocation_graceful_preemption_timeout,
            }
        )
        view.update(strategy.segments.operation_view(element_id))
        view.update(strategy.gpu_policy.operation_view(element_id))
        view.update(strategy.ssd.operation_view(element_id))
    return view


def _reference_view(core: SchedulerCore) -> dict[str, Any]:
    """The tree's view as session 35's ``capture_view`` and ``assemble_view`` made it, all at once."""
    tree, result = core.pool_tree, core.last_result
    assert result is not None
    parts = view_parts(tree, result)
    extras: dict[str, dict[str, Any]] = {}
    for element_id in (*result.elements, *parts.unpublished):
        if element_id not in core.strategy.state.elements:
            continue
        try:
            extra = _reference_element_view(core.strategy, element_id)
        except PooltreeError:
            continue
        if element_id in parts.unpublished or result.elements[element_id].is_operation:
            for old_name, name in _ORCHID_JOB_NAMES:
                if name in extra:
                    extra[old_name] = extra[name]
            registered = tree.operations.get(element_id)
            if registered is not None:
                extra["aggressive_preemption_allowed"] = operation_aggressive_preemption_allowed(
                    tree, registered.spec
                )
            controller = core.controllers.get(element_id)
            if controller is not None:
                extra["progress"] = controller.progress()
        extras[element_id] = extra
    view = assemble_tree_view(parts, result, np.array(core.total_resources, dtype=float))
    for section in (view["pools"], view["operations"]):
        for element_id, entry in section.items():
            extra = extras.get(element_id)
            if extra is not None:
                entry.update(extra)
    if core.strategy.segments.enabled:
        view["scheduling_segments"] = core.segments_view()
    if core.strategy.gpu_policy.config.planning:
        view["gpu_assignment_plan"] = core.gpu_policy_view()
    return view


def _text(view: dict[str, Any]) -> str:
    """``view`` as JSON, keys in their order: equal texts are equal views, ordered alike."""
    return json.dumps(view, default=repr)


# ----------------------------------------------------------------------------------------------------- tests


QUEUED = {"pool": "queue", "tasks": {"main": {"command": "true", "job_count": 6, "cpu_limit": 1}}}
HUNGRY = {"pool": "hungry", "tasks": {"main": {"command": "true", "job_count": 12, "cpu_limit": 1}}}


def _scheduler(tmp_path: Path) -> tuple[LiveScheduler, list[_Node]]:
    """Two nodes of 4 slots, four operations queued in pool ``queue`` (two running)."""
    scheduler = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    scheduler.apply_pool_trees(parse_pool_trees(TREES), "default", 0.0)
    nodes = [_Node("n0"), _Node("n1")]
    for node in nodes:
        node.heartbeat(scheduler, 0.5)
    for index in range(4):
        scheduler.start_operation("vanilla", QUEUED, "root", 1.0, operation_id=f"1-1-1-{index}")
    return scheduler, nodes


def test_views_read_after_changes_equal_the_capture_made_at_the_publication(tmp_path: Path) -> None:
    """The queued operations fill the nodes; the guaranteed one comes after and starves; jobs complete
    at every step, operations end and queued ones are activated. Each publication's view is read only at the
    end."""
    scheduler, nodes = _scheduler(tmp_path)
    core = scheduler.cores["default"]
    published: list[tuple[ReadSnapshot, str]] = []
    now = 1.0
    for step in range(10):
        now += 0.5
        if step == 2:
            scheduler.start_operation("vanilla", HUNGRY, "root", now, operation_id="2-2-2-2")
        scheduler.update_fair_share("default", now)
        published.append(
            (scheduler.snapshots.current, _text(_reference_view(core)))
        )  # made at the publication
        for node in nodes:
            node.complete(1, now + 0.1)
            node.heartbeat(scheduler, now + 0.2)  # usage, counts, satisfaction, progress, reasons change
    texts = [text for _, text in published]
    assert all(before != after for before, after in itertools.pairwise(texts))
    operations = [json.loads(text)["operations"] for text in texts]
    assert any(op["starvation_status"] != "non_starving" for ops in operations for op in ops.values())
    assert any(op.get("deactivation_reasons") for ops in operations for op in ops.values())
    assert any("progress" not in op for ops in operations for op in ops.values())  # pending, unpublished
    assert len({snapshot.number for snapshot, _ in published}) == len(published)

    for snapshot, reference in published:  # read for the first time only now, after all the changes
        capture = snapshot.trees["default"].capture
        expected = json.loads(reference)
        # the pools alone and an operation's pool, without the view (the pool history's reads under the lock)
        assert _text(capture.pools_view()) == _text(expected["pools"])
        for operation_id, entry in expected["operations"].items():
            assert capture.operation_pool(operation_id) == entry.get("pool")
        assert capture.operation_pool("9-9-9-9") is None
        assert capture._view is None
        assert _text(snapshot.trees["default"].view) == reference
        assert capture.pools_view() is capture.view()["pools"]
    scheduler.store.close()


def test_the_pool_history_samples_without_assembling_the_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool history's sample at an update (under the lock) reads the pools of a capture, not the whole view:
    the operations' entries are made off the lock, by the first reader."""
    scheduler, nodes = _scheduler(tmp_path)
    history = PoolHistory(period=0.0)
    history.attach(scheduler)
    assembled: list[ViewCapture] = []

    def counted(capture: ViewCapture) -> dict[str, Any]:
        assembled.append(capture)
        return assemble_view(capture)

    monkeypatch.setattr(views, "assemble_view", counted)
    scheduler.update_fair_share("default", 1.5)
    for node in nodes:
        node.heartbeat(scheduler, 1.6)
    scheduler.update_fair_share("default", 2.5)
    assert assembled == []  # sampled twice, published: no view assembled
    tree = scheduler.snapshots.current.trees["default"]
    samples = history.trees["default"].samples
    assert len(samples) == 2
    pools = tree.view["pools"]
    assert samples[-1].pools == {
        name: (
            float(pool["fair_share_ratio"]),
            float(pool["usage_ratio"]),
            float(pool["demand_ratio"]),
            pool["starvation_status"] != "non_starving",
        )
        for name, pool in pools.items()
    }
    assert set(samples[-1].pools) == {"<Root>", "queue", "hungry"}
    scheduler.store.close()


def test_the_capture_makes_no_element_result_of_the_update(tmp_path: Path) -> None:
    """An update's element results are made when first looked up (``ElementResults``): the capture under the lock
    tells pools from operations by the update's arrays, and the view's assembly, off the lock, makes them."""
    scheduler, nodes = _scheduler(tmp_path)
    scheduler.update_fair_share("default", 1.5)
    for node in nodes:
        node.heartbeat(scheduler, 1.6)
    scheduler.update_fair_share("default", 2.5)
    result = scheduler.cores["default"].last_result
    assert result is not None and isinstance(result.elements, ElementResults)
    snapshot = scheduler.snapshots.current
    assert snapshot.trees["default"].capture.result is result
    assert result.elements._cache == {}  # published, nothing made
    view = snapshot.trees["default"].view
    assert len(result.elements._cache) == len(result.elements)  # the assembly made them
    assert set(view["operations"]) == {"1-1-1-0", "1-1-1-1", "1-1-1-2", "1-1-1-3"}
    scheduler.store.close()
