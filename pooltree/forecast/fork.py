"""A cluster state forked into a simulator scenario: the same pool trees, nodes and operations, on a simulated
clock whose zero is the state's ``now``.

Every unfinished operation is submitted at time 0, in registration order (so pending queues keep their order
and count limits hold the same operations back). Its running jobs are placed on their nodes when it arrives
(``SimOperation.placed``: adopted by the core without a heartbeat, with their real start times), as one task per
spec task whose jobs each end after a remaining time drawn conditioned on that job's own elapsed time (a job that
ran long is likely long; `pooltree.forecast.durations.RemainingTimes`); its pending jobs
are one task per spec task with the learned distribution (`pooltree.forecast.durations`). Its starvation clock
is carried over (``below_fair_share_since``). What one seed draws comes from ``Random("<seed>/<op>/...")``, so
a fork is a pure function of the state, the seed and the settings.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Collection, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from pooltree.config import OperationSpec
from pooltree.config.snapshot import Cluster, NodeGroup, Snapshot
from pooltree.config.tags import nodes_of_trees
from pooltree.controllers.memory import MemoryDigestSettings
from pooltree.fairshare.model import UpdateState
from pooltree.forecast.durations import (
    DurationFit,
    DurationSettings,
    choose,
    fit,
    partial_pooling,
    remaining_times,
)
from pooltree.forecast.state import ClusterState, IntegralState, OperationState, TreePlace
from pooltree.forecast.window import in_window
from pooltree.resources import RESOURCES
from pooltree.sim.scenario import (
    Distribution,
    ReportSettings,
    Scenario,
    SchedulerSettings,
    SimOperation,
    SimTask,
)

RUNNING_TASK = "{task}#running{index}"
"""Name of the task of a spec task's running jobs (the forecast's own; never shown)."""


def spec_task(name: str) -> str:
    """The spec task a task of the fork runs (its running jobs are a task of their own, `RUNNING_TASK`)."""
    return name.partition("#running")[0]


def cluster_snapshot(state: ClusterState) -> Snapshot:
    """The state's pool trees and nodes as the simulator's snapshot (each node a group of one)."""
    groups = tuple(NodeGroup(node.address, 1, node.resource_limits, node.tags) for node in state.nodes)
    trees = dict(state.pool_trees)
    assignment = nodes_of_trees(
        {name: tree.config.tag_filter for name, tree in trees.items()},
        {group.address: group.tags for group in groups},
    )
    limits = {group.address: group.resource_limits for group in groups}
    totals = {
        name: np.sum([limits[a] for a in addresses], axis=0) if addresses else np.zeros(len(RESOURCES))
        for name, addresses in assignment.items()
    }
    default = state.default_tree if state.default_tree in trees else next(iter(trees), "")
    return Snapshot(
        Cluster(None, groups),
        default,
        trees,
        (),
        None,
        totals,
        {name: tuple(addresses) for name, addresses in assignment.items()},
    )


def duration_fits(state: ClusterState, settings: DurationSettings) -> dict[tuple[str, str], DurationFit]:
    """(operation id, task) → the durations the forecast assumes for that task's jobs, from three levels of
    estimates (`durations.partial_pooling` draws each towards the one above it as far as the data say they
    differ): the cluster (every pool's completed jobs with every running job of their windows), a pool (its
    completed jobs, finished operations included, with the running jobs of its operations), a task (its own
    completed jobs with its running ones). A task without completed jobs of its own gets its pool's fit, a pool
    without any the cluster's, an empty cluster the prior. The censored jobs are those that started in the window
    the completed ones cover (`pooltree.forecast.window`: together, every job started since then)."""
    pool_running: dict[str, list[tuple[float, float]]] = {}
    for op in state.operations:
        elapsed = pool_running.setdefault(op.pool, [])
        for task in op.tasks:
            elapsed.extend((job.start_time, state.now - job.start_time) for job in task.running)
    pools, cluster, pool_spread = _pool_fits(state, settings, pool_running)
    fits: dict[tuple[str, str], DurationFit] = {}
    pairs = []
    for op in state.operations:
        pool = pools.get(op.pool)
        for task in op.tasks:
            key = (op.id, task.name)
            if task.durations:
                running = in_window(
                    ((job.start_time, state.now - job.start_time) for job in task.running),
                    task.durations_since,
                )
                fits[key] = fit(task.durations, "operation", settings, running)
                if pool is not None:
                    pairs.append((key, pool))
            elif pool is not None:
                fits[key] = pool  # made an estimate once the tasks' spread around their pools is known
            elif cluster is not None:
                fits[key] = cluster.as_estimate(pool_spread)
            else:
                fits[key] = choose((), (), settings)
    # every own fit leans on its pool's as far as tasks differ from their pools
    pooled, task_spread = partial_pooling([(fits[key], base) for key, base in pairs])
    fits.update(zip((key for key, _ in pairs), pooled, strict=True))
    estimates = {name: found.as_estimate(task_spread) for name, found in pools.items()}
    for op in state.operations:
        if op.pool in estimates:
            for task in op.tasks:
                if fits[(op.id, task.name)] is pools[op.pool]:
                    fits[(op.id, task.name)] = estimates[op.pool]
    return fits


def _pool_fits(
    state: ClusterState, settings: DurationSettings, pool_running: Mapping[str, list[tuple[float, float]]]
) -> tuple[dict[str, DurationFit], DurationFit | None, float]:
    """Each pool's fit drawn towards the cluster's, the cluster's fit (None: no pool has a completed job) and the
    spread of pools around it (log median, 0 when not estimated)."""
    own: dict[str, DurationFit] = {}
    every: list[float] = []
    censored: list[float] = []
    for pool, durations in state.pool_durations.items():
        if not durations:
            continue
        since = state.pool_durations_since.get(pool, -math.inf)
        running = in_window(pool_running.get(pool, ()), since)
        own[pool] = dataclasses.replace(fit(durations, "pool", settings, running), key=f"pool/{pool}")
        every.extend(durations)
        censored.extend(running)
    if not own:
        return {}, None, 0.0
    cluster = dataclasses.replace(fit(every, "cluster", settings, censored), key="cluster")
    pooled, spread = partial_pooling([(found, cluster) for found in own.values()])
    return dict(zip(own, pooled, strict=True)), cluster, spread


def operation_spec(
    op: OperationState,
    cache: MutableMapping[tuple[str, int], OperationSpec] | None,
    known: Collection[str] | None = None,
) -> OperationSpec:
    """The spec as it runs now: in its trees (``known``: the ones the fork has; None: all; the spec's own
    ``tentative_pool_trees`` stay tentative, not regular), in its current pool of each, with its runtime weight and
    limits there."""
    places = [TreePlace(op.tree, op.pool, op.weight, op.resource_limits), *op.other_trees]
    if known is not None:
        places = [place for place in places if place.tree in known]
    tentative = op.spec.get("tentative_pool_trees")
    if places and isinstance(tentative, list | tuple) and tentative:
        # the spec's tentative trees stay tentative (the simulator's `tentative.py`), not regular trees too
        places = [places[0], *(place for place in places[1:] if place.tree not in tentative)]
    key = (op.id, op.revision)
    if cache is not None and key in cache:
        cached = cache[key]
        if cached.pool_trees_or(None) == tuple(place.tree for place in places):
            return cached  # (not when a tree it runs in is gone since)
    raw = dict(op.spec)
    per_tree: dict[str, dict[str, Any]] = {}
    for place in places:
        options: dict[str, Any] = {"pool": place.pool}
        if place.weight is not None:
            options["weight"] = place.weight
        if place.resource_limits:
            options["resource_limits"] = dict(place.resource_limits)
        per_tree[place.tree] = options
    raw["pool_trees"] = list(per_tree)
    raw["scheduling_options_per_pool_tree"] = per_tree
    raw.pop("fair_share_options_per_pool_tree", None)
    spec = OperationSpec.parse(raw, f"operations.{op.id}.spec")
    if cache is not None:
        cache[key] = spec
    return spec


def seed_distributions(
    state: ClusterState, seed: int, fits: Mapping[tuple[str, str], DurationFit]
) -> dict[tuple[str, str], Distribution]:
    """(operation id, spec task) → the job run times ``seed`` assumes: the same draw `fork_operation` makes for
    that seed (a hand-over of another seed's stopped run draws its own, `pooltree.forecast.tail`)."""
    return {
        (op.id, task.name): fits[(op.id, task.name)].for_seed(
            random.Random(f"{seed}/{op.id}/{task.name}"), seed
        )
        for op in state.operations
        for task in op.tasks
        if (op.id, task.name) in fits
    }


def fork_operation(
    op: OperationState,
    now: float,
    seed: int,
    fits: Mapping[tuple[str, str], DurationFit],
    spec: OperationSpec,
    tentative_nodes: Collection[str] = (),
) -> SimOperation | None:
    """One operation of the fork (None: it has no job left to run). Its running jobs on ``tentative_nodes`` (the
    nodes of its tentative trees) are tasks of their own after the others' (`RUNNING_TASK` index 1) and come last
    in ``placed``: the simulator places them once the operation joined its tentative trees
    (`pooltree.sim.jobs.SimulationJobs.place_tentative`), and the controller hands out jobs in task order."""
    tasks: list[SimTask] = []
    later: list[SimTask] = []
    pending: list[SimTask] = []
    placed: list[str] = []
    since: list[float] = []
    later_placed: list[str] = []
    later_since: list[float] = []
    for task in op.tasks:
        rng = random.Random(f"{seed}/{op.id}/{task.name}")
        distribution: Distribution = fits[(op.id, task.name)].for_seed(rng, seed)
        if task.running:
            groups = [list(task.running)]
            if tentative_nodes:
                groups = [
                    [job for job in task.running if job.node not in tentative_nodes],
                    [job for job in task.running if job.node in tentative_nodes],
                ]
            for index, jobs in enumerate(groups):
                if not jobs:
                    continue
                (tasks if index == 0 else later).append(
                    SimTask(
                        RUNNING_TASK.format(task=task.name, index=index),
                        len(jobs),
                        task.resources,
                        remaining_times(distribution, [now - job.start_time for job in jobs], rng),
                        task.interruptible,
                    )
                )
                (placed if index == 0 else later_placed).extend(job.node for job in jobs)
                (since if index == 0 else later_since).extend(job.start_time - now for job in jobs)
        if task.pending > 0 and not op.suspended:
            pending.append(
                SimTask(
                    task.name,
                    task.pending,
                    task.resources,
                    distribution,
                    task.interruptible,
                    gang_size=task.gang_size if task.gang_size is not None and not task.running else None,
                )
            )
    tasks.extend(later)
    placed.extend(later_placed)
    since.extend(later_since)
    tasks.extend(pending)
    if not tasks:
        return None
    return SimOperation(
        op.id,
        op.user,
        op.type,
        0.0,
        spec,
        dict(op.spec),
        tuple(tasks),
        placed=tuple(placed),
        placed_since=tuple(since),
        below_fair_share_since=None if op.below_fair_share_since is None else op.below_fair_share_since - now,
    )


def tentative_nodes(op: OperationState, spec: OperationSpec, node_tree: Mapping[str, str]) -> set[str]:
    """The nodes of the operation's running jobs that are in one of its spec's ``tentative_pool_trees`` (not
    one of the trees it runs in regularly): ``node_tree`` is each node's tree in the fork (the simulator's, the
    last tree that lists it)."""
    tentative = op.spec.get("tentative_pool_trees")
    if not isinstance(tentative, list | tuple) or not tentative:
        return set()
    regular = set(spec.pool_trees_or(None) or ())
    trees = {tree for tree in tentative if isinstance(tree, str) and tree not in regular}
    return {job.node for task in op.tasks for job in task.running if node_tree.get(job.node) in trees}


def fork(
    state: ClusterState,
    seed: int,
    *,
    horizon: float,
    durations: DurationSettings,
    specs: MutableMapping[tuple[str, int], OperationSpec] | None = None,
    fits: Mapping[tuple[str, str], DurationFit] | None = None,
    update_period: float | None = None,
    arrivals: Sequence[SimOperation] = (),
) -> Scenario:
    """The scenario of one seed: ``state`` run forward for ``horizon`` simulated seconds, with ``arrivals``
    (submissions to come, `pooltree.forecast.arrivals`) after its own operations."""
    snapshot = cluster_snapshot(state)
    fits = duration_fits(state, durations) if fits is None else fits
    operations = []
    node_tree = {address: tree for tree, addresses in snapshot.tree_nodes.items() for address in addresses}
    for op in state.operations:
        if op.tree not in snapshot.pool_trees:
            continue
        spec = operation_spec(op, specs, snapshot.pool_trees)
        forked = fork_operation(op, state.now, seed, fits, spec, tentative_nodes(op, spec, node_tree))
        if forked is not None:
            operations.append(forked)
    operations.extend(op for op in arrivals if set(op.spec.pool_trees_or(None)) <= set(snapshot.pool_trees))
    period = state.heartbeat_period
    return Scenario(
        snapshot=snapshot,
        scheduler=SchedulerSettings(
            fair_share_update_period=update_period or state.fair_share_update_period,
            node_heartbeat_period=period,
            node_heartbeat_jitter=min(0.1, period / 10.0),
        ),
        memory=MemoryDigestSettings(),
        operations=tuple(operations),
        seed=seed,
        until=horizon,
        report=ReportSettings(timeline_operations=False, event_log=False),
        source="<forecast>",
    )


def integral_of(core: Any) -> IntegralState | None:
    """A tree's integral guarantee volumes and ratios as its core's last fair-share update left them (None: it
    has none, or no update ran yet)."""
    carried = getattr(core, "fair_share_state", None)
    if not isinstance(carried, UpdateState) or not (
        carried.accumulated_resource_volume or carried.last_integral_share_ratio
    ):
        return None
    return IntegralState(
        carried.previous_update_time,
        {
            pool: tuple(float(x) for x in volume)
            for pool, volume in carried.accumulated_resource_volume.items()
        },
        dict(carried.last_integral_share_ratio),
    )


def carry_integral(cores: Mapping[str, Any], state: ClusterState) -> None:
    """Give each tree's core of a fork (before its first update) the integral volumes the cluster's core had: the
    next update accumulates from the cluster's last update time (the fork's clock: 0 is ``state.now``)."""
    for tree, integral in state.integral.items():
        core = cores.get(tree)
        if core is None:
            continue
        core.fair_share_state = UpdateState(
            previous_update_time=None if integral.update_time is None else integral.update_time - state.now,
            accumulated_resource_volume={
                pool: np.array(volume, dtype=float) for pool, volume in integral.volumes.items()
            },
            last_integral_share_ratio=dict(integral.ratios),
        )
