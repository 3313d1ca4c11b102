"""The simulator's metrics: values held between fair-share updates, their time integrals, the timeline and
the run's result (summary.json, operations.csv rows, plot series)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from pooltree.config.support import unrecognized_options, unsupported_options
from pooltree.resources import RESOURCE_COUNT, RESOURCES
from pooltree.sim.scenario import Scenario
from pooltree.sim.state import (
    _RECORD_ARRAYS,
    MAX_PLOT_POINTS,
    ROOT,
    PoolSeries,
    SimulationResult,
    TimelineSink,
    _Op,
    _TreeState,
)
from pooltree.strategy.model import StarvationStatus

_STATUS_TEXT = {status: status.value for status in StarvationStatus}
"""A starvation status → its text (a dict lookup: an enum's ``.value`` is a descriptor call, per pool per update)."""


def _row_max(shares: np.ndarray) -> np.ndarray:
    """Each row's maximum (NaN where a row has one), as ``shares.max(axis=1)`` compares equal: column by column,
    ~8x faster for the few resource columns (a reduction along a short axis runs a loop per row)."""
    columns = shares.T
    top = columns[0].copy()
    for column in columns[1:]:
        np.maximum(top, column, out=top)
    return top


class SimulationMetrics:
    """What a run measures, owned by `Simulation`: values held between fair-share updates and their time
    integrals per pool, plot series, timeline rows, and the run's result.

    It reads the run's trees, operations and counters (the same objects the engine updates) and keeps its own
    state in each tree's `_TreeState` record fields.
    """

    def __init__(
        self,
        scenario: Scenario,
        seed: int,
        trees: dict[str, _TreeState],
        ops: list[_Op],
        stats: Counter[str],
        preemptions_by_reason: Counter[str],
        timeline_sink: TimelineSink | None,
        timeline_operations: bool,
    ) -> None:
        self.scenario = scenario
        self.seed = seed
        self.trees = trees
        self.ops = ops
        self.stats = stats
        self.preemptions_by_reason = preemptions_by_reason
        self.timeline_sink = timeline_sink
        self.timeline_operations = timeline_operations

    def record(self, tree: _TreeState, now: float) -> None:
        """Remember the values published at ``now`` (they hold until the next update).

        Pools only (no operation rows in the timeline) and the update's arrays at hand: read in bulk with numpy
        (per pool the first maximal resource share, Python's ``max``; statuses from the starvation map), the
        per-element dict of held values is built only when the timeline writes rows. Otherwise every element
        is read one by one.
        """
        result = tree.core.last_result
        elements = result.elements
        if not (self.timeline_sink is not None and self.timeline_operations) and self._record_pools(
            tree, elements
        ):
            self._record_root(tree, elements)
            return
        starvation = tree.core.strategy.starvation
        values: dict[str, tuple[float, float, float, str, str]] = {}
        if self.timeline_sink is not None and self.timeline_operations:
            ids: Any = elements
        else:
            ids = [ROOT if pool.is_root else name for name, pool in tree.core.pool_tree.pools.items()]
        for element_id in ids:
            element = elements.get(element_id)
            if element is None:
                continue
            state = starvation.get(element_id)
            values[element_id] = (
                max(element.fair_share.tolist()),
                max(element.usage_share.tolist()),
                max(element.demand_share.tolist()),
                element.scheduling_status,
                state.status.value if state is not None else "non_starving",
            )
            if not element.is_operation and element_id not in tree.pool_set:
                self._add_pool(tree, element_id)
        tree.last_values = values
        tree.held = None
        matrix = np.zeros((len(tree.pools), 6))
        matrix[:, 0] = 1.0
        present = np.zeros(len(tree.pools), dtype=bool)
        for row, pool in enumerate(tree.pools):
            held = values.get(pool)
            if held is not None:
                present[row] = True
                matrix[row, 1:4] = held[:3]
                matrix[row, 4] = held[3] == "below_fair_share"
                matrix[row, 5] = held[4] != "non_starving"
        self._set_matrix(tree, matrix, present)
        self._record_root(tree, elements)

    def _record_pools(self, tree: _TreeState, elements: Any) -> bool:
        """The bulk path of `_record` (pools only); False when the result has no arrays to read (or NaNs).

        Which result rows hold the pools, and their rows in ``matrix``, depend only on the result's ``index``
        (element id → row; the results of updates of one structure share it, read-only) and the pool ids: they
        are kept in ``tree.record_layout`` while both are the same objects, so a period reads the arrays at
        kept integer rows (no per-pool lookups)."""
        arrays = getattr(elements, "arrays", None)
        index = getattr(elements, "index", None)
        if arrays is None or index is None or not arrays.keys() >= _RECORD_ARRAYS:
            return False
        ids = self._pool_ids(tree)
        layout = tree.record_layout
        if layout is None or layout[0] is not index or layout[1] is not ids:
            layout = self._record_layout(tree, index, ids)
        _index, _ids, present, rows, positions, span = layout
        count = len(present)
        values = np.empty((count, 3))
        for column, name in enumerate(("fair_share", "usage_share", "demand_share")):
            shares = arrays[name][rows]
            if count and shares.shape[1]:
                top = _row_max(shares)
                # the first resource equal to the maximum, as Python's max picks it (the sign of a zero kept)
                values[:, column] = shares[span, (shares == top[:, None]).argmax(axis=1)]
            else:
                values[:, column] = [max(row) for row in shares.tolist()]
        if np.isnan(values).any():
            return False
        below = np.asarray(arrays["below"][rows], dtype=bool)
        text = _STATUS_TEXT
        statuses = [
            "non_starving" if state is None else text[state.status]
            for state in map(tree.core.strategy.starvation.get, present)
        ]
        matrix = np.zeros((len(tree.pools), 6))
        matrix[:, 0] = 1.0
        matrix[positions, 1:4] = values
        matrix[positions, 4] = below
        matrix[positions, 5] = [status != "non_starving" for status in statuses]
        mask = np.zeros(len(tree.pools), dtype=bool)
        mask[positions] = True
        tree.last_values = None
        tree.held = (present, values, below, statuses)
        self._set_matrix(tree, matrix, mask)
        return True

    def _record_layout(
        self, tree: _TreeState, index: Any, ids: list[str]
    ) -> tuple[Any, list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
        """(index, ids, the pools present in ``index``, their result rows, their ``matrix`` rows, 0..count-1);
        pools not seen before get their matrix rows here."""
        rows = list(map(index.get, ids))  # C-level lookups
        if None in rows:
            present = [element_id for element_id in ids if element_id in index]
            rows = [index[element_id] for element_id in present]
        else:
            present = ids
        pool_row = tree.pool_row
        positions = list(map(pool_row.get, present))
        if None in positions:
            for element_id in present:
                if element_id not in pool_row:
                    self._add_pool(tree, element_id)
            positions = [pool_row[element_id] for element_id in present]
        layout = (
            index,
            ids,
            present,
            np.array(rows, dtype=np.intp),
            np.array(positions, dtype=np.intp),
            np.arange(len(present)),
        )
        tree.record_layout = layout
        return layout

    def _pool_ids(self, tree: _TreeState) -> list[str]:
        """The tree's pools as element ids (the root as ``<Root>``), rebuilt only when the pools changed."""
        pools = tree.core.pool_tree.pools
        names = list(pools)
        cached = tree.pool_ids
        if cached is None or cached[0] != names:
            cached = tree.pool_ids = (names, [ROOT if pool.is_root else name for name, pool in pools.items()])
        return cached[1]

    def _add_pool(self, tree: _TreeState, pool: str) -> None:
        tree.pool_set.add(pool)
        tree.pool_row[pool] = len(tree.pools)
        tree.pools.append(pool)

    def _set_matrix(self, tree: _TreeState, matrix: np.ndarray, present: np.ndarray) -> None:
        tree.matrix = matrix
        tree.present = present
        if tree.acc.shape[0] < len(tree.pools):
            tree.acc = np.vstack([tree.acc, np.zeros((len(tree.pools) - tree.acc.shape[0], 6))])

    def _record_root(self, tree: _TreeState, elements: Any) -> None:
        index = getattr(elements, "index", None)
        arrays = getattr(elements, "arrays", None)
        if index is not None and arrays is not None and "resource_usage" in arrays:
            if ROOT in index:
                usage_row = np.array(arrays["resource_usage"][index[ROOT]], dtype=float)
                tree.last_root = (usage_row, tree.core.total_resources)
        else:
            root = elements.get(ROOT)
            if root is not None:
                tree.last_root = (np.array(root.resource_usage, dtype=float), tree.core.total_resources)

    def _held_values(self, tree: _TreeState) -> dict[str, tuple[float, float, float, str, str]]:
        """Element → (fair share, usage, demand ratios, scheduling status, starvation status) held now."""
        if tree.last_values is None:
            values: dict[str, tuple[float, float, float, str, str]] = {}
            if tree.held is not None:
                present, shares, below, statuses = tree.held
                for element_id, (fair, usage, demand), flag, status in zip(
                    present, shares.tolist(), below.tolist(), statuses, strict=True
                ):
                    values[element_id] = (
                        fair,
                        usage,
                        demand,
                        "below_fair_share" if flag else "normal",
                        status,
                    )
            tree.last_values = values
        return tree.last_values

    def sample(self, now: float, *, final: bool = False) -> None:
        """Integrate the values held since the previous sample (time-weighted means, starving time)."""
        for tree in self.trees.values():
            if tree.last_sample is not None and now > tree.last_sample:
                dt = now - tree.last_sample
                if tree.matrix is not None:
                    tree.acc += tree.matrix * dt
                if tree.last_root is not None:
                    usage, total = tree.last_root
                    tree.usage_integral += usage * dt
                    tree.total_integral += total * dt
            tree.last_sample = now

    def timeline(self, tree: _TreeState, now: float, emit: bool) -> None:
        if tree.last_series is None or now - tree.last_series >= tree.series_interval - 1e-9:
            tree.last_series = now
            if tree.matrix is not None:
                self._sample_series(tree, now)
            if tree.series_rows is not None:
                if len(tree.series_times) > MAX_PLOT_POINTS:
                    tree.series_times = tree.series_times[::2]
                    tree.series_rows = tree.series_rows[::2]
                    tree.series_interval *= 2
            elif tree.series and len(next(iter(tree.series.values()))) > MAX_PLOT_POINTS:
                for pool in tree.series:
                    tree.series[pool] = tree.series[pool][::2]
                tree.series_interval *= 2
        if not emit or self.timeline_sink is None:
            return
        rows = []
        for element_id, values in self._held_values(tree).items():
            is_pool = element_id in tree.pool_set
            if not is_pool and not self.timeline_operations:
                continue
            rows.append(
                [
                    round(now, 6),
                    tree.name,
                    element_id,
                    "pool" if is_pool else "operation",
                    round(values[0], 6),
                    round(values[1], 6),
                    round(values[2], 6),
                    values[4],
                ]
            )
        self.timeline_sink(rows)

    def _sample_series(self, tree: _TreeState, now: float) -> None:
        """One plot point per pool with values. While every pool of the tree has had values at every sample the
        points are kept as one matrix row per sample (``series_rows``: no per-pool objects); otherwise (a pool
        appeared later, or had no values) they become per-pool lists, which `_pool_series` also returns."""
        assert tree.matrix is not None
        if tree.series_rows is not None:
            if bool(tree.present.all()) and (
                not tree.series_rows or len(tree.series_rows[0]) == len(tree.pools)
            ):
                tree.series_times.append(now)
                tree.series_rows.append(tree.matrix[:, 1:4].copy())
                return
            tree.series = self._pool_series(tree)
            tree.series_rows = None
            tree.series_times = []
        series = tree.series
        shares = tree.matrix[:, 1:4].tolist()
        for pool, held, (fair, usage, demand) in zip(tree.pools, tree.present.tolist(), shares, strict=True):
            if held:
                points = series.get(pool)
                if points is None:
                    points = series[pool] = []
                points.append((now, fair, usage, demand))

    def _pool_series(self, tree: _TreeState) -> dict[str, list[tuple[float, float, float, float]]]:
        """Pool → [(time, fair share, usage, demand ratio)] sampled so far."""
        if tree.series_rows is None:
            return tree.series
        if not tree.series_rows:
            return {}
        block = np.stack(tree.series_rows)  # sample × pool × 3 values
        times = tree.series_times
        series: dict[str, list[tuple[float, float, float, float]]] = {}
        for row, pool in enumerate(tree.pools[: block.shape[1]]):
            # one pool at a time: no nested lists of every pool's points at once (1,000 pools × 4,000 points)
            fair, usage, demand = block[:, row, :].T.tolist()
            series[pool] = list(zip(times, fair, usage, demand, strict=True))
        return series

    # ------------------------------------------------------------------ results

    def result(self, end_time: float, wall: float, wasted_job_time: float) -> SimulationResult:
        """The run's result: the summary (operations, pools, global figures, options, engine counters, segments
        and GPU plans where on), the operations' CSV rows, the pools' series and the pools' parents."""
        operations, rows = self._operation_entries(end_time)
        pools, series, utilization = self._pool_entries()
        stats = dict(sorted(self.stats.items()))
        simulated = end_time
        summary = {
            "scenario": self.scenario.source,
            "seed": self.seed,
            "operations": operations,
            "pools": pools,
            "global": {
                "utilization": utilization,
                "preempted_allocation_count": sum(self.preemptions_by_reason.values()),
                "preemptions_by_reason": dict(sorted(self.preemptions_by_reason.items())),
                "wasted_job_time": round(wasted_job_time, 6),
                "simulated_time": round(simulated, 6),
                "wall_time": round(wall, 3),
                "operation_count": len(self.ops),
                "completed_operation_count": sum(1 for op in self.ops if op.state == "completed"),
            },
            # Options the scenario sets that pooltree accepts without implementing (config/support.py).
            "unsupported_options": unsupported_options(
                self.scenario.snapshot.pool_trees,
                [(op.spec.id, op.spec.spec) for op in self.ops],
                offline=True,
            ),
            # Option names pooltree does not know, kept and ignored as YTsaurus does, with the closest known one.
            "unrecognized_options": unrecognized_options(
                self.scenario.snapshot.pool_trees, [(op.spec.id, op.spec.spec) for op in self.ops]
            ),
            "engine": {
                "heartbeats_processed": stats.get("heartbeats_processed", 0),
                "heartbeats_skipped": stats.get("heartbeats_skipped", 0),
                "fair_share_updates": stats.get("fair_share_updates", 0),
                "fair_share_updates_skipped": stats.get("fair_share_updates_skipped", 0),
                "events": stats.get("events", 0),
            },
        }
        segments = {
            tree.name: tree.core.segments_view()
            for tree in self.trees.values()
            if tree.core.strategy.segments.enabled
        }
        # the trees' scheduling segments at the end (strategy/segments.py), only where they are on
        if segments:
            summary["scheduling_segments"] = segments
        plans = {
            tree.name: tree.core.gpu_policy_view()["statistics"]
            for tree in self.trees.values()
            if tree.core.strategy.gpu_policy.config.planning
        }
        if plans:  # the GPU policy's plan statistics at the end (strategy/gpu_policy.py), only where it plans
            summary["gpu_assignment_plan"] = plans
        wasted = {op.spec.id: round(op.wasted_job_time, 6) for op in self.ops}
        return SimulationResult(
            summary, rows, series, dict(self.preemptions_by_reason), stats, wasted, self._pool_parents()
        )

    def _operation_entries(self, end_time: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Each operation's summary entry and its row of ``operations.csv``."""
        operations = []
        rows = []
        for op in self.ops:
            spec = op.spec
            controller = op.controller
            start = op.start_time
            pending_end = (
                start if start is not None else (op.finish_time if op.finish_time is not None else end_time)
            )
            pending_duration = max(0.0, pending_end - spec.submit_time) if op.state != "submitted" else 0.0
            progress = controller.progress() if controller is not None else {}
            aborted = dict(sorted(progress.get("aborted_job_count_by_reason", {}).items()))
            reserve = next(iter(op.reserves.values()), None)
            state = op.state if op.state != "submitted" else "not_submitted"
            entry: dict[str, Any] = {
                "id": spec.id,
                "tree": op.tree,
                "pool": op.pool or spec.spec.pool_for_tree(op.tree, spec.user),
                "user": spec.user,
                "type": spec.type,
                "state": state,
                "submit_time": spec.submit_time,
                "start_time": start,
                "finish_time": op.finish_time,
                "pending_duration": round(pending_duration, 6),
                "job_count": spec.job_count,
                "completed_job_count": progress.get("completed_job_count", 0),
                "failed_job_count": progress.get("failed_job_count", 0),
                "interrupted_job_count": progress.get("interrupted_job_count", 0),
                "aborted_job_count_by_reason": aborted,
                "preempted_job_time": round(op.preempted_job_time, 6),
                "user_job_memory_reserve_factor": reserve.user_job_reserve_factor() if reserve else None,
                "job_proxy_memory_reserve_factor": reserve.job_proxy_reserve_factor() if reserve else None,
                "resource_overdraft_count": sum(r.resource_overdraft_count for r in op.reserves.values()),
            }
            if op.error is not None:
                entry["error"] = op.error
            operations.append(entry)
            finish = op.finish_time
            real_start = start if start is not None else spec.submit_time
            rows.append(
                {
                    "id": spec.id,
                    "job_count": spec.job_count,
                    "preempted_job_count": op.preempted_job_count,
                    "start_time": _num(real_start),
                    "finish_time": _num(finish) if finish is not None else "",
                    "real_duration": _num(finish - real_start) if finish is not None else "",
                    "jobs_total_duration": _num(op.jobs_total_duration),
                    "job_max_duration": _num(op.job_max_duration),
                    "preempted_jobs_total_duration": _num(op.preempted_job_time),
                    "operation_type": spec.type,
                    "operation_state": state,
                    "in_timeframe": "true" if spec.in_timeframe else "false",
                }
            )
        return operations, rows

    def _pool_entries(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, float]]:
        """Each pool's summary entry (keyed ``tree/pool`` with several trees), each tree's pool series and the
        utilization of every resource over the run."""
        pools: dict[str, Any] = {}
        series: dict[str, Any] = {}
        utilization_usage = np.zeros(RESOURCE_COUNT)
        utilization_total = np.zeros(RESOURCE_COUNT)
        multi = len(self.trees) > 1
        for tree in self.trees.values():
            utilization_usage += tree.usage_integral
            utilization_total += tree.total_integral
            series[tree.name] = (
                PoolSeries(tree.pools, tree.series_times, np.stack(tree.series_rows))
                if tree.series_rows
                else self._pool_series(tree)
            )
            for row, pool in enumerate(tree.pools):
                acc = tree.acc[row].tolist() if row < tree.acc.shape[0] else [0.0] * 6
                span = acc[0]
                key = f"{tree.name}/{pool}" if multi else pool
                pools[key] = {
                    "mean_fair_share_ratio": round(acc[1] / span, 6) if span else 0.0,
                    "mean_usage_ratio": round(acc[2] / span, 6) if span else 0.0,
                    "mean_demand_ratio": round(acc[3] / span, 6) if span else 0.0,
                    "starving_time": round(acc[5], 6),
                    "below_fair_share_time": round(acc[4], 6),
                    "preempted_allocation_count": tree.preempted_by_pool.get(pool, 0)
                    if pool != ROOT
                    else sum(self.preemptions_by_reason.values()),
                }
        utilization = {
            name: round(float(utilization_usage[i] / utilization_total[i]), 6)
            if utilization_total[i] > 0
            else 0.0
            for i, name in enumerate(RESOURCES)
        }
        return pools, series, utilization

    def _pool_parents(self) -> dict[str, str | None]:
        """Each pool's parent (keys as in the summary's pools; the root's is None)."""
        multi = len(self.trees) > 1
        parents: dict[str, str | None] = {}
        for tree in self.trees.values():
            prefix = f"{tree.name}/" if multi else ""
            for name, pool in tree.core.pool_tree.pools.items():
                key = prefix + (ROOT if pool.is_root else name)
                parent = pool.parent
                parents[key] = None if parent is None else prefix + (ROOT if parent.is_root else parent.name)
        return parents


def _num(value: float) -> str:
    return f"{value:.3f}"
