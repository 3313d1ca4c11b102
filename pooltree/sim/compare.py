"""What-if comparisons: the same workload, seed and node failures under several pool-tree configurations.

``pooltree simulate SCENARIO --out DIR --variant OTHER.yaml [--variant ...]`` (or a ``variants:`` section in the
scenario) runs the scenario as given (the *baseline*) and once per variant, each into ``DIR/<name>/`` with its
usual outputs, and writes one comparison beside them:

* ``comparison.json``: per run the global figures; per pool and per operation every metric for every run and the
  variant − baseline deltas; per variant the pools that gain and lose most.
* ``comparison_pools.csv`` / ``comparison_operations.csv``: the same tables, one row per pool (operation) and
  metric, a column per run and per delta.
* ``comparison.html``: one page a person reads to decide whether a change is safe (see `write_comparison_html`).

A variant document holds ``pool_trees`` (the scenario's form) or ``pool_trees_file`` (a ``yt get //sys/pool_trees``
dump), optionally ``scheduler`` settings and a ``name``; a file that is itself a ``yt get //sys/pool_trees`` dump
(no such keys) is taken as the pool trees. Everything else (cluster, workload, seed, node failures, until) is the
scenario's, so the runs differ only in the configuration.

Metrics (``POOL_METRICS``, ``OPERATION_METRICS``, ``GLOBAL_METRICS``) come from the runs' summaries: time-weighted
mean fair share and usage ratios, time below fair share and starving, preempted allocations, pending time p50 /
p95 and completion time (submit → finish of completed operations), wasted job time (run time of jobs that were
aborted or failed: preemption, node failure, memory), utilization per resource.
"""

from __future__ import annotations

import csv
import html
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooltree.config import cypress_dump_to_pool_trees, load_document
from pooltree.errors import ConfigError
from pooltree.sim.engine import ROOT, SimulationResult
from pooltree.sim.scenario import Scenario, parse_scenario

VARIANT_KEYS = ("name", "pool_trees", "pool_trees_file", "scheduler")
BASELINE = "baseline"

POOL_METRICS: tuple[tuple[str, str, int], ...] = (
    # (key, label, direction: +1 higher is better for the pool, -1 lower is better)
    ("mean_fair_share_ratio", "mean fair share", +1),
    ("mean_usage_ratio", "mean usage", +1),
    ("below_fair_share_time", "time below fair share, s", -1),
    ("starving_time", "time starving, s", -1),
    ("pending_p50", "pending p50, s", -1),
    ("pending_p95", "pending p95, s", -1),
    ("completion_mean", "completion mean, s", -1),
    ("completion_p95", "completion p95, s", -1),
    ("completed_operations", "completed operations", +1),
    ("preempted_allocation_count", "preempted jobs", -1),
    ("wasted_job_time", "wasted job time, s", -1),
)
OPERATION_METRICS: tuple[tuple[str, str, int], ...] = (
    ("pending_duration", "pending, s", -1),
    ("completion_time", "completion, s", -1),
    ("preempted_job_count", "preempted jobs", -1),
    ("preempted_job_time", "preempted job time, s", -1),
    ("wasted_job_time", "wasted job time, s", -1),
)
GLOBAL_METRICS: tuple[tuple[str, str, int], ...] = (
    ("utilization_cpu", "cpu utilization", +1),
    ("utilization_memory", "memory utilization", +1),
    ("utilization_gpu", "gpu utilization", +1),
    ("completed_operations", "completed operations", +1),
    ("failed_operations", "failed operations", -1),
    ("pending_p50", "pending p50, s", -1),
    ("pending_p95", "pending p95, s", -1),
    ("completion_mean", "completion mean, s", -1),
    ("completion_p95", "completion p95, s", -1),
    ("preempted_allocation_count", "preempted jobs", -1),
    ("wasted_job_time", "wasted job time, s", -1),
)
_SHARE_KEYS = (
    "mean_fair_share_ratio",
    "mean_usage_ratio",
    "below_fair_share_time",
    "starving_time",
    "preempted_allocation_count",
)
POOL_SHARE_METRICS = tuple(m for m in POOL_METRICS if m[0] in _SHARE_KEYS)
POOL_WORK_METRICS = tuple(m for m in POOL_METRICS if m[0] not in _SHARE_KEYS)
RANKED = 5
"""How many pools the gain / lose lists show per variant."""
RATIO_NOISE = 0.0005
"""Ratio deltas (shares, utilization) smaller than this are shown as unchanged (they round to 0.000)."""
GAIN_THRESHOLD = 0.001
"""A pool gains or loses when its mean usage ratio moves by at least this (0.1% of the cluster)."""


@dataclass(frozen=True)
class Variant:
    name: str
    scenario: Scenario
    source: str


def _variant_document(document: Mapping[str, Any], path: str) -> dict[str, Any]:
    if not isinstance(document, Mapping):
        raise ConfigError(path, "expected a map with pool_trees (or a yt get //sys/pool_trees dump)")
    if not any(key in document for key in VARIANT_KEYS):
        return {"pool_trees": cypress_dump_to_pool_trees(document)}
    for key in document:
        if key not in VARIANT_KEYS:
            raise ConfigError(
                f"{path}.{key}", f"unknown key {key!r}; expected one of {', '.join(VARIANT_KEYS)}"
            )
    if ("pool_trees" in document) == ("pool_trees_file" in document):
        raise ConfigError(path, "give exactly one of pool_trees and pool_trees_file")
    return dict(document)


def _unique(name: str, taken: set[str], path: str) -> str:
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(
            f"{path}.name", f"{name!r} is not a usable run name (a directory is named after it)"
        )
    candidate, k = name, 2
    while candidate in taken:
        candidate, k = f"{name}-{k}", k + 1
    taken.add(candidate)
    return candidate


def parse_variants(
    base_document: Mapping[str, Any],
    base_dir: Path,
    *,
    files: Sequence[Path] = (),
    source: str = "<scenario>",
) -> list[Variant]:
    """The scenario's ``variants:`` entries and the ``--variant`` files, each as a full scenario."""
    base = {key: value for key, value in base_document.items() if key != "variants"}
    entries: list[tuple[dict[str, Any], Path, str, str]] = []
    listed = base_document.get("variants") or []
    if not isinstance(listed, list):
        raise ConfigError("variants", "expected a list of variants (each with pool_trees and a name)")
    for index, entry in enumerate(listed):
        path = f"variants[{index}]"
        entries.append((_variant_document(entry, path), base_dir, path, f"variant-{index + 1}"))
    for file in files:
        document = load_document(file)
        entries.append((_variant_document(document, str(file)), file.parent, str(file), file.stem))
    taken = {BASELINE}
    variants = []
    for document, directory, path, default_name in entries:
        name = _unique(str(document.pop("name", None) or default_name), taken, path)
        merged = dict(base)
        merged.pop("pool_trees", None)
        merged.pop("pool_trees_file", None)
        if "pool_trees_file" in document:
            trees = load_document(directory / str(document["pool_trees_file"]))
            merged["pool_trees"] = cypress_dump_to_pool_trees(trees)
        else:
            merged["pool_trees"] = document["pool_trees"]
        if "scheduler" in document:
            merged["scheduler"] = document["scheduler"]
        try:
            scenario = parse_scenario(merged, base_dir=base_dir, source=f"{source} [{name}]")
        except ConfigError as error:
            raise ConfigError(f"{path}: {error.path}", error.message) from None
        variants.append(Variant(name, scenario, path))
    return variants


# ---------------------------------------------------------------------------------------------- metrics


def _quantile(values: list[float], q: float) -> float | None:
    """Linear-interpolated quantile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (position - low), 6)


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _operation_rows(result: SimulationResult) -> dict[str, dict[str, Any]]:
    preempted = {row["id"]: row["preempted_job_count"] for row in result.operation_rows}
    rows: dict[str, dict[str, Any]] = {}
    for op in result.summary["operations"]:
        completion = None
        if op["state"] == "completed" and op["finish_time"] is not None:
            completion = round(op["finish_time"] - op["submit_time"], 6)
        rows[op["id"]] = {
            "pool": op["pool"],
            "state": op["state"],
            "pending_duration": op["pending_duration"] if op["state"] != "not_submitted" else None,
            "completion_time": completion,
            "preempted_job_count": preempted.get(op["id"], 0),
            "preempted_job_time": op["preempted_job_time"],
            "wasted_job_time": result.wasted_by_operation.get(op["id"], 0.0),
        }
    return rows


def _pool_rows(result: SimulationResult, operations: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    summary_pools = result.summary["pools"]
    multi = any("/" in key for key in summary_pools)
    by_pool: dict[str, list[dict[str, Any]]] = defaultdict(list)
    trees = {op["id"]: op["tree"] for op in result.summary["operations"]}
    parents = result.pool_parents
    for op_id, op in operations.items():
        key: str | None = f"{trees[op_id]}/{op['pool']}" if multi else op["pool"]
        seen = 0
        while key is not None and seen <= len(parents):  # the pool and every ancestor: subtree figures
            by_pool[key].append(op)
            key = parents.get(key)
            seen += 1
    rows: dict[str, dict[str, Any]] = {}
    for pool in sorted(set(summary_pools) | set(by_pool)):
        values = summary_pools.get(pool, {})
        ops = by_pool.get(pool, [])
        pending = [op["pending_duration"] for op in ops if op["pending_duration"] is not None]
        completion = [op["completion_time"] for op in ops if op["completion_time"] is not None]
        rows[pool] = {
            "mean_fair_share_ratio": values.get("mean_fair_share_ratio"),
            "mean_usage_ratio": values.get("mean_usage_ratio"),
            "below_fair_share_time": values.get("below_fair_share_time"),
            "starving_time": values.get("starving_time"),
            "pending_p50": _quantile(pending, 0.5),
            "pending_p95": _quantile(pending, 0.95),
            "completion_mean": _mean(completion),
            "completion_p95": _quantile(completion, 0.95),
            "completed_operations": len(completion),
            "preempted_allocation_count": values.get("preempted_allocation_count"),
            "wasted_job_time": round(sum(op["wasted_job_time"] for op in ops), 6),
        }
    return rows


def _global_row(result: SimulationResult, operations: dict[str, dict[str, Any]]) -> dict[str, Any]:
    glob = result.summary["global"]
    pending = [op["pending_duration"] for op in operations.values() if op["pending_duration"] is not None]
    completion = [op["completion_time"] for op in operations.values() if op["completion_time"] is not None]
    return {
        "utilization_cpu": glob["utilization"].get("cpu"),
        "utilization_memory": glob["utilization"].get("memory"),
        "utilization_gpu": glob["utilization"].get("gpu"),
        "completed_operations": len(completion),
        "failed_operations": sum(1 for op in operations.values() if op["state"] == "failed"),
        "pending_p50": _quantile(pending, 0.5),
        "pending_p95": _quantile(pending, 0.95),
        "completion_mean": _mean(completion),
        "completion_p95": _quantile(completion, 0.95),
        "preempted_allocation_count": glob["preempted_allocation_count"],
        "wasted_job_time": glob["wasted_job_time"],
        "simulated_time": glob["simulated_time"],
        "wall_time": glob["wall_time"],
    }


def _delta(a: Any, b: Any) -> float | None:
    if a is None or b is None:
        return None
    return round(float(b) - float(a), 6)


def _side_by_side(
    tables: dict[str, dict[str, dict[str, Any]]], metrics: Sequence[tuple[str, str, int]], variants: list[str]
) -> dict[str, dict[str, Any]]:
    keys: set[str] = set()
    for table in tables.values():
        keys |= set(table)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(keys):
        entry: dict[str, Any] = {}
        base = tables[BASELINE].get(key, {})
        for metric, _label, _direction in metrics:
            values = {run: table.get(key, {}).get(metric) for run, table in tables.items()}
            entry[metric] = {
                "values": values,
                "delta": {variant: _delta(base.get(metric), values[variant]) for variant in variants},
            }
        entry["present_in"] = [run for run, table in tables.items() if key in table]
        out[key] = entry
    return out


def compare(results: Mapping[str, SimulationResult]) -> dict[str, Any]:
    """The comparison document of ``results`` (run name → result; ``baseline`` first)."""
    if BASELINE not in results:
        raise ValueError("the results must include the baseline run")
    variants = [name for name in results if name != BASELINE]
    operations = {run: _operation_rows(result) for run, result in results.items()}
    pools = {run: _pool_rows(result, operations[run]) for run, result in results.items()}
    globals_ = {run: _global_row(result, operations[run]) for run, result in results.items()}
    pool_table = _side_by_side(pools, POOL_METRICS, variants)
    op_table = _side_by_side(operations, OPERATION_METRICS, variants)
    for op_id, entry in op_table.items():
        entry["pool"] = {run: operations[run].get(op_id, {}).get("pool") for run in results}
        entry["state"] = {run: operations[run].get(op_id, {}).get("state") for run in results}
    global_table: dict[str, Any] = {}
    for metric, _label, _direction in GLOBAL_METRICS:
        values = {run: row[metric] for run, row in globals_.items()}
        global_table[metric] = {
            "values": values,
            "delta": {variant: _delta(values[BASELINE], values[variant]) for variant in variants},
        }
    ranking: dict[str, Any] = {}
    for variant in variants:
        scored = []
        for pool, entry in pool_table.items():
            if pool == ROOT or pool.endswith("/" + ROOT):
                continue
            usage = entry["mean_usage_ratio"]["delta"][variant]
            if usage is None or abs(usage) < GAIN_THRESHOLD:
                continue
            scored.append((usage, pool))
        scored.sort()
        ranking[variant] = {
            "gain": [
                {"pool": pool, "mean_usage_ratio_delta": score}
                for score, pool in reversed(scored[-RANKED:])
                if score > 0
            ],
            "lose": [
                {"pool": pool, "mean_usage_ratio_delta": score}
                for score, pool in scored[:RANKED]
                if score < 0
            ],
        }
    return {
        "runs": [BASELINE, *variants],
        "scenario": results[BASELINE].summary.get("scenario"),
        "seed": results[BASELINE].summary.get("seed"),
        "global": global_table,
        "runs_global": globals_,
        "pools": pool_table,
        "operations": op_table,
        "gain_and_lose": ranking,
    }


# ---------------------------------------------------------------------------------------------- writers


def write_comparison(comparison: dict[str, Any], out: Path) -> None:
    """comparison.json, comparison_pools.csv, comparison_operations.csv and comparison.html in ``out``."""
    (out / "comparison.json").write_text(json.dumps(comparison, indent=1) + "\n", encoding="utf-8")
    runs = comparison["runs"]
    variants = runs[1:]
    header = ["metric", *runs, *(f"delta {variant}" for variant in variants)]
    for name, table, metrics, first in (
        ("comparison_pools.csv", comparison["pools"], POOL_METRICS, "pool"),
        ("comparison_operations.csv", comparison["operations"], OPERATION_METRICS, "operation"),
    ):
        with (out / name).open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow([first, *header])
            for key, entry in table.items():
                for metric, _label, _direction in metrics:
                    cell = entry[metric]
                    writer.writerow(
                        [
                            key,
                            metric,
                            *(_csv(cell["values"].get(run)) for run in runs),
                            *(_csv(cell["delta"].get(variant)) for variant in variants),
                        ]
                    )
    (out / "comparison.html").write_text(comparison_html(comparison), encoding="utf-8")


def _csv(value: Any) -> Any:
    return "" if value is None else value


def _fmt(value: Any, metric: str) -> str:
    if value is None:
        return "–"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    value = float(value)
    if metric.startswith(("mean_", "utilization")):
        return f"{value:.3f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value != int(value) else f"{int(value)}"


def _negligible(delta: float, metric: str) -> bool:
    return metric.startswith(("mean_", "utilization")) and abs(delta) < RATIO_NOISE


def _delta_text(delta: Any, metric: str, direction: int) -> tuple[str, str]:
    """(css class, text) of a delta: "same" for none or a negligible one, else "good" / "bad" for the row."""
    if delta is None:
        return "same", "–"
    if delta == 0:
        return "same", "0"
    if _negligible(delta, metric):
        return "same", "≈0"
    better = (delta > 0) == (direction > 0)
    sign = "+" if delta > 0 else "−"
    return ("good" if better else "bad"), f"{sign}{_fmt(abs(delta), metric)}"


def _delta_cell(delta: Any, metric: str, direction: int) -> str:
    css, text = _delta_text(delta, metric, direction)
    return f'<td class="d {css}">{text}</td>'


def _value(cell: Mapping[str, Any], run: str, metric: str, state: Mapping[str, Any] | None) -> str:
    """A run's value; an operation's completion that did not happen says why (still running, failed...)."""
    value = cell["values"].get(run)
    if value is None and metric == "completion_time" and state is not None:
        status = state.get(run)
        if status is None:
            return "<span class='same'>absent</span>"
        return f"<span class='same'>{html.escape(_UNFINISHED.get(status, status))}</span>"
    return _fmt(value, metric)


_UNFINISHED = {"running": "not finished", "pending": "queued", "not_submitted": "not submitted"}


def _table(
    title: str,
    rows: Mapping[str, Mapping[str, Any]],
    metrics: Sequence[tuple[str, str, int]],
    runs: list[str],
    *,
    key_label: str,
    limit: int | None = None,
    note: str = "",
    pool_column: bool = False,
) -> str:
    """Side by side per row. One variant: a cell per metric, "baseline → variant" over the delta (a value
    that did not change is shown once); several variants: a column per run and per delta."""
    variants = runs[1:]
    compact = len(variants) == 1
    extra = "<th rowspan='2'>pool</th>" if pool_column else ""
    if compact:
        head = "".join(f"<th rowspan='2'>{html.escape(label)}</th>" for _m, label, _d in metrics)
        sub = ""
    else:
        head = "".join(
            f'<th colspan="{len(runs) + len(variants)}">{html.escape(label)}</th>'
            for _m, label, _d in metrics
        )
        sub = "".join(
            "".join(f"<th>{html.escape(run)}</th>" for run in runs)
            + "".join(f"<th>Δ {html.escape(v)}</th>" for v in variants)
            for _m in metrics
        )
    body = []
    items = list(rows.items())
    shown = items if limit is None else items[:limit]
    for key, entry in shown:
        state = entry.get("state")
        cells = []
        if pool_column:
            pools = entry.get("pool") or {}
            pool = pools.get(runs[0]) or next((p for p in pools.values() if p), None)
            cells.append(f"<td class='t'>{html.escape(str(pool or '–'))}</td>")
        for metric, _label, direction in metrics:
            cell = entry[metric]
            if compact:
                before = _value(cell, runs[0], metric, state)
                after = _value(cell, variants[0], metric, state)
                css, text = _delta_text(cell["delta"].get(variants[0]), metric, direction)
                if before == after:
                    cells.append(f"<td class='c'>{before}</td>")
                else:
                    delta = f"<br><span class='d {css}'>{text}</span>" if text != "–" else ""
                    cells.append(f"<td class='c'>{before} → {after}{delta}</td>")
                continue
            cells.extend(f"<td>{_value(cell, run, metric, state)}</td>" for run in runs)
            cells.extend(_delta_cell(cell["delta"].get(v), metric, direction) for v in variants)
        body.append(f"<tr><th class='k'>{html.escape(key)}</th>{''.join(cells)}</tr>")
    more = ""
    if limit is not None and len(items) > limit:
        more = f"<p class='note'>{len(items) - limit:,} more rows in the CSV.</p>"
    second = f"<tr>{sub}</tr>" if sub else ""
    return (
        f"<h2>{html.escape(title)}</h2>{note}<div class='scroll'><table><thead>"
        f"<tr><th rowspan='2'>{html.escape(key_label)}</th>{extra}{head}</tr>{second}</thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>{more}"
    )


def _verdict(comparison: dict[str, Any], variant: str) -> str:
    """A few sentences on what changes for the variant (the figures that moved most, in words)."""
    glob = comparison["global"]
    lines = []
    for metric, label, direction in GLOBAL_METRICS:
        cell = glob[metric]
        base, delta = cell["values"][BASELINE], cell["delta"][variant]
        if delta is None or base is None or delta == 0 or _negligible(delta, metric):
            continue
        relative = abs(delta) / abs(base) if base else math.inf
        if relative < 0.02 and metric.startswith(("pending", "completion", "wasted")):
            continue
        css, text = _delta_text(delta, metric, direction)
        lines.append(
            f"<li class='{css}'>{html.escape(label)}: {_fmt(base, metric)} → "
            f"{_fmt(cell['values'][variant], metric)} ({text})</li>"
        )
    ranking = comparison["gain_and_lose"][variant]
    gain = ", ".join(
        f"{html.escape(p['pool'])} (+{p['mean_usage_ratio_delta']:.3f})" for p in ranking["gain"]
    )
    lose = ", ".join(f"{html.escape(p['pool'])} ({p['mean_usage_ratio_delta']:.3f})" for p in ranking["lose"])
    unmoved = f"none (no pool's mean usage moved by {GAIN_THRESHOLD:g} of the cluster or more)"
    starving = []
    for pool, entry in comparison["pools"].items():
        before = entry["starving_time"]["values"].get(BASELINE) or 0.0
        after = entry["starving_time"]["values"].get(variant) or 0.0
        if after > before + 1e-9:
            starving.append((after - before, pool))
    starving.sort(reverse=True)
    worse = ", ".join(f"{html.escape(pool)} (+{delta:,.0f} s)" for delta, pool in starving[:RANKED])
    sooner, later, only = _finishing(comparison, variant)
    paragraphs = [
        f"<p><b>Gain most</b> mean usage: {gain or unmoved}</p>",
        f"<p><b>Lose most</b> mean usage: {lose or 'none'}</p>",
        f"<p><b>Finish sooner</b>: {sooner or 'no operation'}</p>",
        f"<p><b>Finish later</b>: {later or 'no operation'}</p>",
    ]
    if only:
        paragraphs.append(f"<p><b>Finish in one run only</b>: {only}</p>")
    paragraphs.append(f"<p><b>Starve longer</b>: {worse or 'no pool'}</p>")
    unfinished = [
        op_id
        for op_id, entry in comparison["operations"].items()
        if entry["completion_time"]["values"].get(BASELINE) is None
        and entry["completion_time"]["values"].get(variant) is None
        and entry["state"].get(BASELINE) in ("running", "pending")
    ]
    if unfinished:
        names = ", ".join(html.escape(op_id) for op_id in unfinished[:RANKED])
        if len(unfinished) > RANKED:
            names += f" and {len(unfinished) - RANKED:,} more"
        paragraphs.append(
            f"<p class='note'>Not finished at the end of either run: {names}. Completion figures cover "
            "completed operations only; with a fixed amount of work, a change that moves when work runs (not "
            "how much) shows in completion times rather than in mean usage.</p>"
        )
    return (
        f"<section class='verdict'><h3>{html.escape(variant)} vs baseline</h3>"
        f"<ul>{''.join(lines) or '<li>no global change</li>'}</ul>{''.join(paragraphs)}</section>"
    )


def _finishing(comparison: dict[str, Any], variant: str) -> tuple[str, str, str]:
    """The operations whose completion time moved most each way, and those that complete in one run only."""
    moved = []
    only = []
    for op_id, entry in comparison["operations"].items():
        cell = entry["completion_time"]
        before, after = cell["values"].get(BASELINE), cell["values"].get(variant)
        pool = (entry.get("pool") or {}).get(BASELINE) or (entry.get("pool") or {}).get(variant)
        where = f" ({html.escape(str(pool))})" if pool else ""
        if before is not None and after is not None:
            delta = after - before
            if abs(delta) >= max(1.0, 0.01 * before):
                moved.append(
                    (delta, op_id, f"{html.escape(op_id)}{where}: {_fmt(before, 'c')} → {_fmt(after, 'c')} s")
                )
        elif before is not None or after is not None:
            run = "baseline" if before is not None else "the variant"
            only.append(f"{html.escape(op_id)}{where} in {run} only")
    moved.sort()
    sooner = "; ".join(text for delta, _op, text in moved[:RANKED] if delta < 0)
    later = "; ".join(text for delta, _op, text in reversed(moved[-RANKED:]) if delta > 0)
    return sooner, later, "; ".join(only[:RANKED])


def comparison_html(comparison: dict[str, Any]) -> str:
    """A self-contained page: verdict per variant, global figures, pools side by side, operations that moved."""
    runs = comparison["runs"]
    variants = runs[1:]
    global_rows = {
        label: {"value": comparison["global"][metric]} for metric, label, _direction in GLOBAL_METRICS
    }
    global_body = []
    for metric, label, direction in GLOBAL_METRICS:
        cell = comparison["global"][metric]
        cells = "".join(f"<td>{_fmt(cell['values'].get(run), metric)}</td>" for run in runs)
        cells += "".join(_delta_cell(cell["delta"].get(v), metric, direction) for v in variants)
        global_body.append(f"<tr><th class='k'>{html.escape(label)}</th>{cells}</tr>")
    del global_rows
    global_table = (
        "<h2>Whole cluster</h2><table><thead><tr><th></th>"
        + "".join(f"<th>{html.escape(run)}</th>" for run in runs)
        + "".join(f"<th>Δ {html.escape(v)}</th>" for v in variants)
        + f"</tr></thead><tbody>{''.join(global_body)}</tbody></table>"
    )
    pools = comparison["pools"]

    def movement(entry: Mapping[str, Any]) -> float:
        return (
            max((abs(entry["mean_usage_ratio"]["delta"].get(v) or 0.0) for v in variants), default=0.0)
            + max((abs(entry["starving_time"]["delta"].get(v) or 0.0) for v in variants), default=0.0)
            / 3600.0
        )

    ordered_pools = dict(
        sorted(pools.items(), key=lambda item: (item[0] != ROOT, -movement(item[1]), item[0]))
    )
    operations = comparison["operations"]

    def op_movement(entry: Mapping[str, Any]) -> float:
        return max(
            (
                abs(entry["completion_time"]["delta"].get(v) or 0.0)
                + abs(entry["pending_duration"]["delta"].get(v) or 0.0)
                for v in variants
            ),
            default=0.0,
        )

    ordered_ops = dict(sorted(operations.items(), key=lambda item: (-op_movement(item[1]), item[0])))
    runs_line = ", ".join(
        f"{html.escape(run)}: simulated {comparison['runs_global'][run]['simulated_time']:,.0f} s in "
        f"{comparison['runs_global'][run]['wall_time']:,.1f} s (<a href='{html.escape(run)}/report.html'>report</a>)"
        for run in runs
    )
    pool_note = (
        "<p class='note'>Time-weighted means over the run (ratios of the cluster). Pools that moved most "
        "first (mean usage, then starving time).</p>"
    )
    work_note = "<p class='note'>Operations of the pool and its subtree (completion: submit to finish).</p>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>pooltree what-if comparison</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.15em; margin-top: 1.6em; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ border: 1px solid #ddd; padding: 3px 6px; text-align: right; white-space: nowrap; }}
th.k {{ text-align: left; font-weight: 600; }} thead th {{ background: #f4f4f4; }}
td.d, span.d {{ font-weight: 600; }} td.c {{ line-height: 1.25; }} td.t {{ text-align: left; }} .good {{ color: #1a7f37; }} .bad {{ color: #c62828; }} .same {{ color: #888; }}
section.verdict {{ border: 1px solid #ccc; border-radius: 6px; padding: 0.4em 1em; margin: 0.8em 0; max-width: 70em; }}
.scroll {{ overflow-x: auto; max-width: 100%; }} .note {{ color: #666; font-size: 0.85em; }}
</style></head><body>
<h1>What-if comparison: {html.escape(str(comparison["scenario"]))} (seed {comparison["seed"]})</h1>
<p class="note">Same workload, seed and node failures under each configuration. Δ = variant − baseline;
green is better for the pool or cluster, red worse. Runs: {runs_line}.</p>
{"".join(_verdict(comparison, v) for v in variants)}
{global_table}
{_table("Pools: share of the cluster", ordered_pools, POOL_SHARE_METRICS, runs, key_label="pool", note=pool_note)}
{_table("Pools: their operations", ordered_pools, POOL_WORK_METRICS, runs, key_label="pool", note=work_note)}
{_table("Operations that moved most", ordered_ops, OPERATION_METRICS, runs, key_label="operation", limit=200, pool_column=True)}
</body></html>
"""
