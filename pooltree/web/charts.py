"""Plotly charts shared by the web UI's History page and the simulator's ``report.html``.

A fair-share chart shows fair share, usage and demand (dominant-resource ratios) of one pool over time, shades
the periods the pool was starving and marks each preemption (hover names the preempted and the preempting
operation). Figures are built with Plotly's Python API and rendered as a ``<div>`` plus a small script; the page
loads ``plotly.min.js`` once (served from the Plotly package, never a CDN).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from pooltree.gc_policy import POLICY

COLORS = {
    "fair_share": "#1f77b4",
    "usage": "#2ca02c",
    "demand": "#ff7f0e",
    "starving": "rgba(214,39,40,0.15)",
}


def _x(values: Sequence[float], as_dates: bool) -> list[Any]:
    if not as_dates:
        return [round(float(v), 3) for v in values]
    return [dt.datetime.fromtimestamp(float(v), tz=dt.UTC) for v in values]


def starvation_periods(times: Sequence[float], starving: Sequence[bool]) -> list[tuple[float, float]]:
    """Maximal [start, end] intervals where ``starving`` holds (a period still open ends at the last sample)."""
    periods: list[tuple[float, float]] = []
    start: float | None = None
    for moment, flag in zip(times, starving, strict=True):
        if flag and start is None:
            start = moment
        elif not flag and start is not None:
            periods.append((start, moment))
            start = None
    if start is not None and times:
        periods.append((start, times[-1]))
    return periods


def fair_share_figure(
    times: Sequence[float],
    fair_share: Sequence[float],
    usage: Sequence[float],
    demand: Sequence[float],
    *,
    starving: Sequence[bool] = (),
    preemptions: Sequence[dict[str, Any]] = (),
    title: str = "",
    as_dates: bool = True,
    height: int = 360,
) -> go.Figure:
    """Fair share vs usage vs demand of one element, starvation shaded, preemptions marked."""
    x = _x(times, as_dates)
    figure = go.Figure()
    for name, values, dash in (
        ("fair share", fair_share, "solid"),
        ("usage", usage, "solid"),
        ("demand", demand, "dot"),
    ):
        key = name.replace(" ", "_")
        figure.add_trace(
            go.Scatter(
                x=x,
                y=[round(float(v), 4) for v in values],
                name=name,
                mode="lines",
                line={"color": COLORS[key], "dash": dash, "shape": "hv"},
                hovertemplate="%{y:.1%}<extra>" + name + "</extra>",
            )
        )
    for start, end in starvation_periods(list(times), list(starving)) if starving else []:
        figure.add_vrect(
            x0=_x([start], as_dates)[0],
            x1=_x([end], as_dates)[0],
            fillcolor=COLORS["starving"],
            line_width=0,
            layer="below",
        )
    if starving and any(starving):
        figure.add_trace(
            go.Scatter(
                x=[None], y=[None], mode="markers", name="starving",
                marker={"color": COLORS["starving"], "size": 12, "symbol": "square"},
            )
        )  # fmt: skip
    if preemptions:
        moments = [float(p["time"]) for p in preemptions]
        figure.add_trace(
            go.Scatter(
                x=_x(moments, as_dates),
                y=[_value_at(times, usage, moment) for moment in moments],
                name="preemption",
                mode="markers",
                marker={"symbol": "x", "size": 10, "color": "#d62728"},
                text=[
                    f"{p.get('operation_id')} preempted for {p.get('preemptor_operation_id') or '–'}"
                    f" ({p.get('reason')})"
                    for p in preemptions
                ],
                hovertemplate="%{text}<extra>preemption</extra>",
            )
        )
    # demand can be many times the cluster: clip the axis so fair share and usage stay readable
    top = max([float(v) for v in (*fair_share, *usage)] + [min(float(v), 1.0) for v in demand] + [0.05])
    clipped = max((float(v) for v in demand), default=0.0) > top * 1.1
    figure.update_layout(
        title={"text": title, "x": 0.01},
        height=height,
        margin={"l": 50, "r": 20, "t": 40, "b": 40},
        yaxis={
            "tickformat": ".0%",
            "range": [0, top * 1.1],
            "title": "dominant share" + (" (demand clipped)" if clipped else ""),
        },
        xaxis={"title": "time" if as_dates else "seconds"},
        legend={"orientation": "h", "y": -0.2},
        hovermode="x unified",
        template="plotly_white",
    )
    return figure


def _value_at(times: Sequence[float], values: Sequence[float], moment: float) -> float:
    """The step value at ``moment`` (the last sample at or before it)."""
    current = 0.0
    for t, v in zip(times, values, strict=True):
        if t > moment:
            break
        current = float(v)
    return round(current, 4)


def figure_div(figure: go.Figure, div_id: str) -> str:
    """The figure as an HTML fragment for a page that loads plotly.min.js itself."""
    return pio.to_html(
        figure,
        include_plotlyjs=False,
        full_html=False,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
    )


def history_figure(series: dict[str, Any], title: str) -> str:
    """The History page's chart of one pool (``PoolHistory.series``). Plotly's figure objects point at each other:
    made while the collector's policy does not freeze (``GcPolicy.unfrozen``), and dropped before it freezes again
    (``_history_figure``'s frame is gone when the block ends), so that they are collected."""
    with POLICY.unfrozen():
        return _history_figure(series, title)


def _history_figure(series: dict[str, Any], title: str) -> str:
    figure = fair_share_figure(
        series["time"],
        series["fair_share"],
        series["usage"],
        series["demand"],
        starving=series["starving"],
        preemptions=series["preemptions"],
        title=title,
    )
    return figure_div(figure, "history-chart")


FORECAST_COLORS = {"start": "rgba(31,119,180,0.35)", "finish": "rgba(44,160,44,0.35)"}


def forecast_figure(rows: Sequence[dict[str, Any]], now: float, *, height_per_row: int = 34) -> str:
    """``_forecast_figure`` while the collector's policy does not freeze (Plotly's objects point at each other:
    ``GcPolicy.unfrozen``)."""
    with POLICY.unfrozen():
        return _forecast_figure(rows, now, height_per_row)


def _forecast_figure(rows: Sequence[dict[str, Any]], now: float, height_per_row: int) -> str:
    """The forecast's ranges (``pooltree.forecast``): per operation a bar from start p10 to p90 and one from
    finish p10 to p90, with a mark at each p50; a range reaching past the horizon runs to its end (``horizon``,
    absolute) with an open end. ``rows``: ``label``, ``start`` and ``finish`` ({p10, p50, p90}, seconds or None),
    ``horizon``. The vertical line is now."""
    figure = go.Figure()
    labels = [row["label"] for row in rows]
    for kind in ("start", "finish"):
        bases, widths, texts, marks, marked = [], [], [], [], []
        for row in rows:
            values = row[kind]
            low = values.get("p10")
            high = values.get("p90")
            end = row["horizon"] if high is None else high
            if low is None:
                bases.append(None)
                widths.append(None)
                texts.append(f"{kind}: after the horizon")
            else:
                bases.append(dt.datetime.fromtimestamp(low, tz=dt.UTC))
                widths.append((end - low) * 1000.0)
                texts.append(f"{kind} p10–p90{' (open end)' if high is None else ''}")
            if values.get("p50") is not None:
                marks.append(dt.datetime.fromtimestamp(values["p50"], tz=dt.UTC))
                marked.append(row["label"])
        figure.add_trace(
            go.Bar(
                y=labels,
                x=widths,
                base=bases,
                orientation="h",
                name=f"{kind} p10–p90",
                marker_color=FORECAST_COLORS[kind],
                hovertext=texts,
                offsetgroup=kind,
            )
        )
        figure.add_trace(
            go.Scatter(
                y=marked,
                x=marks,
                mode="markers",
                name=f"{kind} p50",
                marker={"symbol": "line-ns-open", "size": 16, "line": {"width": 3}},
                offsetgroup=kind,
            )
        )
    figure.add_vline(x=dt.datetime.fromtimestamp(now, tz=dt.UTC).timestamp() * 1000.0, line_dash="dot")
    figure.update_layout(
        barmode="group",
        height=120 + height_per_row * max(1, len(rows)),
        margin={"l": 10, "r": 10, "t": 40, "b": 30},
        xaxis={"type": "date", "title": "time (UTC)"},
        yaxis={"autorange": "reversed"},
        template="plotly_white",
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
    )
    return figure_div(figure, "forecast-chart")
