"""The forecast worker's health: deaths counted, restarts spaced out, the scheduler alert and the metrics.

A worker process that dies (killed by the kernel's OOM killer or an operator, an exit from a crash) is seen at
once by a watcher thread waiting on its process sentinel (`pooltree.forecast.worker`), even while no forecast
runs. Each death is counted (``deaths``, ``in_a_row``), and the next worker is not started before a back-off
that doubles with every death in a row (``restart_backoff`` .. ``restart_backoff_max`` seconds); a forecast that
succeeds ends the row. Meanwhile readers see the last forecast with the error; heartbeats and commands never wait
for the worker.

The scheduler alert ``forecast_worker_died`` holds while no forecast succeeded since the last death, and for
``ALERT_HOLD`` seconds after it (a worker that dies now and then stays visible). ``GET /metrics`` shows
``pooltree_forecast_worker_deaths_total``, ``..._restarts_total``, ``pooltree_forecast_refreshes_total``,
``pooltree_forecast_failures_total``, the last refresh's cost in the server (the longest hold of the
scheduler's lock, the copy's and the pickling's CPU), and per refresh phase a histogram of its wall seconds
(``pooltree_forecast_refresh_phase_seconds{phase="copy|pickle|worker|unpickle"}``) and of the copy's longest
hold of the scheduler's lock (``pooltree_forecast_refresh_longest_lock_hold_seconds``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pooltree.alerts import FORECAST_WORKER_DIED, alert

ALERT_HOLD = 600.0
"""Seconds the ``forecast_worker_died`` alert holds after a death once forecasts succeed again."""

PHASES = ("copy", "pickle", "worker", "unpickle")
"""A refresh's phases in order: the copy of the cluster (in holds of the scheduler's lock), its pickling, the
worker's forecast, the answer's unpickling."""
PHASE_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
"""Histogram buckets (seconds) of the phases: milliseconds for the copy and the pickling, seconds for the worker."""


def _phase_histograms() -> tuple[Histogram, Histogram]:
    """The refresh phases' histograms (unregistered: `ForecastCollector` yields them for its service)."""
    return (
        Histogram(
            "pooltree_forecast_refresh_phase_seconds",
            "Wall seconds of each phase of a forecast refresh",
            ["phase"],
            registry=None,
            buckets=PHASE_BUCKETS,
        ),
        Histogram(
            "pooltree_forecast_refresh_longest_lock_hold_seconds",
            "The longest hold of the scheduler's lock by a refresh's copy of the cluster",
            registry=None,
            buckets=PHASE_BUCKETS,
        ),
    )


@dataclass
class WorkerHealth:
    """Deaths and restarts of the forecast worker (thread-safe: the watcher, the refresher and readers use it)."""

    backoff: float = 1.0
    """Seconds before the first restart after a death (doubled with every death in a row)."""
    backoff_max: float = 300.0
    deaths: int = 0
    """Worker processes that died since the service started."""
    in_a_row: int = 0
    """Deaths since the last forecast that succeeded."""
    restarts: int = 0
    """Workers started after a death."""
    refreshes: int = 0
    failures: int = 0
    """Refreshes that ended without a forecast (the worker died, the forecast failed or ran past its budget)."""
    last_death: float | None = None
    """When the last death was seen (the service's clock)."""
    last_reason: str = ""
    """How the last worker ended: the signal that killed it, or its exit status."""
    restart_after: float = -math.inf
    """``time.monotonic()`` before which no worker is started."""
    last_cost: dict[str, float] = field(default_factory=dict)
    histograms: tuple[Histogram, Histogram] = field(default_factory=_phase_histograms, repr=False)
    """The refresh phases' wall seconds and the copy's longest lock hold, per refresh (`refreshed`)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def died(self, reason: str, now: float) -> float:
        """Note a death seen at ``now``; returns the seconds until a new worker may start."""
        with self._lock:
            self.deaths += 1
            self.in_a_row += 1
            self.last_death = now
            self.last_reason = reason
            # the exponent held at 30: 2 ** 1024 is past a float, and a worker may die that often in a long night
            delay = min(self.backoff * 2.0 ** min(self.in_a_row - 1, 30), self.backoff_max)
            self.restart_after = time.monotonic() + delay
            return delay

    def restart_wait(self) -> float:
        """Seconds until a new worker may start (0: now)."""
        return max(self.restart_after - time.monotonic(), 0.0)

    def restarted(self) -> None:
        with self._lock:
            if self.deaths:
                self.restarts += 1

    def succeeded(self, cost: dict[str, float] | None = None) -> None:
        with self._lock:
            self.in_a_row = 0
            if cost is not None:
                self.refreshes += 1
                self.last_cost = dict(cost)

    def refreshed(self, phases: dict[str, float], longest_hold: float) -> None:
        """A refresh's phases' wall seconds (`PHASES`) and its longest hold of the scheduler's lock."""
        seconds, hold = self.histograms
        for phase, value in phases.items():
            seconds.labels(phase).observe(value)
        hold.observe(longest_hold)

    def failed(self) -> None:
        with self._lock:
            self.failures += 1

    def alert(self, now: float) -> dict[str, Any] | None:
        """The ``forecast_worker_died`` scheduler alert, or None."""
        with self._lock:
            if self.last_death is None or (not self.in_a_row and now - self.last_death > ALERT_HOLD):
                return None
            recovered = not self.in_a_row
            return alert(
                FORECAST_WORKER_DIED,
                f"The forecast worker process died ({self.last_reason}); "
                + (
                    "forecasts have succeeded since"
                    if recovered
                    else "scheduling forecasts are not refreshed"
                ),
                {
                    "deaths": self.deaths,
                    "deaths_in_a_row": self.in_a_row,
                    "restarts": self.restarts,
                    "last_death_reason": self.last_reason,
                    "last_death_time": self.last_death,
                    "restart_in_seconds": round(self.restart_wait(), 3),
                },
            )


class ForecastCollector(Collector):
    """``pooltree_forecast_*`` metric families of one `WorkerHealth`."""

    def __init__(self, health: WorkerHealth) -> None:
        self.health = health

    def collect(self) -> Iterator[Metric]:
        health = self.health
        for name, text, value in (
            ("pooltree_forecast_worker_deaths", "Forecast worker processes that died", health.deaths),
            ("pooltree_forecast_worker_restarts", "Forecast workers started after a death", health.restarts),
            ("pooltree_forecast_refreshes", "Forecast refreshes that succeeded", health.refreshes),
            (
                "pooltree_forecast_failures",
                "Forecast refreshes that ended without a forecast",
                health.failures,
            ),
        ):
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], value)
            yield counter
        in_a_row = GaugeMetricFamily(
            "pooltree_forecast_worker_deaths_in_a_row", "Worker deaths since the last forecast that succeeded"
        )
        in_a_row.add_metric([], health.in_a_row)
        yield in_a_row
        cost = GaugeMetricFamily(
            "pooltree_forecast_last_refresh_seconds",
            "The last refresh's cost in the scheduler process (seconds) by part",
            labels=["part"],
        )
        for part, value in sorted(health.last_cost.items()):
            if part.endswith("_seconds"):
                cost.add_metric([part.removesuffix("_seconds")], value)
        yield cost
        for histogram in health.histograms:
            yield from histogram.collect()
