"""Simulation outputs (PRODUCT.md §4): summary.json, operations.csv, timeline.csv, events.jsonl, report.html + PNGs.

:func:`run_to_directory` streams ``events.jsonl`` and ``timeline.csv`` while the engine runs (a day of a large
cluster produces millions of events; they are never all held in memory), then writes the rest. Plots use
matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from pooltree.sim.engine import ROOT, ProgressCallback, Simulation, SimulationResult
from pooltree.sim.report_page import report_html
from pooltree.sim.scenario import Scenario

OPERATIONS_CSV_COLUMNS = (
    "id",
    "job_count",
    "preempted_job_count",
    "start_time",
    "finish_time",
    "real_duration",
    "jobs_total_duration",
    "job_max_duration",
    "preempted_jobs_total_duration",
    "operation_type",
    "operation_state",
    "in_timeframe",
)
TIMELINE_COLUMNS = (
    "time",
    "tree",
    "element",
    "kind",
    "fair_share_ratio",
    "usage_ratio",
    "demand_ratio",
    "starvation_status",
)
MAX_PLOTTED_POOLS = 12


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"cannot serialize {type(value).__name__}")


def run_to_directory(
    scenario: Scenario,
    out: str | Path,
    *,
    seed: int | None = None,
    until: float | None = None,
    progress: ProgressCallback | None = None,
    plots: bool = True,
    **engine_options: Any,
) -> SimulationResult:
    """Run ``scenario`` and write every output file into ``out`` (created if missing)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with (
        (out / "events.jsonl").open("w", encoding="utf-8") as events_file,
        (out / "timeline.csv").open("w", encoding="utf-8", newline="") as timeline_file,
    ):
        timeline = csv.writer(timeline_file)
        timeline.writerow(TIMELINE_COLUMNS)

        def write_event(event: dict[str, Any]) -> None:
            events_file.write(json.dumps(event, sort_keys=True, default=_json_default) + "\n")

        simulation = Simulation(
            scenario,
            seed=seed,
            until=until,
            event_sink=write_event if scenario.report.event_log else None,
            timeline_sink=timeline.writerows,
            progress=progress,
            **engine_options,
        )
        result = simulation.run()
    write_summary(result, out / "summary.json")
    write_operations_csv(result, out / "operations.csv")
    if plots:
        write_report(result, out)
    return result


def write_summary(result: SimulationResult, path: Path) -> None:
    path.write_text(json.dumps(result.summary, indent=2, default=_json_default) + "\n", encoding="utf-8")


def write_operations_csv(result: SimulationResult, path: Path) -> None:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=OPERATIONS_CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(result.operation_rows)


def _plotted_pools(result: SimulationResult) -> list[tuple[str, str]]:
    """(tree, pool) pairs to plot: every pool for small trees, else the ones with the largest mean demand."""
    pools = result.summary["pools"]
    candidates = []
    multi = len(result.pool_series) > 1
    for tree, series in result.pool_series.items():
        for pool in series:
            if pool == ROOT:
                continue
            key = f"{tree}/{pool}" if multi else pool
            demand = pools.get(key, {}).get("mean_demand_ratio", 0.0)
            candidates.append((-demand, tree, pool))
    candidates.sort()
    return [(tree, pool) for _, tree, pool in candidates[:MAX_PLOTTED_POOLS]]


def write_report(result: SimulationResult, out: Path) -> list[str]:
    """Write the PNG plots and report.html; returns the PNG file names."""
    import matplotlib  # plots only: the simulator runs without loading matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = _plotted_pools(result)
    names = [
        name
        for name in (
            _plot_shares(plt, result, chosen, out),
            _plot_pending(plt, result, out),
            _plot_preemptions(plt, result, out),
        )
        if name is not None
    ]
    (out / "report.html").write_text(report_html(result, out, names, chosen), encoding="utf-8")
    return names


def _plot_shares(plt: Any, result: SimulationResult, chosen: list[tuple[str, str]], out: Path) -> str | None:
    """fair_share_vs_usage.png: fair share, usage and demand over time of the ``chosen`` pools (None: no pool)."""
    if not chosen:
        return None
    columns = 2 if len(chosen) > 1 else 1
    rows = math.ceil(len(chosen) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 2.6 * rows), squeeze=False, sharex=True)
    for axis, (tree, pool) in zip(axes.flat, chosen, strict=False):
        points = result.pool_series[tree][pool]
        times = [p[0] / 3600.0 for p in points]
        axis.step(times, [p[1] for p in points], where="post", label="fair share", color="tab:blue")
        axis.step(times, [p[2] for p in points], where="post", label="usage", color="tab:orange")
        axis.step(
            times,
            [p[3] for p in points],
            where="post",
            label="demand",
            color="tab:gray",
            alpha=0.5,
            linestyle=":",
        )
        axis.set_title(pool if len(result.pool_series) == 1 else f"{tree}/{pool}", fontsize=9)
        top = max([p[1] for p in points] + [p[2] for p in points] + [min(1.0, p[3]) for p in points] + [0.05])
        axis.set_ylim(0, top * 1.1)
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(chosen) :]:
        axis.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="upper right")
    for axis in axes[-1]:
        axis.set_xlabel("simulated time, h")
    figure.suptitle("Fair share vs usage (dominant share of the tree)")
    figure.tight_layout()
    figure.savefig(out / "fair_share_vs_usage.png", dpi=90)
    plt.close(figure)
    return "fair_share_vs_usage.png"


def _plot_pending(plt: Any, result: SimulationResult, out: Path) -> str | None:
    """pending_time.png: mean and maximum pending time of the operations of each pool (None: no operation)."""
    pending: dict[str, list[float]] = defaultdict(list)
    for operation in result.summary["operations"]:
        pending[operation["pool"]].append(operation["pending_duration"])
    if not pending:
        return None
    pools = sorted(pending)
    figure, axis = plt.subplots(figsize=(max(6, 0.5 * len(pools)), 3.5))
    means = [sum(pending[p]) / len(pending[p]) for p in pools]
    maxima = [max(pending[p]) for p in pools]
    positions = range(len(pools))
    axis.bar([x - 0.2 for x in positions], means, width=0.4, label="mean")
    axis.bar([x + 0.2 for x in positions], maxima, width=0.4, label="max")
    axis.set_xticks(list(positions), pools, rotation=45, ha="right", fontsize=8)
    axis.set_ylabel("pending time, s")
    axis.set_title("Operation pending time per pool")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "pending_time.png", dpi=90)
    plt.close(figure)
    return "pending_time.png"


def _plot_preemptions(plt: Any, result: SimulationResult, out: Path) -> str:
    """preemptions.png: preempted allocations by reason and by pool (subtree)."""
    reasons = result.preemptions_by_reason
    by_pool = {
        pool: values["preempted_allocation_count"]
        for pool, values in result.summary["pools"].items()
        if pool != ROOT and values["preempted_allocation_count"]
    }
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    left.bar(list(reasons) or ["none"], list(reasons.values()) or [0], color="tab:red")
    left.set_title("Preempted allocations by reason")
    left.tick_params(axis="x", labelsize=8)
    right.bar(list(by_pool) or ["none"], list(by_pool.values()) or [0], color="tab:purple")
    right.set_title("Preempted allocations by pool (subtree)")
    right.tick_params(axis="x", labelsize=8, rotation=45)
    figure.tight_layout()
    figure.savefig(out / "preemptions.png", dpi=90)
    plt.close(figure)
    return "preemptions.png"
