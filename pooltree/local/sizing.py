"""How ``pooltree local`` sizes its nodes: the machine split evenly, but never into nodes that cannot run a job.

A node runs a job only when its free resources reach the pool tree's ``min_spare_allocation_resources_on_node``
(YTsaurus default: 1 user slot, 1 cpu, 256 MiB) and the job fits. Splitting a 2-cpu machine among 4 nodes gave
each 0.5 cpu: no node could ever start anything, a default 1-cpu job failed after 11 s and a 0.25-cpu job pended
forever. So each node claims at least one cpu (the default job's ``cpu_limit`` and the default minimum spare),
overcommitting the cpus of a machine with fewer cpus than nodes (the nodes' jobs share them, as processes do), and
start-up says so. Memory is never overcommitted: where a node's share is below what a default job needs, start-up
says which jobs will not fit (they fail with the reason rather than wait). Explicit ``--node-resources`` are
checked the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pooltree.config.operation import DEFAULT_MEMORY_LIMIT
from pooltree.node.agent import detect_resource_limits
from pooltree.resources import CPU, MEMORY, RESOURCES, USER_SLOTS, Vector, format_size
from pooltree.strategy.snapshot import StrategyConfig

DEFAULT_JOB_CPU = 1.0
"""A vanilla task's default ``cpu_limit``."""


@dataclass(frozen=True)
class NodeSizing:
    """Each local node's ``--resources`` (None: the whole machine, as the node detects it) and what start-up says
    about them (cpus overcommitted, jobs that will not fit)."""

    resources: str | None
    notes: list[str] = field(default_factory=list)


def _min_spare() -> Vector:
    return np.asarray(StrategyConfig().min_spare_allocation_resources_on_node, dtype=float)


def size_nodes(nodes: int, machine: Vector | None = None) -> NodeSizing:
    """``nodes`` nodes' share of ``machine`` (default: this machine as a node detects it): cpu, memory and
    user_slots divided evenly, at least one slot and ``max(1 cpu, min spare cpu)`` each."""
    total = detect_resource_limits(None) if machine is None else machine
    if nodes <= 1:
        return NodeSizing(None, check_node_limits(total))
    spare = _min_spare()
    floor = max(DEFAULT_JOB_CPU, float(spare[CPU]))
    machine_cpu = float(total[CPU])
    cpu = max(machine_cpu / nodes, floor)
    memory = int(float(total[MEMORY]) // nodes)
    slots = max(1, int(float(total[USER_SLOTS]) // nodes))
    notes: list[str] = []
    if cpu * nodes > machine_cpu + 1e-9:
        notes.append(
            f"{nodes} nodes share {machine_cpu:g} cpus: each node claims {cpu:g} cpu (a default job's cpu and the "
            f"pool tree's minimum free cpu per node), {cpu * nodes - machine_cpu:g} more than this machine has; "
            "their jobs share the cpus"
        )
    share = total.copy()
    share[CPU], share[MEMORY], share[USER_SLOTS] = cpu, memory, slots
    notes += check_node_limits(share)
    return NodeSizing(f"cpu={cpu:g},memory={memory},user_slots={slots}", notes)


def check_node_limits(limits: Vector) -> list[str]:
    """What will not run on nodes of ``limits``: below the default tree's minimum spare nothing starts; below a
    default job's cpu or memory limit such jobs fail (``no_online_node_to_schedule_job``) instead of running."""
    spare = _min_spare()
    short = [RESOURCES[i] for i in range(len(RESOURCES)) if 0 < limits[i] + 1e-9 < spare[i]]
    if short:
        wanted = ", ".join(f"{r} {_amount(r, float(spare[RESOURCES.index(r)]))}" for r in short)
        return [
            f"each node has less than the pool tree's minimum free resources per node "
            f"(min_spare_allocation_resources_on_node: {wanted}): no job can start on it; operations fail with "
            "that reason (give the nodes more, or lower the tree's min_spare_allocation_resources_on_node)"
        ]
    notes: list[str] = []
    if limits[CPU] + 1e-9 < DEFAULT_JOB_CPU:
        notes.append(
            f"each node has {limits[CPU]:g} cpu: jobs of the default cpu_limit 1 will fail as unschedulable"
        )
    if limits[MEMORY] < DEFAULT_MEMORY_LIMIT:
        notes.append(
            f"each node has {format_size(float(limits[MEMORY]))} of memory: jobs of the default memory_limit "
            f"{format_size(DEFAULT_MEMORY_LIMIT)} may not fit (operations that cannot fit fail with the reason)"
        )
    return notes


def _amount(resource: str, value: float) -> str:
    if resource == "memory" and math.isfinite(value):
        return format_size(value)
    return f"{value:g}"
