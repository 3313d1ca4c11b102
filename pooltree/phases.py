"""Explicit timers of the core's phases, as YTsaurus's fair-share update context keeps its own timings.

``SchedulerCore`` and ``Simulation`` take a :class:`PhaseTimes` and wrap each phase of their periodic work in
``with times.phase(name):`` (the core: ``update``, ``unregister``, ``input``, ``fair_share``, ``build``,
``publish``, ``lists``, ``segments``, ``republish``, ``heartbeat``; the simulator: ``period``) and count ``register_operation`` and
``unregister_operation``. Benchmarks read ``seconds`` and ``counts`` (or extend :meth:`PhaseTimes.add`) instead
of patching the code they measure. Without a clock (the default) every phase is the same no-op context.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType

_NO_TIMER: AbstractContextManager[None] = nullcontext()


class _Phase:
    """One timed run of a phase: adds the clock's difference to its phase on exit (also on an exception)."""

    __slots__ = ("name", "start", "times")

    def __init__(self, times: PhaseTimes, name: str) -> None:
        self.times = times
        self.name = name
        self.start = 0.0

    def __enter__(self) -> None:
        self.start = self.times.clock()  # type: ignore[misc]

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.times.add(self.name, self.times.clock() - self.start)  # type: ignore[misc]


class PhaseTimes:
    """Seconds spent in each named phase (``seconds``) and events counted by name (``counts``).

    ``clock`` is ``time.process_time``, ``time.perf_counter`` or any monotonic clock; ``None`` turns timing off.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        return self.clock is not None

    def phase(self, name: str) -> AbstractContextManager[None]:
        """A context that adds its duration to ``seconds[name]`` (a shared no-op when timing is off)."""
        if self.clock is None:
            return _NO_TIMER
        return _Phase(self, name)

    def add(self, name: str, seconds: float) -> None:
        """Record ``seconds`` more of phase ``name`` (called when a phase ends; subclasses may record more)."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def count(self, name: str) -> None:
        """Count one event ``name`` (only while timing is on)."""
        if self.clock is not None:
            self.counts[name] = self.counts.get(name, 0) + 1
