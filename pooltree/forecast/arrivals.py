"""Operations submitted after the moment of the copy: what the cluster's recent past says will come.

A forecast of the cluster left alone is late wherever operations keep arriving: a new operation in another pool
takes capacity the waiting ones were given. The forecast cannot know the submissions to come, but it knows the
ones it saw: every operation submitted in the last ``window`` seconds (`Submission`: when, tree, pool, user,
type, its tasks' job shapes and counts). From them, each seed draws a future of its own:

- **Rate per pool.** A pool that saw ``k`` submissions in the observed window ``T`` (the window, or less when the
  history is younger) receives a Poisson stream whose rate each seed draws from the Gamma posterior of a Poisson
  rate, shape ``k + prior_count`` and scale ``1 / T`` (a pool seen once or twice may be busier or quieter than it
  looked; the spread of the rate goes into the range). Pools that saw no submission receive none.
- **Shapes.** Each arrival copies one of the pool's observed submissions picked at random (user, type, tree, its
  tasks' job resources and counts).
- **Run times.** Its jobs run like the pool's completed jobs (`pooltree.forecast.durations`, the pool's fit with
  the seed's own median; the prior when the pool has none).
- **Spec.** Only the pool and tree: a submission's other options (weight, limits) are not carried.

Arrivals get ids ``~arrival-<seed>-<n>`` (never a real operation id, never shown); a forecast reports only the
operations of the copy. With ``ArrivalSettings(enabled=False)`` or no submission history (``ClusterState
.submissions_since`` None) the forecast is that of the cluster left alone, as before.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pooltree.config import OperationSpec
from pooltree.errors import ConfigError
from pooltree.forecast.durations import DurationSettings, choose
from pooltree.forecast.state import ClusterState, Submission
from pooltree.sim.scenario import SimOperation, SimTask

ARRIVAL_ID = "~arrival-{seed}-{index}"
MAX_ARRIVALS = 20_000
"""Arrivals one seed draws at most over its horizon (a bound on the forecast's cost)."""


@dataclass(frozen=True)
class ArrivalSettings:
    """How future submissions are drawn (see the module docstring)."""

    enabled: bool = False
    """Off by default: at 1,000 nodes with 2,000 submissions an hour the capacity hand-over cannot carry the
    drawn arrivals through an hour within the live CPU budget (it covers about a minute), and neither back-test
    workload gained from them (docs/forecast.md)."""
    window: float = 3600.0
    """Seconds of history the rates and shapes come from (the newest)."""
    prior_count: float = 0.5
    """Pseudo-submissions added to each seen pool's count (the Gamma prior's shape; Jeffreys' prior: 0.5)."""
    min_history: float = 60.0
    """Seconds of history needed before any rate is estimated (a younger history draws no arrivals)."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.window) or not 60.0 <= self.window <= 7 * 86400:
            raise ConfigError(
                "forecast.arrivals.window", f"must be seconds in [60, 7 days], got {self.window!r}"
            )
        if not math.isfinite(self.prior_count) or not 0.0 <= self.prior_count <= 100.0:
            raise ConfigError(
                "forecast.arrivals.prior_count", f"must be a number in [0, 100], got {self.prior_count!r}"
            )
        if not math.isfinite(self.min_history) or not 0.0 <= self.min_history <= self.window:
            raise ConfigError(
                "forecast.arrivals.min_history", f"must be seconds in [0, window], got {self.min_history!r}"
            )


@dataclass(frozen=True)
class ArrivalModel:
    """What the history says, per (tree, pool): the submissions in the observed window and its length."""

    observed: float
    """Seconds of history the rates are measured over (0: no arrivals)."""
    pools: Mapping[tuple[str, str], tuple[Submission, ...]]
    prior_count: float

    def rate_per_hour(self) -> float:
        """Submissions per hour over all pools (what the attribute states as the assumption)."""
        if self.observed <= 0:
            return 0.0
        return sum(len(seen) for seen in self.pools.values()) * 3600.0 / self.observed


def arrival_model(
    submissions: Sequence[Submission], since: float | None, now: float, settings: ArrivalSettings
) -> ArrivalModel:
    """The submissions of the last ``window`` seconds (not before ``since``, where the history begins) by pool."""
    if not settings.enabled or since is None:
        return ArrivalModel(0.0, {}, settings.prior_count)
    begin = max(since, now - settings.window)
    observed = now - begin
    if observed < settings.min_history:
        return ArrivalModel(0.0, {}, settings.prior_count)
    pools: dict[tuple[str, str], list[Submission]] = {}
    for submission in submissions:
        if begin <= submission.time <= now and submission.tasks:
            pools.setdefault((submission.tree, submission.pool), []).append(submission)
    return ArrivalModel(
        observed, {key: tuple(seen) for key, seen in sorted(pools.items())}, settings.prior_count
    )


def draw_arrivals(
    model: ArrivalModel,
    seed: int,
    horizon: float,
    pool_durations: Mapping[str, Sequence[float]],
    durations: DurationSettings,
    specs: dict[tuple[str, str], OperationSpec],
) -> list[SimOperation]:
    """One seed's future submissions in ``(0, horizon)``, ordered by time (see the module docstring); ``specs``
    caches the parsed spec per (tree, pool)."""
    if model.observed <= 0:
        return []
    found: list[SimOperation] = []
    for (tree, pool), seen in model.pools.items():
        rng = random.Random(f"{seed}/arrivals/{tree}/{pool}")
        rate = rng.gammavariate(len(seen) + model.prior_count, 1.0 / model.observed)
        if rate <= 0:
            continue
        spec = specs.get((tree, pool))
        if spec is None:
            raw: dict[str, Any] = {"pool": pool, "pool_trees": [tree]}
            spec = specs[(tree, pool)] = OperationSpec.parse(raw, f"forecast.arrivals.{tree}.{pool}")
        duration = choose((), pool_durations.get(pool, ()), durations).for_seed(rng)
        at = rng.expovariate(rate)
        while at < horizon and len(found) < MAX_ARRIVALS:
            template = seen[rng.randrange(len(seen))]
            found.append(
                SimOperation(
                    "",
                    template.user,
                    template.type,
                    at,
                    spec,
                    {"pool": pool, "pool_trees": [tree]},
                    tuple(
                        SimTask(task.name, task.job_count, task.resources, duration)
                        for task in template.tasks
                        if task.job_count > 0
                    ),
                )
            )
            at += rng.expovariate(rate)
    found.sort(key=lambda op: op.submit_time)
    return [
        replace(op, id=ARRIVAL_ID.format(seed=seed, index=index))
        for index, op in enumerate(found)
        if op.tasks
    ]


def is_arrival(operation_id: str) -> bool:
    return operation_id.startswith("~arrival-")


class Arrivals:
    """The arrival model of one cluster state, and each seed's draw of it (drawn once per seed)."""

    def __init__(self, state: ClusterState, settings: ArrivalSettings, durations: DurationSettings) -> None:
        self.model = arrival_model(state.submissions, state.submissions_since, state.now, settings)
        self.window = settings.window
        self._pool_durations = state.pool_durations
        self._durations = durations
        self._specs: dict[tuple[str, str], OperationSpec] = {}
        self._drawn: dict[tuple[int, float], list[SimOperation]] = {}

    def draw(self, seed: int, horizon: float) -> list[SimOperation]:
        key = (seed, horizon)
        found = self._drawn.get(key)
        if found is None:
            found = self._drawn[key] = draw_arrivals(
                self.model, seed, horizon, self._pool_durations, self._durations, self._specs
            )
        return found

    def assumption(self) -> dict[str, Any]:
        """What the forecast assumed about submissions to come (the attribute's ``assumed_arrivals``)."""
        return {
            "operations_per_hour": round(self.model.rate_per_hour(), 3),
            "pools": len(self.model.pools),
            "observed_seconds": round(self.model.observed, 3),
            "window": self.window,
        }
