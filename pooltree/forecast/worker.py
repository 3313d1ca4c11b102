"""The forecast off the request path: a worker process, refreshed while people look, bounded in time and memory.

`ForecastService` belongs to the live service. A refresh copies the cluster (`take_state`, under the scheduler's
lock, proportional to operations and jobs) on a thread of its own, sends the copy to one worker process and keeps
the answer as ``latest``; readers (``get_operation``, the web pages, the CLI through them) only read ``latest``,
so neither heartbeats nor API calls ever wait for a forecast. The worker is a separate process (spawned, never
forked from the threaded server) so the simulation does not hold the server's GIL; it runs at a lower CPU
priority (``nice`` +10), under an address-space limit (``memory_limit``), and each forecast under a CPU-time
alarm (``timeout``): a forecast over the limit fails with an error kept in ``last_error``, the process stays.
A process that dies (the kernel's OOM killer) is replaced on the next refresh; the error (``last_error``, the
attribute's ``error``) names how it ended: the signal that killed it, or its exit status.

Refreshes are demand-driven: every ``refresh_periods`` fair-share periods while someone has read a forecast in
the last ``idle_after`` seconds, and at once when asked (``request``). An idle scheduler starts no process.
``dry_run`` forecasts one more operation synchronously (on the caller's thread, which waits for the worker).
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import multiprocessing
import os
import pickle
import resource
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pooltree.config import OperationSpec
from pooltree.errors import ConfigError, PooltreeError
from pooltree.forecast.arrivals import ArrivalSettings
from pooltree.forecast.live import CopyCost, DurationHistory, LiveSchedulerView, SubmissionHistory, take_state
from pooltree.forecast.run import Forecast, ForecastSettings, forecast
from pooltree.forecast.state import ClusterState, OperationState

log = logging.getLogger("pooltree.forecast")

_SPECS: dict[tuple[str, int], OperationSpec] = {}
"""The worker process's parsed specs by (operation id, revision), reused across refreshes."""
_SPEC_CACHE_SIZE = 20_000


@dataclass(frozen=True)
class WorkerSettings:
    """How the service runs forecasts."""

    forecast: ForecastSettings = field(
        default_factory=lambda: ForecastSettings(seeds=5, horizon=3600.0, cpu_budget=5.0)
    )
    """The live default: 5 runs of up to one simulated hour within 5 CPU seconds together (at 1,000 busy nodes a
    run costs ~1 s of setup plus ~1 s of CPU per simulated minute, so the budget ends them first: see
    docs/forecast.md)."""
    refresh_periods: int = 30
    """Fair-share periods between refreshes while forecasts are read."""
    idle_after: float = 300.0
    """Seconds after the last read when periodic refreshes stop."""
    timeout: float = 600.0
    """CPU seconds one forecast may take in the worker."""
    memory_limit: int = 2 << 30
    """Bytes of address space of the worker process."""
    niceness: int = 10
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
    return WorkerSettings(
        forecast=ForecastSettings(
            seeds=5, horizon=3600.0, cpu_budget=cpu_budget, arrivals=ArrivalSettings(enabled=arrivals)
        )
    )


OFF = "this scheduler makes no forecasts (pooltree scheduler --forecast-budget 0)"


class ForecastTimeout(PooltreeError):
    """A forecast ran past its CPU-time budget."""


PARENT_CHECK_PERIOD = 1.0
"""Seconds between the worker's checks that the scheduler that started it is still its parent."""


def _exit_with_parent(parent: int) -> None:
    """Worker thread: end the worker once its scheduler is gone (a SIGKILLed scheduler cannot end its pool, and
    the orphaned worker would go on simulating under init). ``PR_SET_PDEATHSIG`` is no fit: it fires when the
    *thread* that spawned the worker ends, and the pool spawns from whichever thread submits."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_PERIOD)
    os._exit(0)


def _worker_init(memory_limit: int, niceness: int, parent: int) -> None:
    """In the worker process: lower priority, bounded address space, the alarm that ends a long forecast, and
    an end with the scheduler that started it."""
    threading.Thread(
        target=_exit_with_parent, args=(parent,), name="forecast-parent-watch", daemon=True
    ).start()
    os.nice(niceness)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = memory_limit if hard == resource.RLIM_INFINITY else min(memory_limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))

    def expired(signum: int, frame: Any) -> None:
        raise ForecastTimeout("the forecast ran past its CPU-time budget")

    signal.signal(signal.SIGPROF, expired)


PICKLE_SLICE = 0.001
"""Seconds of pickling (or unpickling) the server's refresher does before it lets other threads have the
interpreter (see `Parcel`)."""

Parcel = tuple[bytes, tuple[bytes, ...]]
"""A `ClusterState` or a `Forecast` as it crosses to and from the worker: the object without its operations, and
each operation pickled on its own. One ``pickle.dumps`` of a whole state is one call into C that keeps the GIL
throughout (14-33 ms at 300 nodes, every heartbeat on the event loop waiting); item by item, the server's
refresher lets the interpreter go every ``PICKLE_SLICE`` seconds (`_parcel`, `_opened`)."""


def _parcel(head: Any, items: Sequence[Any], yielding: bool) -> Parcel:
    """``head`` and ``items`` pickled; ``yielding``: let other threads run every ``PICKLE_SLICE`` seconds."""
    pickled = []
    deadline = time.perf_counter() + PICKLE_SLICE
    for item in items:
        pickled.append(pickle.dumps(item, pickle.HIGHEST_PROTOCOL))
        if yielding and time.perf_counter() >= deadline:
            time.sleep(0)
            deadline = time.perf_counter() + PICKLE_SLICE
    return pickle.dumps(head, pickle.HIGHEST_PROTOCOL), tuple(pickled)


def _opened(parcel: Parcel, yielding: bool) -> tuple[Any, list[Any]]:
    """A `Parcel`'s head and items (``yielding`` as in `_parcel`)."""
    head, pickled = parcel
    items = []
    deadline = time.perf_counter() + PICKLE_SLICE
    for item in pickled:
        items.append(pickle.loads(item))
        if yielding and time.perf_counter() >= deadline:
            time.sleep(0)
            deadline = time.perf_counter() + PICKLE_SLICE
    return pickle.loads(head), items


def state_parcel(state: ClusterState, yielding: bool = True) -> Parcel:
    """``state`` as it is sent to the worker (its operations one by one)."""
    return _parcel(replace(state, operations=()), state.operations, yielding)


def opened_state(parcel: Parcel) -> ClusterState:
    head, operations = _opened(parcel, yielding=False)
    return replace(head, operations=tuple(operations))


def forecast_parcel(found: Forecast) -> Parcel:
    """``found`` as the worker sends it back (its operations one by one)."""
    return _parcel(replace(found, operations={}), tuple(found.operations.items()), yielding=False)


def opened_forecast(parcel: Parcel, yielding: bool = True) -> Forecast:
    head, operations = _opened(parcel, yielding)
    return replace(head, operations=dict(operations))


def _run_in_worker(
    parcel: Parcel, settings: ForecastSettings, timeout: float
) -> tuple[Parcel | None, str | None]:
    """One forecast inside the worker, under a CPU-time alarm (ITIMER_PROF counts this process's CPU): the state's
    `Parcel` in, the forecast's out, or the error's text (errors cross the process boundary as text: not every
    error pickles)."""
    if len(_SPECS) > _SPEC_CACHE_SIZE:
        _SPECS.clear()
    signal.setitimer(signal.ITIMER_PROF, timeout)
    try:
        return forecast_parcel(forecast(opened_state(parcel), settings, specs=_SPECS)), None
    except MemoryError:
        _SPECS.clear()
        return None, "the forecast ran out of its memory limit"
    except Exception as error:
        return None, f"{type(error).__name__}: {error}"
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


def _exit_reason(code: int | None) -> str:
    """A worker process's exit code in words: the signal that ended it (SIGKILL: the kernel's OOM killer or an
    operator), or its exit status."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _reap(process: Any, timeout: float = 10.0) -> None:
    """Wait (up to ``timeout`` seconds) until the ended worker ``process`` has its exit code.

    The pool's own manager thread joins a broken pool's processes after it fails the futures, so it races this
    thread to ``waitpid``: the loser's ``join`` returns at once with no exit code (``ECHILD``) and the code appears
    when the winner stores it on the same process object."""
    deadline = time.monotonic() + timeout
    process.join(timeout=timeout)
    while process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.01)


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
        self.last_error: str | None = None if self.settings.enabled else OFF
        self.last_read = -float("inf")
        self.refreshes = 0
        self.last_cost: dict[str, float] = {}
        """The last refresh: ``state`` (the copy, in the server: its thread's CPU and wall seconds), ``forecast``
        (the worker's wall time, at its lower priority), and the simulator events it processed."""
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None
        self._workers: list[Any] = []
        """The worker processes of ``_executor`` (their exit codes say why one died)."""
        self._executor_lock = threading.Lock()
        self._copying = threading.Lock()
        """One copy at a time (a refresh's and a dry run's share the histories)."""
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def _on_state(self, operation_id: str, state: str) -> None:
        """The scheduler's state listener (called under its lock): remember a new operation's submission."""
        op = self.scheduler.operations.get(operation_id)
        if op is not None:
            self.submissions.add(op, self.scheduler)

    # ------------------------------------------------------------------ process

    def _pool(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = concurrent.futures.ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_worker_init,
                    initargs=(self.settings.memory_limit, self.settings.niceness, os.getpid()),
                )
            return self._executor

    def _send(self, state: ClusterState, settings: ForecastSettings) -> concurrent.futures.Future[Any]:
        parcel = state_parcel(state)
        try:
            pool = self._pool()
            future = pool.submit(_run_in_worker, parcel, settings, self.settings.timeout)
        except concurrent.futures.process.BrokenProcessPool:
            raise self._died() from None
        with self._executor_lock:  # the pool starts its process on the first submit
            self._workers = list((pool._processes or {}).values()) or self._workers
        return future

    def _died(self) -> PooltreeError:
        """The pool broke: forgotten (the next refresh starts a new process); the error says how it ended."""
        with self._executor_lock:
            self._executor = None
            workers, self._workers = self._workers, []
        for process in workers:
            _reap(process)
        how = ", ".join(_exit_reason(process.exitcode) for process in workers) or "unknown exit"
        log.warning("the forecast worker process died: %s", how)
        return PooltreeError(f"the forecast worker process died ({how}); it restarts")

    @property
    def answer_timeout(self) -> float:
        """Seconds a caller waits for the worker's answer to one forecast (its CPU budget, at low priority)."""
        return self.settings.timeout * 4 + 60

    def collect(self, future: concurrent.futures.Future[Any], timeout: float = 0.0) -> Forecast:
        """The forecast ``future`` (from the worker) holds, waiting up to ``timeout`` seconds; errors as
        `PooltreeError` (``ForecastTimeout`` when it is not done)."""
        return opened_forecast(self._answer(future, timeout))

    def _answer(self, future: concurrent.futures.Future[Any], timeout: float) -> Parcel:
        try:
            found, error = future.result(timeout=timeout)
        except concurrent.futures.process.BrokenProcessPool:
            raise self._died() from None
        except concurrent.futures.TimeoutError:
            raise ForecastTimeout("the forecast worker did not answer in time") from None
        if found is None:
            raise PooltreeError(f"the forecast failed: {error}")
        return found

    def _submit(self, state: ClusterState, settings: ForecastSettings) -> Forecast:
        return self.collect(self._send(state, settings), self.answer_timeout)

    # ------------------------------------------------------------------ refreshes

    def _take_state(self, cost: CopyCost | None = None) -> ClusterState:
        """A copy of the live cluster (one at a time: the histories are the copies' own)."""
        with self._copying:
            return take_state(self.scheduler, self.history, self.clock(), self.submissions, cost)

    def refresh(self) -> Forecast | None:
        """Copy the cluster and forecast it now (on the caller's thread, which waits for the worker). Each phase's
        wall-clock interval is logged (``forecast phases:``; `bench/forecast_live.py` reads them)."""
        cost = CopyCost()
        began, cpu = time.time(), time.thread_time()
        state = self._take_state(cost)
        copied, cpu = time.thread_time() - cpu, time.thread_time()
        sending = time.time()
        try:
            future = self._send(state, self.settings.forecast)
            sent, pickling, cpu = time.time(), time.thread_time() - cpu, time.thread_time()
            parcel = self._answer(future, self.answer_timeout)
            answered = time.time()
            found = opened_forecast(parcel)
            opened, opening = time.time(), time.thread_time() - cpu
        except (PooltreeError, MemoryError) as error:
            self.last_error = str(error)
            log.warning("forecast failed: %s", self.last_error)
            return None
        self.latest = found
        self.last_error = None
        self.refreshes += 1
        self.last_cost = {
            "state_cpu_seconds": round(copied, 4),
            "state_wall_seconds": round(sending - began, 4),
            "lock_held_seconds": round(cost.held, 4),
            "longest_lock_hold_seconds": round(cost.longest_hold, 4),
            "lock_holds": float(len(cost.holds)),
            "pickle_cpu_seconds": round(pickling, 4),
            "unpickle_cpu_seconds": round(opening, 4),
            "forecast_wall_seconds": round(answered - sent, 4),
            "events": float(found.events),
        }
        log.info(
            "forecast refreshed: copy %.1f ms CPU (%.1f ms wall; %d holds of the lock, the longest %.1f ms), "
            "pickling %.1f + %.1f ms CPU, worker %.2f s wall, %d operations, simulated %.0f of %.0f s",
            1000 * copied,
            1000 * (sending - began),
            len(cost.holds),
            1000 * cost.longest_hold,
            1000 * pickling,
            1000 * opening,
            answered - sent,
            len(state.operations),
            found.horizon if found.simulated is None else found.simulated,
            found.horizon,
        )
        log.info(
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

    def read(self) -> Forecast | None:
        """The latest forecast (None before the first); a read keeps periodic refreshes going."""
        self.last_read = time.monotonic()
        if not self.settings.enabled:
            return None
        if self.latest is None or self._stale():
            self._wanted.set()
        return self.latest

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
        self._thread = threading.Thread(target=self._loop, name="forecast-refresher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the worker (our own child, possibly inside a long forecast: not waited for), then the refresher
        (a refresh waiting for the worker returns at once with the pool broken)."""
        self._stopping.set()
        self._wanted.set()
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            processes = list((executor._processes or {}).values())
            executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
            for process in processes:
                process.join(timeout=10)
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
