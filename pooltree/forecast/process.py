"""The forecast's worker process: spawned from the server, bounded, watched, restarted with back-off.

`WorkerProcess` owns one spawned process (a ``ProcessPoolExecutor`` of one worker; spawned, never forked from the
threaded server) so the simulation does not hold the server's GIL. The process runs at a lower CPU priority
(``nice`` +10), under an address-space limit, each forecast under a CPU-time alarm (a forecast over it fails with
an error, the process stays), and ends with the scheduler that started it.

What crosses the pipe is a `Parcel`: the object without its operations (a state also without its nodes and
submissions), and each of those pickled on its own, so
that the server's thread pickling it lets the interpreter go every ``PICKLE_SLICE`` (one ``pickle.dumps`` of a
whole state keeps the GIL throughout: 14-33 ms at 300 nodes, with every heartbeat on the event loop waiting).

A process that dies (the kernel's OOM killer, an operator's kill -9, a crash) is seen at once by a watcher thread
waiting on its sentinel, also while no forecast runs: the death is noted in `WorkerHealth` (the alert, the
metrics, the back-off before the next start: `pooltree.forecast.health`), futures in flight fail with an error
naming how it ended (the signal, or the exit status), and the next `send` after the back-off starts a new process.
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import resource
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pooltree.config import OperationSpec
from pooltree.errors import PooltreeError
from pooltree.forecast.health import WorkerHealth
from pooltree.forecast.run import Forecast, ForecastSettings, forecast
from pooltree.forecast.state import ClusterState

log = logging.getLogger("pooltree.forecast")

_SPECS: dict[tuple[str, int], OperationSpec] = {}
"""The worker process's parsed specs by (operation id, revision), reused across refreshes."""
_SPEC_CACHE_SIZE = 20_000


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
"""A `ClusterState` or a `Forecast` as it crosses to and from the worker (see the module docstring)."""


def _sliced(work: Callable[[Any], Any], items: Iterable[Any], yielding: bool) -> list[Any]:
    """``work(item)`` of every item; ``yielding``: let other threads have the interpreter every ``PICKLE_SLICE``
    seconds (see `Parcel`)."""
    done = []
    deadline = time.perf_counter() + PICKLE_SLICE
    for item in items:
        done.append(work(item))
        if yielding and time.perf_counter() >= deadline:
            time.sleep(0)
            deadline = time.perf_counter() + PICKLE_SLICE
    return done


def _pickled(item: Any) -> bytes:
    return pickle.dumps(item, pickle.HIGHEST_PROTOCOL)


def _parcel(head: Any, items: Sequence[Any], yielding: bool) -> Parcel:
    """``head`` and ``items`` pickled (``yielding`` as in `_sliced`)."""
    return _pickled(head), tuple(_sliced(_pickled, items, yielding))


def _opened(parcel: Parcel, yielding: bool) -> tuple[Any, list[Any]]:
    """A `Parcel`'s head and items (``yielding`` as in `_sliced`)."""
    head, pickled = parcel
    return pickle.loads(head), _sliced(pickle.loads, pickled, yielding)


def state_parcel(
    state: ClusterState, kept: dict[str, tuple[Any, bytes]] | None = None, yielding: bool = True
) -> Parcel:
    """``state`` as it is sent to the worker: its operations, then its nodes and its recent submissions one by one
    (in one ``pickle.dumps`` the thousand nodes and ten thousand submissions of a loaded cluster kept the GIL for
    160 ms: session 28's ``live_queue --split``, every API request under way waited). ``kept``: operation id →
    (the copy, its bytes) of the last parcel, reused for a copy that is the same object
    (`pooltree.forecast.live.OperationCopies` keeps unchanged operations' copies); replaced by this parcel's."""
    head = (replace(state, operations=(), nodes=(), submissions=()), len(state.operations), len(state.nodes))
    rest = (*state.nodes, *state.submissions)
    if kept is None:
        return _parcel(head, (*state.operations, *rest), yielding)

    def pickled(op: Any) -> tuple[Any, bytes]:
        found = kept.get(op.id)
        return found if found is not None and found[0] is op else (op, _pickled(op))

    made = _sliced(pickled, state.operations, yielding)
    kept.clear()
    kept.update((op.id, found) for op, found in zip(state.operations, made, strict=True))
    return _pickled(head), (*(found[1] for found in made), *_sliced(_pickled, rest, yielding))


def opened_state(parcel: Parcel) -> ClusterState:
    (head, operations, nodes), items = _opened(parcel, yielding=False)
    return replace(
        head,
        operations=tuple(items[:operations]),
        nodes=tuple(items[operations : operations + nodes]),
        submissions=tuple(items[operations + nodes :]),
    )


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


REAP_TIMEOUT = 10.0
"""Seconds a dead worker's exit code is waited for."""


def _reap(process: Any, timeout: float = REAP_TIMEOUT) -> None:
    """Wait (up to ``timeout`` seconds) until the ended worker ``process`` has its exit code.

    The pool's own manager thread joins a broken pool's processes after it fails the futures, so it races this
    thread to ``waitpid``: the loser's ``join`` returns at once with no exit code (``ECHILD``) and the code appears
    when the winner stores it on the same process object."""
    deadline = time.monotonic() + timeout
    process.join(timeout=timeout)
    while process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.01)


STOPPED = "stopped"
"""`_Death.how` of a worker that `WorkerProcess.stop` ended."""


@dataclass
class _Death:
    how: str = ""
    known: threading.Event = field(default_factory=threading.Event)


class WorkerDied(PooltreeError):
    """The worker process died (or is waiting out its back-off before a restart)."""


class WorkerProcess:
    """One forecast worker process at a time (see the module docstring); ``clock``: the service's time, for the
    deaths noted in ``health``."""

    def __init__(
        self,
        memory_limit: int,
        niceness: int,
        health: WorkerHealth,
        clock: Callable[[], float],
        on_death: Callable[[], None] | None = None,
    ) -> None:
        self.memory_limit = memory_limit
        self.niceness = niceness
        self.health = health
        self.clock = clock
        self.on_death = on_death
        """Called once per death, after it is noted (the service then replaces the worker after its back-off)."""
        self.stopping = False
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None
        self._processes: list[Any] = []
        """The processes of ``_executor`` (their exit codes say why one died)."""
        self._lock = threading.Lock()
        self._deaths: weakref.WeakKeyDictionary[Any, _Death] = weakref.WeakKeyDictionary()
        """Executor → how its process ended, once the thread that saw the death first has reaped it."""
        self._sent: weakref.WeakKeyDictionary[concurrent.futures.Future[Any], Any] = (
            weakref.WeakKeyDictionary()
        )
        """Future → the executor it was sent to (an error names that one's death)."""

    @property
    def pid(self) -> int | None:
        """The running worker's process id (None: none runs)."""
        with self._lock:
            return self._processes[0].pid if self._processes else None

    def _started(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                wait = self.health.restart_wait()
                if wait > 0:
                    raise WorkerDied(
                        f"the forecast worker process died ({self.health.last_reason}); it restarts in {wait:.1f} s"
                    )
                self._executor = concurrent.futures.ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_worker_init,
                    initargs=(self.memory_limit, self.niceness, os.getpid()),
                )
                self.health.restarted()
            return self._executor

    def send(
        self, parcel: Parcel, settings: ForecastSettings, timeout: float
    ) -> concurrent.futures.Future[Any]:
        """Start a forecast of the state ``parcel`` in the worker (a new process if none runs)."""
        executor = self._started()
        try:
            future = executor.submit(_run_in_worker, parcel, settings, timeout)
        except concurrent.futures.process.BrokenProcessPool:
            raise self._died(executor) from None
        self._sent[future] = executor
        with self._lock:  # the executor starts its process on the first submit
            if executor is self._executor and not self._processes:
                self._processes = list((executor._processes or {}).values())
                threading.Thread(
                    target=self._watch,
                    args=(executor, self._processes),
                    name="forecast-worker-watch",
                    daemon=True,
                ).start()
        return future

    def answer(self, future: concurrent.futures.Future[Any], timeout: float) -> Parcel:
        """The forecast's `Parcel` ``future`` holds, waiting up to ``timeout`` seconds; errors as `PooltreeError`
        (``ForecastTimeout`` when it is not done, `WorkerDied`)."""
        try:
            found, error = future.result(timeout=timeout)
        except (concurrent.futures.process.BrokenProcessPool, concurrent.futures.CancelledError):
            raise self._died(self._sent.get(future)) from None
        except concurrent.futures.TimeoutError:
            raise ForecastTimeout("the forecast worker did not answer in time") from None
        if found is None:
            raise PooltreeError(f"the forecast failed: {error}")
        return found

    def _watch(self, executor: Any, processes: list[Any]) -> None:
        """Watcher thread: wait until one of ``processes`` ends (its sentinel; no reaping here: the executor's own
        thread reaps it), then note the death unless the service is stopping."""
        multiprocessing.connection.wait([process.sentinel for process in processes])
        if not self.stopping:
            self._died(executor)

    def _died(self, executor: Any) -> WorkerDied:
        """``executor``'s process died: forgotten (the next send after the back-off starts a new one), the death
        noted once (by whoever sees it first: the watcher, a send, an answer); the error says how it ended."""
        with self._lock:
            first = executor is not None and executor is self._executor
            if first:
                self._executor = None
                processes, self._processes = self._processes, []
            noted = self._deaths.setdefault(executor, _Death()) if executor is not None else _Death()
        if not first:  # another thread notes it (or `stop` ended it): its reason, once known
            noted.known.wait(REAP_TIMEOUT + 5)
            if noted.how == STOPPED:
                return WorkerDied("the forecast worker process was stopped with the scheduler")
            return WorkerDied(f"the forecast worker process died ({noted.how or 'unknown exit'})")
        for process in processes:
            _reap(process)
        how = ", ".join(_exit_reason(process.exitcode) for process in processes) or "unknown exit"
        noted.how = how
        noted.known.set()
        delay = self.health.died(how, self.clock())
        executor.shutdown(wait=False)  # its own thread fails the futures in flight (BrokenProcessPool)
        log.warning("the forecast worker process died: %s; a new one may start in %.1f s", how, delay)
        if self.on_death is not None:
            self.on_death()
        return WorkerDied(f"the forecast worker process died ({how}); it restarts in {delay:.1f} s")

    def stop(self) -> None:
        """End the worker (our own child, possibly inside a long forecast: not waited for)."""
        self.stopping = True
        with self._lock:
            executor, self._executor = self._executor, None
            processes, self._processes = self._processes, []
            if executor is not None:  # a refresh waiting on it hears at once that it was stopped, not died
                stopped = self._deaths.setdefault(executor, _Death())
                stopped.how = STOPPED
                stopped.known.set()
        if executor is not None:
            processes = list((executor._processes or {}).values()) or processes
            executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
            for process in processes:
                process.join(timeout=10)
