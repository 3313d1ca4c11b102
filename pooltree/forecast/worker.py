"""The forecast off the request path: a worker process, refreshed while people look, bounded in time and memory.

`ForecastService` belongs to the live service. A refresh copies the cluster (`take_state`, in 2 ms holds of the
scheduler's lock, proportional to operations and jobs) on a thread of its own, sends the copy to the worker
process (`pooltree.forecast.process`: spawned, ``nice`` +10, an address-space limit ``memory_limit``, each
forecast under a CPU-time alarm ``timeout``) and keeps the answer as ``latest``; readers (``get_operation``, the
web pages, the CLI through them) only read ``latest``, so neither heartbeats nor API calls ever wait for a
forecast. A forecast that fails keeps its error in ``last_error`` (the attribute's ``error``). A worker that dies
is seen at once, counted and alerted on, and replaced after a back-off (``restart_backoff``, doubling with every
death in a row; `pooltree.forecast.health`); the error names how it ended: the signal, or its exit status.

Refreshes are demand-driven: every ``refresh_periods`` fair-share periods while someone has read a forecast in
the last ``idle_after`` seconds, and at once when asked (``request``). An idle scheduler starts no process, except
to replace one that died: a death asks for one refresh, made after the back-off whether or not anyone reads, so
that the ``forecast_worker_died`` alert says the worker recovered (or, if it dies again, the back-off doubles).
``dry_run`` forecasts one more operation synchronously (on the caller's thread, which waits for the worker).
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pooltree.errors import ConfigError, PooltreeError
from pooltree.forecast.arrivals import ArrivalSettings
from pooltree.forecast.health import WorkerHealth
from pooltree.forecast.live import (
    FORECAST_STATES,
    CopyCost,
    DurationHistory,
    LiveSchedulerView,
    OperationCopies,
    SubmissionHistory,
    take_state,
)
from pooltree.forecast.process import WorkerProcess, opened_forecast, state_parcel
from pooltree.forecast.run import Forecast, ForecastSettings
from pooltree.forecast.state import ClusterState, OperationState

log = logging.getLogger("pooltree.forecast")


LIVE_MAX_SEEDS: int | None = 32
"""Runs at most per live refresh (`ForecastSettings.max_seeds`; None: exactly ``seeds``): up to 32 keep within the
5 s budget at 1,000 nodes (4.18-4.41 s, the hour covered every time), lower the back-tests' median absolute error
by 10-20%, and leave heartbeat and API p99 as they were (docs/forecast.md, ninth round)."""


def live_forecast_settings(cpu_budget: float = 5.0, *, arrivals: bool = False) -> ForecastSettings:
    """The forecasts the live service makes: 5 runs of up to one simulated hour (more up to `LIVE_MAX_SEEDS`, when
    set, while the budget pays them) within ``cpu_budget`` CPU seconds together."""
    return ForecastSettings(
        seeds=5,
        horizon=3600.0,
        cpu_budget=cpu_budget,
        arrivals=ArrivalSettings(enabled=arrivals),
        max_seeds=LIVE_MAX_SEEDS,
    )


@dataclass(frozen=True)
class WorkerSettings:
    """How the service runs forecasts."""

    forecast: ForecastSettings = field(default_factory=live_forecast_settings)
    """The live default (`live_forecast_settings`): 5 runs of up to one simulated hour (more up to `LIVE_MAX_SEEDS`,
    when set, while the budget pays them) within 5 CPU seconds together (at 1,000 busy nodes the simulator's setup alone takes ~0.8 s,
    so it gives up at its first check and the capacity hand-over carries every run: see docs/forecast.md)."""
    refresh_periods: int = 30
    """Fair-share periods between refreshes while forecasts are read."""
    idle_after: float = 300.0
    """Seconds after the last read when periodic refreshes stop."""
    timeout: float = 600.0
    """CPU seconds one forecast may take in the worker."""
    memory_limit: int = 2 << 30
    """Bytes of address space of the worker process."""
    niceness: int = 10
    restart_backoff: float = 1.0
    """Seconds before a new worker starts after one died (doubled with every death in a row,
    `pooltree.forecast.health`)."""
    restart_backoff_max: float = 300.0
    enabled: bool = True
    """False: no forecast is ever made (``pooltree scheduler --forecast-budget 0``); the attribute says so."""

    def __post_init__(self) -> None:
        if not 1 <= self.refresh_periods <= 100_000:
            raise ConfigError(
                "forecast.refresh_periods", f"must be in [1, 100000], got {self.refresh_periods!r}"
            )
        if not 0 < self.timeout <= 3600:
            raise ConfigError("forecast.timeout", f"must be seconds in (0, 3600], got {self.timeout!r}")


def forecast_worker_settings(cpu_budget: float, *, arrivals: bool = False) -> WorkerSettings:
    """The live service's settings for ``pooltree scheduler --forecast-budget`` (0 turns forecasts off) and
    ``--forecast-arrivals`` (submissions to come drawn from the last hour's, `pooltree.forecast.arrivals`)."""
    if not math.isfinite(cpu_budget) or not 0 <= cpu_budget <= 3600:
        raise ConfigError("--forecast-budget", f"must be CPU seconds in [0, 3600], got {cpu_budget!r}")
    if cpu_budget == 0:
        return WorkerSettings(enabled=False)
    return WorkerSettings(forecast=live_forecast_settings(cpu_budget, arrivals=arrivals))


OFF = "this scheduler makes no forecasts (pooltree scheduler --forecast-budget 0)"


class ForecastService:
    """Forecasts of one live scheduler (see the module docstring)."""

    def __init__(
        self,
        scheduler: LiveSchedulerView,
        clock: Callable[[], float],
        settings: WorkerSettings | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.settings = settings or WorkerSettings()
        self.history = DurationHistory()
        self.submissions = SubmissionHistory(clock())
        listeners = getattr(scheduler, "listeners", None)
        if listeners is not None:  # an operation that starts and ends between two copies is still seen
            listeners.append(self._on_state)
        self.latest: Forecast | None = None
        self.latest_parcel: tuple[Forecast, tuple[bytes, ...]] | None = None
        """``latest`` and its operations as the worker sent them, each ``(id, OperationForecast)`` pickled on its
        own in ``latest.operations``' order (``forecast_parcel``): a read process's feed forwards them unopened
        (``pooltree/reads/wire.py``). Set before ``latest``: a reader that finds another forecast here than in
        ``latest`` pickles ``latest``'s itself."""
        self.last_error: str | None = None if self.settings.enabled else OFF
        self.last_read = -float("inf")
        self.refreshes = 0
        self.last_cost: dict[str, float] = {}
        """The last refresh: ``state`` (the copy, in the server: its thread's CPU and wall seconds), ``forecast``
        (the worker's wall time, at its lower priority), and the simulator events it processed."""
        self.health = WorkerHealth(self.settings.restart_backoff, self.settings.restart_backoff_max)
        self._wanted = threading.Event()
        """A refresh is wanted now (a read of a stale or missing forecast, `request`, a worker's death)."""
        self.worker = WorkerProcess(
            self.settings.memory_limit,
            self.settings.niceness,
            self.health,
            clock,
            on_death=self._wanted.set,  # replaced after its back-off, read or not (see the module docstring)
        )
        self._copying = threading.Lock()
        """One copy at a time (a refresh's and a dry run's share the histories and ``copies``)."""
        self.copies = OperationCopies()
        self._pickled: dict[str, tuple[Any, bytes]] = {}
        """The last refresh's operations and their pickled bytes (`state_parcel`)."""
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def _on_state(self, operation_id: str, state: str) -> None:
        """The scheduler's state listener (called under its lock): remember a new operation's submission."""
        op = self.scheduler.operations.get(operation_id)
        if op is not None:
            self.submissions.add(op, self.scheduler)

    # ------------------------------------------------------------------ process

    def _send(self, state: ClusterState, settings: ForecastSettings) -> concurrent.futures.Future[Any]:
        return self.worker.send(state_parcel(state), settings, self.settings.timeout)

    @property
    def answer_timeout(self) -> float:
        """Seconds a caller waits for the worker's answer to one forecast (its CPU budget, at low priority)."""
        return self.settings.timeout * 4 + 60

    def collect(self, future: concurrent.futures.Future[Any], timeout: float = 0.0) -> Forecast:
        """The forecast ``future`` (from the worker) holds, waiting up to ``timeout`` seconds; errors as
        `PooltreeError` (``ForecastTimeout`` when it is not done)."""
        found = opened_forecast(self.worker.answer(future, timeout))
        self.health.succeeded()
        return found

    def _submit(self, state: ClusterState, settings: ForecastSettings) -> Forecast:
        return self.collect(self._send(state, settings), self.answer_timeout)

    # ------------------------------------------------------------------ refreshes

    def _take_state(self, cost: CopyCost | None = None) -> ClusterState:
        """A copy of the live cluster (one at a time: the histories and the operations' copies are theirs)."""
        with self._copying:
            return take_state(
                self.scheduler, self.history, self.clock(), self.submissions, cost, copies=self.copies
            )

    def refresh(self) -> Forecast | None:
        """Copy the cluster and forecast it now (on the caller's thread, which waits for the worker). Each phase's
        wall seconds go to the metrics (`WorkerHealth.refreshed`); at DEBUG each phase's wall-clock interval is
        logged too (``forecast phases:``; `bench/forecast_live.py` turns it on to attribute slow heartbeats)."""
        cost = CopyCost()
        began, cpu = time.time(), time.thread_time()
        state = self._take_state(cost)
        copied, cpu = time.thread_time() - cpu, time.thread_time()
        sending = time.time()
        try:
            parcel = state_parcel(state, self._pickled)  # the refresher's own: dry runs pickle anew
            future = self.worker.send(parcel, self.settings.forecast, self.settings.timeout)
            sent, pickling, cpu = time.time(), time.thread_time() - cpu, time.thread_time()
            parcel = self.worker.answer(future, self.answer_timeout)
            answered = time.time()
            found = opened_forecast(parcel)
            opened, opening = time.time(), time.thread_time() - cpu
        except (PooltreeError, MemoryError) as error:
            # the scheduler is stopping: the refresh in flight ends with it, not failed
            if self.worker.stopping:
                log.info("forecast refresh ended with the scheduler: %s", error)
                return None
            self.last_error = str(error)
            self.health.failed()
            log.warning("forecast failed: %s", self.last_error)
            return None
        self.latest_parcel = (found, parcel[1])
        self.latest = found
        self.last_error = None
        self.refreshes += 1
        self.last_cost = {
            "state_cpu_seconds": round(copied, 4),
            "state_wall_seconds": round(sending - began, 4),
            "lock_held_seconds": round(cost.held, 4),
            "longest_lock_hold_seconds": round(cost.longest_hold, 4),
            "lock_holds": float(len(cost.holds)),
            "operations_reused": float(self.copies.reused),
            "pickle_cpu_seconds": round(pickling, 4),
            "unpickle_cpu_seconds": round(opening, 4),
            "forecast_wall_seconds": round(answered - sent, 4),
            "events": float(found.events),
        }
        self.health.succeeded(self.last_cost)
        self.health.refreshed(
            {
                "copy": sending - began,
                "pickle": sent - sending,
                "worker": answered - sent,
                "unpickle": opened - answered,
            },
            cost.longest_hold,
        )
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "forecast refreshed: copy %.1f ms CPU (%.1f ms wall; %d holds of the lock, the longest %.1f ms; "
                "%d operations unchanged), pickling %.1f + %.1f ms CPU, worker %.2f s wall, %d operations, "
                "simulated %.0f of %.0f s",
                1000 * copied,
                1000 * (sending - began),
                len(cost.holds),
                1000 * cost.longest_hold,
                self.copies.reused,
                1000 * pickling,
                1000 * opening,
                answered - sent,
                len(state.operations),
                found.horizon if found.simulated is None else found.simulated,
                found.horizon,
            )
            log.debug(
                "forecast phases: copy=%s pickle=%.4f-%.4f worker=%.4f-%.4f unpickle=%.4f-%.4f",
                ",".join(f"{begin:.4f}-{end:.4f}" for begin, end in cost.holds),
                sending,
                sent,
                sent,
                answered,
                answered,
                opened,
            )
        return found

    def read(self, operation: Any = None) -> Forecast | None:
        """The latest forecast (None before the first); a read keeps periodic refreshes going. ``operation``: the
        live operation read (None: none in particular); if it is one a forecast shows (pending or running) and
        was submitted after the latest forecast was made, that forecast is refreshed at once."""
        self.last_read = time.monotonic()
        if not self.settings.enabled:
            return None
        latest = self.latest
        newer = (
            latest is not None
            and operation is not None
            and operation.state in FORECAST_STATES
            and operation.start_time > latest.now
        )
        if latest is None or newer or self._stale():
            self._wanted.set()
        return latest

    def request(self) -> None:
        """Refresh as soon as the refresher is free."""
        self._wanted.set()

    def _period(self) -> float:
        return self.scheduler.update_period * self.settings.refresh_periods

    def _stale(self) -> bool:
        return self.latest is None or self.clock() - self.latest.now >= self._period()

    def start(self) -> None:
        if self._thread is not None or not self.settings.enabled:
            return
        self._stopping.clear()
        self.worker.stopping = False
        self._thread = threading.Thread(target=self._loop, name="forecast-refresher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the worker (our own child, possibly inside a long forecast: not waited for), then the refresher
        (a refresh waiting for the worker returns at once with the pool broken)."""
        self._stopping.set()
        self._wanted.set()
        self.worker.stop()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wanted.wait(timeout=self._period())
            if self._stopping.is_set():
                return
            reading = time.monotonic() - self.last_read < self.settings.idle_after
            if self._wanted.is_set() or (reading and self._stale()):
                backoff = self.health.restart_wait()
                if backoff > 0:  # the worker died: the next one starts after its back-off
                    self._stopping.wait(backoff)
                    continue
                self._wanted.clear()
                try:
                    self.refresh()
                except Exception as error:  # the refresher outlives any one failure
                    self.last_error = f"{type(error).__name__}: {error}"
                    log.exception("forecast refresh failed")
                    self._stopping.wait(self._period())

    # ------------------------------------------------------------------ dry run

    def dry_run(self, operation: OperationState) -> concurrent.futures.Future[Any]:
        """The forecast of the cluster with ``operation`` submitted now (last in every queue), computing in the
        worker: `collect` its future once done (the caller need not hold a thread meanwhile); nothing is kept."""
        if not self.settings.enabled:
            raise PooltreeError(OFF)
        state = self._take_state()
        state = replace(state, operations=(*state.operations, operation))
        return self._send(state, self.settings.forecast)
