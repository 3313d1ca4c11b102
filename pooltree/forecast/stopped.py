"""What every hand-over of one stopped simulation starts from, read once (`StoppedRun`).

Several seeds are carried from one simulation the CPU budget stopped (`pooltree.forecast.tail`). What they start
from is the same for all of them: the trees' capacity and what the running jobs hold of it, each running job's
shape, operation, task and age, each operation's jobs still to start and whether its pool tree lets it run, the
fair shares and starvation timeouts of the core's last update, the smallest job. Read from the simulation for
every seed, this setup cost 0.1-0.15 s of a hand-over's ~0.5 s at 1,000 nodes (16,000 running jobs, 2,200
operations); now it is read once per stopped simulation, and a seed only draws its running jobs' ends and makes
its own mutable copies (free capacity, queues, its operations' counters). The decisions are those of a setup
read anew for each seed (`tests/forecast/test_forecast_stopped.py`).
"""

from __future__ import annotations

import heapq
import io
import math
import pickle
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.config import OperationSpec
from pooltree.forecast.fork import spec_task
from pooltree.forecast.tail_preemption import Starving, fair_shares, starving
from pooltree.resources import RESOURCE_COUNT
from pooltree.sim.engine import Simulation
from pooltree.sim.scenario import Distribution, SimTask

Shape = tuple[tuple[int, float], ...]
"""A job's resources as (resource index, amount) for the amounts that are not zero."""


class Resources:
    """One job shape of a hand-over (one object per distinct shape): counted and looked up by identity, which
    hashes in a fraction of the time a tuple of tuples does (twice per job)."""

    __slots__ = ("amounts",)

    def __init__(self, amounts: Shape) -> None:
        self.amounts = amounts


def shape_of(resources: Sequence[float]) -> Shape:
    return tuple((index, float(amount)) for index, amount in enumerate(resources) if amount)


class Shapes:
    """Each distinct shape's one `Resources` (shared by every hand-over of a stopped run: they are never
    changed)."""

    def __init__(self) -> None:
        self.interned: dict[Shape, Resources] = {}

    def intern(self, amounts: Shape) -> Resources:
        found = self.interned.get(amounts)
        if found is None:
            found = self.interned[amounts] = Resources(amounts)
        return found


class TreesCopy:
    """A stopped run's pool trees, pickled once so that each hand-over gets its own copy to change. The operations'
    specs (frozen `OperationSpec` models, never changed in place) are kept by reference, not copied: they were
    most of the bytes, and loading them took most of a hand-over's setup (0.21 s of 0.25 s per copy at 1,000
    nodes and 2,200 operations; 0.02 s without them)."""

    def __init__(self, trees: Mapping[str, Any]) -> None:
        self.specs: dict[int, OperationSpec] = {}
        buffer = io.BytesIO()
        _SpecsKept(buffer, self.specs).dump(dict(trees))
        self.data = buffer.getvalue()

    def load(self) -> dict[str, Any]:
        """A new copy of the trees (sharing the specs)."""
        return _SpecsShared(io.BytesIO(self.data), self.specs).load()


class _SpecsKept(pickle.Pickler):
    def __init__(self, buffer: io.BytesIO, specs: dict[int, OperationSpec]) -> None:
        super().__init__(buffer, pickle.HIGHEST_PROTOCOL)
        self.specs = specs

    def persistent_id(self, obj: Any) -> int | None:
        if type(obj) is OperationSpec:
            self.specs[id(obj)] = obj
            return id(obj)
        return None


class _SpecsShared(pickle.Unpickler):
    def __init__(self, buffer: io.BytesIO, specs: dict[int, OperationSpec]) -> None:
        super().__init__(buffer)
        self.specs = specs

    def persistent_load(self, pid: Any) -> OperationSpec:
        return self.specs[pid]


@dataclass(frozen=True)
class PlacedJob:
    """A job running at the stop whose end is known (jobs without one hold their capacity to the horizon)."""

    serial: int
    tree: str
    """The tree of the node it runs on."""
    operation_id: str
    resources: Resources
    task: SimTask
    end: float
    """When it drew to end in the stopped simulation (its own seed's end)."""
    redrawn: Distribution | None
    """What another seed draws its end from when it has no run-time distribution of its own for the task (the
    simulation's); None: the end is not drawn anew."""
    since_start: float
    """Seconds it has run since it really started (the seeds' own distributions are conditioned on this)."""
    since_placed: float
    """Seconds since the simulation placed or started it (``redrawn`` is conditioned on this)."""
    key: tuple[str, str]
    """(operation id, spec task): where a seed's own run-time distribution is looked up."""
    elsewhere: bool
    """It runs in another tree than its operation's first (an operation of several trees)."""


@dataclass(frozen=True)
class TakenOperation:
    """An unfinished operation of the stopped simulation as a hand-over starts it."""

    id: str
    order: int
    tree: str
    pending: tuple[tuple[SimTask, int], ...]
    """(task, jobs still to start), tasks in spec order."""
    running: int
    started: bool
    may_run: bool
    gang: bool
    held: Mapping[Resources, int]
    """Its running jobs whose ends are known, counted by resources."""


class StoppedRun:
    """One stopped simulation, read for its hand-overs (see the module docstring); ``started``: the operations
    whose first job had started by the stop, ``horizon``: where the hand-overs end (starvations past it are left
    out)."""

    def __init__(self, simulation: Simulation, started: set[str], horizon: float) -> None:
        self.simulation = simulation
        self.now = simulation.now
        self.trees = TreesCopy({name: tree.core.pool_tree for name, tree in simulation.trees.items()})
        self.shapes = Shapes()
        self.totals: dict[str, list[float]] = {}
        for name in simulation.trees:
            limits = [node.limits for node in simulation.nodes if node.alive and node.tree == name]
            total = np.sum(limits, axis=0) if limits else np.zeros(RESOURCE_COUNT)
            self.totals[name] = [float(x) for x in total]
        self.free: dict[str, list[float]] = {name: list(total) for name, total in self.totals.items()}
        """Each tree's capacity the running jobs leave free at the stop."""
        self.jobs: list[PlacedJob] = []
        self._place_running()
        self.operations: list[TakenOperation] = []
        self._take_operations(started)
        self.queues: dict[str, tuple[list[tuple[int, str]], list[tuple[int, str]]]] = {}
        """Tree → its (starters, hungry) heaps at the start (see `pooltree.forecast.tail._Tree`)."""
        self._queue()
        self.shares: dict[str, dict[str, float]] = {}
        self.starvations: list[Starving] = self._starvations(horizon)
        self.least = self._least()
        """Each resource's least amount over the jobs still to start (inf: no job needs it)."""

    def _place_running(self) -> None:
        simulation = self.simulation
        now = self.now
        by_bytes: dict[bytes, Resources] = {}
        serial = 0
        for job in simulation.jobs.values():
            free = self.free.get(job.node.tree)  # the tree of the node it runs on (of its operation's trees)
            if free is None:
                continue
            key = job.allocation.resources.tobytes()
            resources = by_bytes.get(key)
            if resources is None:
                resources = by_bytes[key] = self.shapes.intern(shape_of(job.allocation.resources))
            for index, amount in resources.amounts:
                free[index] -= amount
            if job.end is None:
                continue
            serial += 1
            self.jobs.append(
                PlacedJob(
                    serial,
                    job.node.tree,
                    job.op.spec.id,
                    resources,
                    job.task,
                    job.end,
                    job.task.duration,
                    now - job.allocation.start_time,
                    now - job.start,
                    (job.op.spec.id, spec_task(job.task.name)),
                    job.node.tree != job.op.tree,
                )
            )

    def _take_operations(self, started: set[str]) -> None:
        held: dict[str, Counter[Resources]] = {}
        for job in self.jobs:
            held.setdefault(job.operation_id, Counter())[job.resources] += 1
        for order, op in enumerate(self.simulation.ops):
            pool_tree = self.simulation.trees[op.tree].core.pool_tree if op.tree in self.free else None
            controller = op.controller
            if pool_tree is None or controller is None or op.state in ("completed", "failed", "aborted"):
                continue
            if op.spec.id not in pool_tree.operations:
                continue
            counts = controller.pending_task_counts()
            self.operations.append(
                TakenOperation(
                    op.spec.id,
                    order,
                    op.tree,
                    tuple(
                        (task, counts[task.name]) for task in op.spec.tasks if counts.get(task.name, 0) > 0
                    ),
                    controller.running_allocation_count,
                    op.spec.id in started,
                    bool(pool_tree.operation(op.spec.id).running),
                    any(task.gang_size is not None for task in op.spec.tasks),
                    held.get(op.spec.id, Counter()),
                )
            )

    def _queue(self) -> None:
        for name in self.totals:
            self.queues[name] = ([], [])
        for op in self.operations:  # `_Tree.admit` in order: the heaps as pushed one by one
            starters, hungry = self.queues[op.tree]
            if op.may_run and any(count for _, count in op.pending):
                heapq.heappush(hungry, (op.order, op.id))
                if op.running == 0:
                    heapq.heappush(starters, (op.order, op.id))

    def _starvations(self, horizon: float) -> list[Starving]:
        """The operations the core's last update found starving, by when their timeouts pass."""
        found: list[Starving] = []
        for name, total in self.totals.items():
            core = self.simulation.trees[name].core
            ids = [op.id for op in self.operations if op.tree == name]
            shares = self.shares[name] = fair_shares(core, ids)
            usage = {
                op.id: held_usage(op.held) for op in self.operations if op.tree == name and op.id in shares
            }
            found.extend(starving(core, name, shares, usage, total, self.now, horizon))
        found.sort(key=lambda item: (item.at, item.operation_id))
        return found

    def _least(self) -> list[float]:
        least = [math.inf] * RESOURCE_COUNT
        for op in self.operations:
            for task, _ in op.pending:
                least = [min(a, float(b)) for a, b in zip(least, task.resources, strict=True)]
        return least


def held_usage(held: Mapping[Resources, int]) -> list[float]:
    """Resources the jobs ``held`` counts hold (jobs counted by their resources)."""
    found = [0.0] * RESOURCE_COUNT
    for resources, count in held.items():
        if count:
            for index, amount in resources.amounts:
                found[index] += float(count) * amount
    return found
