"""The simulator's ``report.html``: the web UI's interactive Plotly charts over a finished run.

Per plotted pool: fair share vs usage vs demand with starving periods shaded (from ``timeline.csv``) and
preemptions marked (from ``events.jsonl``: the preempted operation's pool, hover names the preemptor); pending
time and preemptions per pool; the pools table and one row per operation, numbers rounded for people. A chart with
nothing to show is replaced by a sentence ("nothing pending", "no preemptions"). ``plotly.min.js`` is copied next
to the report from the installed Plotly package, so the page works offline; the PNG plots stay beside it.
"""

from __future__ import annotations

import bisect
import csv
import html
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import plotly
import plotly.graph_objects as go

from pooltree.sim.engine import ROOT, SimulationResult
from pooltree.web.charts import fair_share_figure, figure_div

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
MAX_MARKED_PREEMPTIONS = 2000
"""Preemptions marked per pool chart (the counts in the tables are complete)."""
MAX_OPERATION_ROWS = 5000


def seconds(value: Any) -> str:
    """A duration for people: 0.4 s, 12 s, 3.2 min, 1.5 h."""
    if value is None:
        return "–"
    number = float(value)
    if number < 10:
        return f"{number:.1f} s"
    if number < 600:
        return f"{number:.0f} s"
    if number < 7200:
        return f"{number / 60:.1f} min"
    return f"{number / 3600:.1f} h"


def percent(value: Any) -> str:
    return "–" if value is None else f"{float(value) * 100:.1f}%"


def _starving(out: Path, chosen: set[tuple[str, str]]) -> dict[tuple[str, str], list[tuple[float, bool]]]:
    """(tree, pool) → [(time, starving)] from timeline.csv, streamed (the file can be large)."""
    found: dict[tuple[str, str], list[tuple[float, bool]]] = defaultdict(list)
    path = out / "timeline.csv"
    if not path.exists():
        return found
    with path.open(encoding="utf-8", newline="") as stream:
        for row in csv.DictReader(stream):
            if row.get("kind") != "pool":
                continue
            key = (row["tree"], row["element"])
            if key in chosen:
                found[key].append((float(row["time"]), row["starvation_status"] != "non_starving"))
    return found


def _preemptions(
    out: Path, pool_of: dict[str, tuple[str, str]]
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(tree, pool of the preempted operation) → preemption marks, streamed from events.jsonl."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    path = out / "events.jsonl"
    if not path.exists():
        return found
    with path.open(encoding="utf-8") as stream:
        for line in stream:
            if '"allocation_preempted"' not in line:
                continue
            event = json.loads(line)
            key = pool_of.get(event.get("operation_id", ""))
            if key is None or len(found[key]) >= MAX_MARKED_PREEMPTIONS:
                continue
            found[key].append(
                {
                    "time": float(event.get("time", 0.0)),
                    "operation_id": event.get("operation_id"),
                    "preemptor_operation_id": event.get("preemptor_operation_id"),
                    "reason": event.get("reason"),
                }
            )
    return found


def _bar_chart(title: str, labels: list[str], series: dict[str, list[float]], axis: str, div_id: str) -> str:
    figure = go.Figure()
    for name, values in series.items():
        figure.add_trace(go.Bar(x=labels, y=[round(v, 2) for v in values], name=name))
    figure.update_layout(
        title={"text": title, "x": 0.01},
        height=320,
        margin={"l": 50, "r": 20, "t": 40, "b": 80},
        yaxis={"title": axis, "rangemode": "tozero"},
        barmode="group",
        template="plotly_white",
    )
    return figure_div(figure, div_id)


def report_html(
    result: SimulationResult, out: Path, images: list[str], plotted: list[tuple[str, str]]
) -> str:
    """The page; also copies plotly.min.js into ``out``."""
    shutil.copyfile(PLOTLY_JS, out / "plotly.min.js")
    summary = result.summary
    glob = summary["global"]
    multi = len(result.pool_series) > 1
    operations = summary["operations"]
    charts = _pool_charts(result, out, plotted, multi)
    pending_chart = _pending_chart(operations)
    preemption_chart = _preemption_charts(result)
    pool_rows = _pool_rows(summary)
    op_rows = _operation_rows(operations, multi)
    cut = (
        f"<p>First {MAX_OPERATION_ROWS} of {len(operations)} operations; all are in summary.json.</p>"
        if len(operations) > MAX_OPERATION_ROWS
        else ""
    )
    states: dict[str, int] = defaultdict(int)
    for op in operations:
        states[op["state"]] += 1
    utilization = ", ".join(f"{k} {v:.1%}" for k, v in glob["utilization"].items() if v)
    pictures = ", ".join(f'<a href="{html.escape(name)}">{html.escape(name)}</a>' for name in images)
    no_charts = "" if charts else "<p>No pools with operations to plot.</p>"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>pooltree simulation report</title>
<script src="plotly.min.js"></script>
<style>body{{font-family:system-ui,sans-serif;margin:1.5em;color:#111827}}table{{border-collapse:collapse}}
td,th{{border-bottom:1px solid #e5e7eb;padding:2px 8px;text-align:left}}td.num{{text-align:right}}
th{{background:#f3f4f6}}.charts{{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:8px}}
.state-failed{{color:#d62728}}.state-completed{{color:#1d4ed8}}</style></head>
<body>
<h1>pooltree simulation: {html.escape(str(summary["scenario"]))}</h1>
<p>Seed {summary["seed"]}; simulated {seconds(glob["simulated_time"])} in {glob["wall_time"]:.1f} s of wall time;
{glob["operation_count"]} operations ({", ".join(f"{k}: {v}" for k, v in sorted(states.items()))});
utilization: {html.escape(utilization or "none")}; preempted allocations: {glob["preempted_allocation_count"]};
wasted job time: {seconds(glob["wasted_job_time"])}.</p>
<h2>Fair share vs usage vs demand</h2>
<p>Share of the tree in the dominant resource. Shaded: the pool was starving. ✕: a job of the pool was preempted
(hover for the preempting operation).</p>
<div class="charts" id="pool-charts">{"".join(charts)}{no_charts}</div>
<h2>Pending</h2>
{pending_chart}
<h2>Preemptions</h2>
{preemption_chart}
<h2>Pools</h2>
<table id="pools"><tr><th>pool</th><th>mean fair share</th><th>mean usage</th><th>starving</th>
<th>below fair share</th><th>preempted allocations</th></tr>
{pool_rows}
</table>
<h2>Operations</h2>
{cut}<table id="operations"><tr><th>operation</th><th>pool</th><th>user</th><th>state</th><th>submitted at</th>
<th>pending</th><th>ran for</th><th>jobs done</th><th>preempted job time</th><th>aborted jobs</th></tr>
{"".join(op_rows)}
</table>
<p>Static plots: {pictures}.</p>
</body></html>
"""


def _pool_charts(
    result: SimulationResult, out: Path, plotted: list[tuple[str, str]], multi: bool
) -> list[str]:
    """One fair share / usage / demand chart per plotted pool, with its starving spans and preemptions."""
    operations = result.summary["operations"]
    pool_of = {op["id"]: (op["tree"], op["pool"]) for op in operations}
    starving = _starving(out, set(plotted))
    preemptions = _preemptions(out, pool_of)
    charts: list[str] = []
    for index, (tree, pool) in enumerate(plotted):
        points = result.pool_series[tree][pool]
        marks = starving.get((tree, pool), [])
        times, fair, usage, demand, flags = _merged(points, marks)
        figure = fair_share_figure(
            times,
            fair,
            usage,
            demand,
            starving=flags,
            preemptions=preemptions.get((tree, pool), []),
            title=f"{tree}/{pool}" if multi else pool,
            as_dates=False,
            height=300,
        )
        charts.append(figure_div(figure, f"pool-chart-{index}"))
    return charts


def _pending_chart(operations: list[dict[str, Any]]) -> str:
    """Mean and max pending time per pool, or a line saying nothing was pending."""
    pending: dict[str, list[float]] = defaultdict(list)
    for op in operations:
        pending[op["pool"]].append(float(op["pending_duration"] or 0.0))
    if not any(value > 0 for values in pending.values() for value in values):
        return '<p id="nothing-pending">Nothing pending: every operation started when it was submitted.</p>'
    pools = sorted(pending)
    return _bar_chart(
        "Operation pending time per pool",
        pools,
        {
            "mean": [sum(pending[p]) / len(pending[p]) for p in pools],
            "max": [max(pending[p]) for p in pools],
        },
        "seconds",
        "pending-chart",
    )


def _preemption_charts(result: SimulationResult) -> str:
    """Preempted allocations by reason and by pool, or a line saying there were none."""
    reasons = result.preemptions_by_reason
    by_pool = {
        pool: values["preempted_allocation_count"]
        for pool, values in result.summary["pools"].items()
        if pool != ROOT and values["preempted_allocation_count"]
    }
    if sum(reasons.values()) <= 0:
        return '<p id="no-preemptions">No preemptions in this run.</p>'
    return '<div class="charts">' + _bar_chart(
        "Preempted allocations by reason", list(reasons), {"allocations": list(map(float, reasons.values()))},
        "allocations", "preemption-reasons",
    ) + _bar_chart(
        "Preempted allocations by pool (subtree)", list(by_pool), {"allocations": list(map(float, by_pool.values()))},
        "allocations", "preemption-pools",
    ) + "</div>"  # fmt: skip


def _pool_rows(summary: dict[str, Any]) -> str:
    """The pools table's rows."""
    return "".join(
        "<tr>"
        + f"<td>{html.escape(pool)}</td>"
        + "".join(
            f'<td class="num">{x}</td>'
            for x in (
                percent(values["mean_fair_share_ratio"]),
                percent(values["mean_usage_ratio"]),
                seconds(values["starving_time"]),
                seconds(values["below_fair_share_time"]),
                values["preempted_allocation_count"],
            )
        )
        + "</tr>"
        for pool, values in summary["pools"].items()
    )


def _operation_rows(operations: list[dict[str, Any]], multi: bool) -> list[str]:
    """The operations table's rows (the first ``MAX_OPERATION_ROWS``)."""
    op_rows = []
    for op in operations[:MAX_OPERATION_ROWS]:
        aborted = ", ".join(f"{k} {v}" for k, v in op["aborted_job_count_by_reason"].items()) or "–"
        cells = [
            html.escape(str(op["id"])),
            html.escape(f"{op['tree']}/{op['pool']}" if multi else str(op["pool"])),
            html.escape(str(op["user"])),
            f'<span class="state-{html.escape(op["state"])}">{html.escape(op["state"])}</span>',
            seconds(op["submit_time"]),
            seconds(op["pending_duration"]),
            seconds(None if op["finish_time"] is None or op["start_time"] is None else op["finish_time"] - op["start_time"]),
            f"{op['completed_job_count']}/{op['job_count']}",
            seconds(op["preempted_job_time"]),
            html.escape(aborted),
        ]  # fmt: skip
        op_rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return op_rows


def _merged(
    points: list[tuple[float, float, float, float]], marks: list[tuple[float, bool]]
) -> tuple[list[float], list[float], list[float], list[float], list[bool]]:
    """Times, fair share, usage, demand and the starving flag on the sorted union of both time grids (each value
    holds until its next sample)."""
    times = sorted({p[0] for p in points} | {t for t, _ in marks})
    point_times = [p[0] for p in points]
    mark_times = [t for t, _ in marks]
    fair, usage, demand, flags = [], [], [], []
    for moment in times:
        i = bisect.bisect_right(point_times, moment) - 1
        j = bisect.bisect_right(mark_times, moment) - 1
        values = points[i] if i >= 0 else (moment, 0.0, 0.0, 0.0)
        fair.append(values[1])
        usage.append(values[2])
        demand.append(values[3])
        flags.append(marks[j][1] if j >= 0 else False)
    return times, fair, usage, demand, flags
