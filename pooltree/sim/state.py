"""The simulator's state: nodes, jobs, operations and per-tree metrics; the result type; event classes."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pooltree.controllers.memory import TaskMemoryReserve
from pooltree.controllers.operations import OperationControllerBase
from pooltree.resources import RESOURCE_COUNT, Vector
from pooltree.sim.scenario import SimOperation, SimTask
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.model import Allocation, FinishedAllocation

ROOT = "<Root>"
_RECORD_ARRAYS = frozenset({"fair_share", "usage_share", "demand_share", "below"})
"""Fair-share result arrays `_record` reads in bulk (else it reads ElementResults one by one)."""
NODE_EVENT, JOB_EVENT, OPERATION_EVENT, FAIR_SHARE_EVENT, HEARTBEAT_EVENT = range(5)
_JOB_PEAK, _JOB_END = 0, 1
_MASK64 = (1 << 64) - 1
MAX_PLOT_POINTS = 4000
VANILLA_MEMORY_PEAK_AFTER = 60.0
"""A long-running vanilla job reaches its memory peak this long after it starts (map jobs: half-way)."""

EventSink = Callable[[dict[str, Any]], None]
TimelineSink = Callable[[list[Any]], None]
ProgressCallback = Callable[[float, float, int, int], None]


def _mix(x: int) -> int:
    """splitmix64 finalizer: a fast, well-spread 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


@dataclass(eq=False)
class _Node:
    index: int
    address: str
    limits: Vector
    tags: frozenset[str]
    tree: str
    phase: float
    salt: int
    alive: bool = True
    k_next: int = 0
    token: int = 0
    sleeping: bool = False
    has_timer: bool = False
    jobs: set[str] = field(default_factory=set)


@dataclass(eq=False)
class _Job:
    allocation: Allocation
    op: _Op
    node: _Node
    serial: int
    start: float
    duration: float | None
    task: SimTask
    user_peak: float = 0.0
    peak_total: float = 0.0
    memory_now: float = 0.0
    memory_limit_total: float = 0.0
    end: float | None = None
    end_finished: FinishedAllocation | None = None
    token: int = 0


@dataclass(eq=False)
class _Op:
    index: int
    spec: SimOperation
    tree: str
    rng: random.Random
    controller: OperationControllerBase | None = None
    reserves: dict[str, TaskMemoryReserve] = field(default_factory=dict)
    state: str = "submitted"
    start_time: float | None = None
    finish_time: float | None = None
    error: str | None = None
    jobs_total_duration: float = 0.0
    job_max_duration: float = 0.0
    preempted_job_time: float = 0.0
    preempted_job_count: int = 0
    wasted_job_time: float = 0.0
    pool: str = ""
    unfit_check_due: bool = False
    """A "can any node ever fit this" check is scheduled (the operation's job fit no online node)."""
    tentative_trees: tuple[str, ...] = ()
    """The tentative pool trees it runs in besides ``tree`` (`tentative.py`)."""
    other_trees: tuple[str, ...] = ()
    """The other pool trees of its spec's ``pool_trees`` (after ``tree``, the first; not with
    ``schedule_in_single_tree``): it is registered in each with its one controller and each tree's core schedules
    it there while it runs there, as in the live service (`operations.py`)."""

    @property
    def regular_trees(self) -> tuple[str, ...]:
        """``tree`` and ``other_trees``: the trees of its spec it runs in."""
        return (self.tree, *self.other_trees)


@dataclass
class _TreeState:
    name: str
    core: SchedulerCore
    integral: bool
    changed: bool = True
    pending_ops: set[str] = field(default_factory=set)
    """Published operations with pending allocations (their minimum needs decide whether a node may start one)."""
    unpublished: set[str] = field(default_factory=set)
    """Operations with pending allocations the strategy has not published yet (no heartbeat can start them)."""
    pending_min: Vector | None = None
    pending_dirty: bool = True
    idle_sleepers: set[int] = field(default_factory=set)
    """Sleeping nodes that can start more (woken when schedulable demand appears)."""
    idle_positions: list[int] = field(default_factory=list)
    """The idle sleepers' positions in ``phase_order``, sorted (the wake walk visits only these)."""
    position_of: dict[int, int] = field(default_factory=dict)
    """Node index → its position in ``phase_order``."""
    sleepers: set[int] = field(default_factory=set)
    """Sleeping nodes (woken all when an update publishes violated limits)."""
    untimed_sleepers: set[int] = field(default_factory=set)
    """Sleeping nodes without a preemptive-stage timer (given one when starving operations appear)."""
    phase_order: list[int] = field(default_factory=list)
    """The tree's nodes (indices) by heartbeat phase; ``phases`` the phases in that order (see `_wake_idle`)."""
    phases: list[float] = field(default_factory=list)
    wake_start: int = 0
    """Where the current walk over ``phase_order`` starts (first phase at or after (now - jitter) mod period)."""
    wake_cursor: int = 0
    """How many nodes of ``phase_order`` the current walk has taken."""
    wake_base: float = 0.0
    """``now - jitter`` rounded down to a multiple of the period, at the walk's start."""
    wake_queue: list[tuple[float, int]] = field(default_factory=list)
    """Idle sleepers taken by the walk, by their exact next beat (a heap of (time, node index))."""
    wake_head: int | None = None
    """The idle sleeper woken last: when it has beaten, the next one is woken."""
    pools: list[str] = field(default_factory=list)
    pool_set: set[str] = field(default_factory=set)
    series_interval: float = 1.0
    last_series: float | None = None
    last_sample: float | None = None
    matrix: np.ndarray | None = None
    """Per pool (in ``pools`` order): 1, fair share, usage, demand ratios, below-fair-share and starving flags."""
    acc: np.ndarray = field(default_factory=lambda: np.zeros((0, 6)))
    usage_integral: Vector = field(default_factory=lambda: np.zeros(RESOURCE_COUNT))
    total_integral: Vector = field(default_factory=lambda: np.zeros(RESOURCE_COUNT))
    preempted_by_pool: Counter[str] = field(default_factory=Counter)
    series: dict[str, list[tuple[float, float, float, float]]] = field(default_factory=dict)
    """Plot points per pool, once ``series_rows`` is None (see `_sample_series`)."""
    series_rows: list[np.ndarray] | None = field(default_factory=list)
    """Plot points while every pool has values at every sample: per sample the pools' three ratios."""
    series_times: list[float] = field(default_factory=list)
    last_values: dict[str, tuple[float, float, float, str, str]] | None = field(default_factory=dict)
    """Element → values held since the last record; None: not built yet from ``held`` (see `_held_values`)."""
    held: tuple[list[str], np.ndarray, np.ndarray, list[str]] | None = None
    """The pools' held values read in bulk: ids, (fair share, usage, demand) ratios, below flags, starvation."""
    pool_ids: tuple[list[str], list[str]] | None = None
    """The pool tree's pool names when last read and the pools' element ids (see `_pool_ids`)."""
    record_layout: tuple[Any, list[str], list[str], np.ndarray, np.ndarray, np.ndarray] | None = None
    """Where `_record_pools` reads and writes the pools, for one result ``index`` and pool ids (see there)."""
    pool_row: dict[str, int] = field(default_factory=dict)
    """Pool → its row in ``pools`` / ``matrix`` / ``acc``."""
    present: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """Per row of ``matrix``: whether the pool had values in the last record."""
    last_root: tuple[Vector, Vector] | None = None


class PoolSeries(Mapping[str, list[tuple[float, float, float, float]]]):
    """Pool → [(time, fair share, usage, demand ratio)], each pool's points built when it is read.

    A run keeps its plot points as one matrix row per sample (``block``: sample × pool × the three ratios); a
    report plots a few pools, so the result does not turn every pool's points into tuples (at 1,000 pools and
    4,000 samples: 4 M tuples, seconds and ~700 MiB) unless they are all read. Reading a pool twice builds
    its list twice (equal lists).
    """

    def __init__(self, pools: list[str], times: list[float], block: np.ndarray):
        self._pools = list(pools[: block.shape[1]])
        self._row = {pool: row for row, pool in enumerate(self._pools)}
        self._times = list(times)
        self._block = block

    def __getitem__(self, pool: str) -> list[tuple[float, float, float, float]]:
        fair, usage, demand = self._block[:, self._row[pool], :].T.tolist()
        return list(zip(self._times, fair, usage, demand, strict=True))

    def __iter__(self) -> Iterator[str]:
        return iter(self._pools)

    def __len__(self) -> int:
        return len(self._pools)

    def __contains__(self, pool: object) -> bool:
        return pool in self._row


@dataclass
class SimulationResult:
    """Everything the report writers need: the summary document, operations.csv rows and plot series."""

    summary: dict[str, Any]
    operation_rows: list[dict[str, Any]]
    pool_series: dict[str, Mapping[str, list[tuple[float, float, float, float]]]]
    """tree → pool → [(time, fair_share_ratio, usage_ratio, demand_ratio)] (downsampled for plots; a pool's
    list may be built when read, see `PoolSeries`)."""
    preemptions_by_reason: dict[str, int]
    stats: dict[str, Any]
    wasted_by_operation: dict[str, float] = field(default_factory=dict)
    """Operation id → run time of its jobs that were aborted or failed (for comparisons; not in summary.json)."""
    pool_parents: dict[str, str | None] = field(default_factory=dict)
    """Pool (summary key) → its parent's key at the end of the run (for comparisons; not in summary.json)."""
