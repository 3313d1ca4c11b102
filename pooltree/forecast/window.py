"""Completed run times kept as a start window: every job that started since a moment and completed, bounded.

What the duration model learns from must be a fair sample of the jobs. The newest *completions* are not one:
an operation's jobs start together and end in order of their run times, so the last completions of a batch are
its longest jobs (on the 200-node day slice a pool's newest 256 completions had a median of 600 s for a true
337 s, and queued operations were forecast to start far too late). A window by *start* time is fair: of the jobs
that started since ``since``, those that completed are kept (every one of them), and those still running are
censored observations (`pooltree.forecast.durations`); together they are every job started in the window, the
short and the long alike. When more than ``kept`` completed, the earliest-started are dropped and ``since``
moves to the earliest start kept; a completion of a job that started before ``since`` is not added (its
siblings of that time are gone: keeping it alone would keep only the long ones). Jobs that started at the same
moment (a node's slots filled by one heartbeat) leave the window together: dropping only some of them would drop
the ones that completed first, the short ones, while their long siblings stay in (kept, or censored while they
run), and every pool's window would lean long (on the 200-node day slice its fitted medians sat 2-3% above the
true one).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable


class StartWindow:
    """Run times of completed jobs that started at or after ``since`` (-inf: every one), at most ``kept``."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self.since = -math.inf
        self._jobs: list[tuple[float, float]] = []
        """(start time, run time), a heap by start time."""

    def add(self, start_time: float, run_time: float) -> None:
        if start_time < self.since:
            return
        heapq.heappush(self._jobs, (start_time, run_time))
        if len(self._jobs) > self.kept:
            dropped, _ = heapq.heappop(self._jobs)
            while self._jobs and self._jobs[0][0] <= dropped:  # its siblings of the same start go too
                heapq.heappop(self._jobs)
            self.since = self._jobs[0][0] if self._jobs else math.nextafter(dropped, math.inf)

    def run_times(self) -> tuple[float, ...]:
        """The kept run times in order of start."""
        return tuple(run_time for _, run_time in sorted(self._jobs))

    def __len__(self) -> int:
        return len(self._jobs)


def start_window(jobs: Iterable[tuple[float, float]], kept: int) -> tuple[tuple[float, ...], float]:
    """``jobs`` ((start time, run time) of completed jobs) as `StartWindow` would keep them, and its ``since``."""
    window = StartWindow(kept)
    for start_time, run_time in sorted(jobs):
        window.add(start_time, run_time)
    return window.run_times(), window.since


def in_window(elapsed: Iterable[tuple[float, float]], since: float) -> list[float]:
    """The elapsed times of running jobs ((start time, elapsed)) that started at or after ``since``: the censored
    observations that belong with a window's completed jobs."""
    return [seconds for start_time, seconds in elapsed if start_time >= since]
