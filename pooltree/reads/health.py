"""The read process's health as the scheduler sees it: deaths, restarts, who serves the port, the alert and the
metrics.

The scheduler alert ``read_process_died`` holds while the scheduler serves its client-facing port itself after a
read process died and, once a new one took the port over, until ``ALERT_HOLD`` seconds after the death (a read
process that dies now and then stays visible). ``GET /metrics`` shows ``pooltree_read_process_deaths_total``,
``pooltree_read_process_restarts_total``, ``pooltree_read_process_up`` (1 while a read process serves the port)
and ``pooltree_read_process_requests_total{answered_by="scheduler|replica"}`` (requests the read processes relayed
or answered from their replica, as far as their counts reached the scheduler); ``pooltree_read_feed_*_total`` what the
feed cost the scheduler (ticks, templates' maps made and sent, and the CPU seconds of making, ticking and sending:
``FEED_COUNTERS``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pooltree.alerts import READ_PROCESS_DIED, alert

ALERT_HOLD = 600.0
"""Seconds ``read_process_died`` holds after a new read process took the port over."""
RESTART_DELAY = 1.0
"""Seconds before the first restart after a death; doubled per death in a row (``RESTART_DELAY_MAX`` at most)."""
RESTART_DELAY_MAX = 60.0
STABLE_AFTER = 60.0
"""Seconds a read process serves before its death no longer counts as one more in a row."""


class ReadProcessHealth:
    """Deaths and restarts of one scheduler's read processes (thread-safe: the watcher thread reports deaths)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.up = False
        """A read process serves the port."""
        self.deaths = 0
        self.in_a_row = 0
        """Deaths since a read process last served for ``STABLE_AFTER`` seconds."""
        self.restarts = 0
        self.last_reason: str | None = None
        self.last_death: float | None = None
        """Wall-clock time of the last death."""
        self.serving_since: float | None = None
        """Monotonic time the serving read process took the port over."""
        self.relayed = 0
        """Requests relayed by read processes that ended (the running one's are added by ``requests``)."""
        self.answered = 0
        self.current: tuple[int, int] = (0, 0)
        """The running read process's last counts: (relayed, answered)."""

    def serving(self, monotonic: float, restarted: bool) -> None:
        with self._lock:
            self.up = True
            self.serving_since = monotonic
            self.current = (0, 0)
            if restarted:
                self.restarts += 1

    def counted(self, relayed: int, answered: int) -> None:
        with self._lock:
            self.current = (relayed, answered)

    def died(self, reason: str, now: float, monotonic: float) -> float:
        """A read process died (``reason``); returns the seconds to wait before starting the next."""
        with self._lock:
            stable = self.serving_since is not None and monotonic - self.serving_since >= STABLE_AFTER
            self.in_a_row = 1 if stable else self.in_a_row + 1
            self.deaths += 1
            self.up = False
            self.serving_since = None
            self.last_reason = reason
            self.last_death = now
            self.relayed += self.current[0]
            self.answered += self.current[1]
            self.current = (0, 0)
            return self.restart_delay()

    def stopped(self) -> None:
        """The scheduler ended its read process (not a death)."""
        with self._lock:
            self.up = False
            self.relayed += self.current[0]
            self.answered += self.current[1]
            self.current = (0, 0)

    def restart_delay(self) -> float:
        return min(RESTART_DELAY * 2 ** max(self.in_a_row - 1, 0), RESTART_DELAY_MAX)

    def requests(self) -> tuple[int, int]:
        """(relayed, answered) by every read process so far."""
        with self._lock:
            return self.relayed + self.current[0], self.answered + self.current[1]

    def alert(self, now: float) -> dict[str, Any] | None:
        """The ``read_process_died`` scheduler alert, or None."""
        with self._lock:
            if self.last_death is None or (self.up and now - self.last_death > ALERT_HOLD):
                return None
            return alert(
                READ_PROCESS_DIED,
                f"The read process died ({self.last_reason}); "
                + (
                    "a new one serves the API port"
                    if self.up
                    else "the scheduler serves the API port itself, gets wait for its event loop"
                ),
                {
                    "deaths": self.deaths,
                    "deaths_in_a_row": self.in_a_row,
                    "restarts": self.restarts,
                    "last_death_reason": self.last_reason,
                    "last_death_time": self.last_death,
                    "read_process_up": self.up,
                },
            )


class ReadProcessMetrics(Collector):
    """``pooltree_read_process_*`` metric families of one `ReadProcessHealth`."""

    def __init__(self, health: ReadProcessHealth) -> None:
        self.health = health

    def collect(self) -> Iterator[Metric]:
        health = self.health
        relayed, answered = health.requests()
        deaths = CounterMetricFamily("pooltree_read_process_deaths", "Read processes that died")
        deaths.add_metric([], health.deaths)
        yield deaths
        restarts = CounterMetricFamily(
            "pooltree_read_process_restarts", "Read processes started after a death"
        )
        restarts.add_metric([], health.restarts)
        yield restarts
        up = GaugeMetricFamily("pooltree_read_process_up", "1 while a read process serves the API port")
        up.add_metric([], 1 if health.up else 0)
        yield up
        requests = CounterMetricFamily(
            "pooltree_read_process_requests",
            "Requests the read processes relayed to the scheduler or answered from their replica",
            labels=["answered_by"],
        )
        requests.add_metric(["scheduler"], relayed)
        requests.add_metric(["replica"], answered)
        yield requests


FEED_COUNTERS = (
    ("ticks", "pooltree_read_feed_ticks", "Ticks the read process's feed sent"),
    ("templates", "pooltree_read_feed_templates", "Templates the feed sent"),
    ("made", "pooltree_read_feed_templates_made", "Templates the scheduler made for the feed, sent or not"),
    ("warmed", "pooltree_read_feed_templates_ahead", "Templates made before a get asked for them"),
    ("voids", "pooltree_read_feed_voids", "Voids the feed sent"),
    ("forecasts", "pooltree_read_feed_forecasts", "Forecasts the feed sent"),
    ("make_cpu", "pooltree_read_feed_make_cpu_seconds", "The scheduler's CPU seconds making templates"),
    (
        "tick_cpu",
        "pooltree_read_feed_tick_cpu_seconds",
        "The scheduler's CPU seconds in ticks, templates apart",
    ),
    ("send_cpu", "pooltree_read_feed_send_cpu_seconds", "The scheduler's CPU seconds sending the ticks"),
)
"""``FeedCounts`` fields shown in ``/metrics`` (what the feed costs the scheduler, per unit: ``bench/live_queue``)."""


class ReadFeedMetrics(Collector):
    """``pooltree_read_feed_*`` counters of the leading service's feed (``counts_of()``: its ``FeedCounts``, None:
    none)."""

    def __init__(self, counts_of: Callable[[], Any]) -> None:
        self.counts_of = counts_of

    def collect(self) -> Iterator[Metric]:
        counts = self.counts_of()
        if counts is None:
            return
        for field, name, documentation in FEED_COUNTERS:
            family = CounterMetricFamily(name, documentation)
            family.add_metric([], getattr(counts, field))
            yield family
