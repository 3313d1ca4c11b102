"""Job memory statistics with YTsaurus names, and their per-operation aggregation.

Per job (bytes; the ``cumulative_*`` variants are bytes × seconds, value × job duration):
``user_job/memory_reserve``, ``user_job/max_memory``, ``user_job/memory_limit``, ``job_proxy/memory_reserve``,
``job_proxy/max_memory``, ``job_proxy/estimated_memory`` and ``user_job/cumulative_memory_reserve``,
``user_job/cumulative_max_memory``, ``job_proxy/cumulative_memory_reserve``, ``job_proxy/cumulative_max_memory``,
``job_proxy/cumulative_estimated_memory``.

Per operation, :class:`JobStatistics` keeps for every (path, job state, job type) a summary of
``sum, count, min, max, last`` and renders it two ways:

* ``flat()``: ``{"user_job/max_memory": {"sum", "count", "min", "max", "last"}}`` over the chosen states/types;
* ``nested()``: YTsaurus's ``job_statistics`` shape,
  ``{"user_job": {"max_memory": {"$": {"completed": {"map": {"sum", "count", "min", "max", "last"}}}}}}``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pooltree.controllers.memory import JobMemoryReserve
from pooltree.errors import ConfigError

MEMORY_STATISTICS: tuple[str, ...] = (
    "user_job/memory_reserve",
    "user_job/max_memory",
    "user_job/memory_limit",
    "job_proxy/memory_reserve",
    "job_proxy/max_memory",
    "job_proxy/estimated_memory",
)
CUMULATIVE_STATISTICS: dict[str, str] = {
    "user_job/cumulative_memory_reserve": "user_job/memory_reserve",
    "user_job/cumulative_max_memory": "user_job/max_memory",
    "job_proxy/cumulative_memory_reserve": "job_proxy/memory_reserve",
    "job_proxy/cumulative_max_memory": "job_proxy/max_memory",
    "job_proxy/cumulative_estimated_memory": "job_proxy/estimated_memory",
}
JOB_STATES: tuple[str, ...] = ("completed", "failed", "aborted", "lost", "running")


def _bytes(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(name, f"expected a finite number >= 0, got {value!r}")
    return float(value)


def job_memory_statistics(
    reserve: JobMemoryReserve,
    user_job_max_memory: float,
    job_proxy_max_memory: float,
    duration: float,
) -> dict[str, float]:
    """One job's memory statistics from the reserve it ran with, its measured peaks and its duration (s)."""
    duration = _bytes(duration, "duration")
    stats = {
        "user_job/memory_reserve": float(round(reserve.user_job_memory_reserve)),
        "user_job/max_memory": _bytes(user_job_max_memory, "user_job/max_memory"),
        "user_job/memory_limit": float(reserve.memory_limit),
        "job_proxy/memory_reserve": float(round(reserve.job_proxy_memory_reserve)),
        "job_proxy/max_memory": _bytes(job_proxy_max_memory, "job_proxy/max_memory"),
        "job_proxy/estimated_memory": float(reserve.job_proxy_estimate),
    }
    for cumulative, base in CUMULATIVE_STATISTICS.items():
        stats[cumulative] = stats[base] * duration
    return stats


@dataclass
class Summary:
    """YTsaurus summary of one statistic: sum, count, min, max and the last value added."""

    sum: float = 0.0
    count: int = 0
    min: float = math.inf
    max: float = -math.inf
    last: float = 0.0

    def add(self, value: float) -> None:
        self.sum += value
        self.count += 1
        self.min = min(self.min, value)
        self.max = max(self.max, value)
        self.last = value

    def merge(self, other: Summary) -> None:
        """Fold another summary in (``last`` becomes the other's, as if its values came later)."""
        if other.count == 0:
            return
        self.sum += other.sum
        self.count += other.count
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.last = other.last

    def to_dict(self) -> dict[str, float | int]:
        return {"sum": self.sum, "count": self.count, "min": self.min, "max": self.max, "last": self.last}


class JobStatistics:
    """Per-operation aggregation of job statistics by path, job state and job type."""

    def __init__(self) -> None:
        self._summaries: dict[tuple[str, str, str], Summary] = {}

    def add_job(
        self, statistics: Mapping[str, float], *, state: str = "completed", job_type: str = "map"
    ) -> None:
        """Add one finished (or running) job's statistics."""
        if state not in JOB_STATES:
            raise ConfigError("state", f"must be one of {', '.join(JOB_STATES)}, got {state!r}")
        if not isinstance(job_type, str) or not job_type:
            raise ConfigError("job_type", f"expected a non-empty string, got {job_type!r}")
        for path, value in statistics.items():
            if not isinstance(path, str) or not path or path.startswith("/") or "$" in path:
                raise ConfigError(
                    "statistics", f"bad statistic path {path!r} (use names like user_job/max_memory)"
                )
            number = float(value) if not isinstance(value, bool) else math.nan
            if not math.isfinite(number):
                raise ConfigError(f"statistics.{path}", f"expected a finite number, got {value!r}")
            self._summaries.setdefault((path, state, job_type), Summary()).add(number)

    def summary(
        self, path: str, *, states: Iterable[str] | None = None, job_types: Iterable[str] | None = None
    ) -> Summary:
        """One path's summary over the chosen states and job types (all when ``None``)."""
        state_set = set(states) if states is not None else None
        type_set = set(job_types) if job_types is not None else None
        total = Summary()
        for (p, state, job_type), summary in sorted(self._summaries.items()):
            if (
                p == path
                and (state_set is None or state in state_set)
                and (type_set is None or job_type in type_set)
            ):
                total.merge(summary)
        return total

    def paths(self) -> list[str]:
        return sorted({path for path, _, _ in self._summaries})

    def flat(
        self, *, states: Iterable[str] | None = None, job_types: Iterable[str] | None = None
    ) -> dict[str, dict[str, float | int]]:
        """``{path: {sum, count, min, max, last}}`` aggregated over the chosen states and job types."""
        states = list(states) if states is not None else None
        job_types = list(job_types) if job_types is not None else None
        out: dict[str, dict[str, float | int]] = {}
        for path in self.paths():
            summary = self.summary(path, states=states, job_types=job_types)
            if summary.count:
                out[path] = summary.to_dict()
        return out

    def nested(self) -> dict[str, Any]:
        """YTsaurus ``job_statistics`` shape: path components, then ``$``, job state, job type, summary."""
        out: dict[str, Any] = {}
        for (path, state, job_type), summary in sorted(self._summaries.items()):
            node = out
            for part in path.split("/"):
                node = node.setdefault(part, {})
            node.setdefault("$", {}).setdefault(state, {})[job_type] = summary.to_dict()
        return out
