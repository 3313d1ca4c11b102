"""Job durations the forecast assumes: learned from what the cluster observed, with their spread.

A task's jobs are modelled as lognormal: the run times of its own completed jobs when it has some; else those of
its pool's completed jobs (finished operations included); else the cluster's (every pool's); else a
configurable prior. The median is the geometric mean of the observations and the spread their standard
deviation in log space (one observation: the default spread). Each seed of a forecast draws its own median
around the observed one (the uncertainty of a median estimated from ``n`` jobs: sigma / sqrt(n); the prior's
full spread), so a range over seeds covers both the spread of single jobs and how little is known about them;
the part of that uncertainty an estimate shares with others (a pool's fit its queued operations lean on) is
drawn once per seed for all of them (`DurationFit.shared`). A running job's remaining time is drawn from the
task's distribution given that it has already run ``elapsed`` seconds (a job that ran long is likely long).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from pooltree.errors import ConfigError
from pooltree.sim.scenario import Distribution

_NORMAL = NormalDist()
_MIN_SECONDS = 0.001


@dataclass(frozen=True)
class DurationSettings:
    """The prior and the spreads of the duration model (seconds; sigmas in log space)."""

    prior_median: float = 600.0
    """Median job run time when neither the task nor its pool has a completed job."""
    prior_sigma: float = 1.0
    """Spread of single jobs and of the median under the prior."""
    default_sigma: float = 0.5
    """Spread of single jobs learned from one observation."""
    min_sigma: float = 0.05
    """Lower bound of a learned spread (equal observations still leave some doubt)."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.prior_median) or self.prior_median <= 0:
            raise ConfigError(
                "forecast.prior_median", f"must be a positive number of seconds, got {self.prior_median!r}"
            )
        for name in ("prior_sigma", "default_sigma", "min_sigma"):
            value = getattr(self, name)
            if not math.isfinite(value) or not 0 <= value <= 5:
                raise ConfigError(f"forecast.{name}", f"must be a number in [0, 5], got {value!r}")


@dataclass(frozen=True)
class DurationFit:
    """A task's job run times: lognormal ``median`` and ``sigma`` from ``count`` observations of ``source``."""

    median: float
    sigma: float
    count: int
    source: str
    """``operation`` (the task's own jobs), ``pool`` (its pool's jobs), ``cluster`` (every pool's jobs) or
    ``prior``."""
    doubt: float | None = None
    """Log-space spread of the median each seed draws for this fit alone (None: ``sigma / sqrt(count)``, the
    prior's ``sigma``)."""
    shared: tuple[tuple[str, float], ...] = ()
    """Log-space spreads of the median shared with other fits, as (estimate, spread): the part of its doubt that
    comes from an estimate other tasks lean on too (their pool's fit, the cluster's). A seed draws one normal
    per estimate for all of them (`shared_normal`): if a pool's jobs are shorter than its fit says, every queued
    operation of that pool is shorter, and a chain of them ends earlier by the sum, not by an average."""
    key: str = ""
    """The estimate this fit is, for fits that lean on it (``pool/<name>``, ``cluster``; empty: a task's own)."""

    def own_doubt(self) -> float:
        if self.doubt is not None:
            return self.doubt
        return self.sigma / math.sqrt(self.count) if self.source != "prior" else self.sigma

    def total_doubt(self) -> float:
        """Log-space spread of the median over all its parts (own and shared)."""
        return math.sqrt(self.own_doubt() ** 2 + sum(spread * spread for _, spread in self.shared))

    def as_estimate(self, own: float = 0.0) -> DurationFit:
        """This fit given to a task without jobs of its own: all its doubt shared under ``key`` (every such task
        draws the same median in a seed), ``own``: the spread of a task around it (tasks differ from their
        pool)."""
        if not self.key:  # nobody else leans on it: its doubt stays each task's own
            return DurationFit(
                self.median,
                self.sigma,
                self.count,
                self.source,
                math.hypot(own, self.own_doubt()),
                self.shared,
            )
        shared = (*self.shared, (self.key, self.own_doubt()))
        return DurationFit(self.median, self.sigma, self.count, self.source, own, shared)

    def for_seed(self, rng: random.Random, seed: int | None = None) -> Distribution:
        """The distribution one seed assumes: the median drawn around the observed one (its own part from
        ``rng``, its shared parts the same for every fit of ``seed``; without ``seed`` from ``rng`` too)."""
        doubt = self.own_doubt()
        shift = doubt * rng.gauss(0.0, 1.0) if doubt > 0 else 0.0
        for estimate, spread in self.shared:
            if spread > 0:
                shift += spread * (rng.gauss(0.0, 1.0) if seed is None else shared_normal(seed, estimate))
        median = self.median * math.exp(shift)
        if self.sigma <= 0:
            return Distribution("fixed", median)
        return Distribution("lognormal", median, self.sigma)


@functools.lru_cache(maxsize=4096)
def shared_normal(seed: int, estimate: str) -> float:
    """The standard normal ``seed`` draws for ``estimate`` (a pure function: one value per seed and estimate)."""
    return random.Random(f"{seed}/shared/{estimate}").gauss(0.0, 1.0)


_AS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_AS_P = 0.3275911
_GRID = 161
_CENSORED_BINS = 32
_JOINT_GRID = 61
_SIGMA_GRID = 16
_JOINT_BINS = 16
_MAX_SIGMA = 3.0


def _log_survival(z: np.ndarray) -> np.ndarray:
    """log P(Z > z) of a standard normal (Abramowitz-Stegun 7.1.26 for erfc, |error| < 1.5e-7, taken in log
    space so that far tails stay finite)."""
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + _AS_P * x)
    poly = t * (_AS[0] + t * (_AS[1] + t * (_AS[2] + t * (_AS[3] + t * _AS[4]))))
    log_tail = math.log(0.5) + np.log(poly) - x * x  # log(0.5 * erfc(|z| / sqrt 2))
    return np.where(z >= 0, log_tail, np.log1p(-np.exp(log_tail)))


def _censored_median(logs: Sequence[float], censored: Sequence[float], sigma: float) -> float:
    """The maximum-likelihood log median of a lognormal with spread ``sigma`` from complete run times
    (``logs``) and jobs still running after ``censored`` log seconds (right-censored observations), on a grid."""
    done = np.asarray(logs, dtype=float)
    cut = np.sort(np.asarray(censored, dtype=float))
    weights = np.ones(len(cut))
    if len(cut) > _CENSORED_BINS:  # equal-count bins: each bin's mean with the bin's weight
        parts = np.array_split(cut, _CENSORED_BINS)
        cut = np.array([part.mean() for part in parts])
        weights = np.array([float(len(part)) for part in parts])
    low = min(done.min(), cut.min()) - 3.0 * sigma
    high = max(done.max(), cut.max()) + 6.0 * sigma
    grid = np.linspace(low, high, _GRID)
    likelihood = -((done[None, :] - grid[:, None]) ** 2).sum(axis=1) / (2.0 * sigma * sigma)
    likelihood += (_log_survival((cut[None, :] - grid[:, None]) / sigma) * weights[None, :]).sum(axis=1)
    return float(grid[int(np.argmax(likelihood))])


def censored_fit(logs: Sequence[float], censored: Sequence[float], min_sigma: float) -> tuple[float, float]:
    """The maximum-likelihood (log median, sigma) of a lognormal from complete run times (``logs``) and jobs still
    running after ``censored`` log seconds, on a grid. Fitting the
    spread together with the median matters: the jobs that completed so far are the short ones (a long job is
    still running), so their own spread and median are both too small."""
    done = np.asarray(logs, dtype=float)
    count = float(len(done))
    first = float(done.sum())
    second = float((done * done).sum())
    cut = np.sort(np.asarray(censored, dtype=float))
    weights = np.ones(len(cut))
    if len(cut) > _JOINT_BINS:
        parts = np.array_split(cut, _JOINT_BINS)
        cut = np.array([part.mean() for part in parts])
        weights = np.array([float(len(part)) for part in parts])
    spread = float(done.std()) if len(done) > 1 else 1.0
    low = min(float(done.min()), float(cut.min())) - 2.0 * spread
    high = max(float(done.max()), float(cut.max())) + 4.0 * max(spread, 0.5)
    mus = np.linspace(low, high, _JOINT_GRID)
    sigmas = np.geomspace(max(min_sigma, 0.02), _MAX_SIGMA, _SIGMA_GRID)
    mu, sigma = _grid_best(mus, sigmas, count, first, second, cut, weights)
    # finer grids around the best point of the one before (one step of it each way): the first grid's steps are
    # 30% in the spread, the second's still 5.6% (a pool's fit of a true 0.6 landed on 0.583 or 0.616, and the
    # longest of 50 jobs moves by 4% with it), the third's 1%
    mu_step = float(mus[1] - mus[0])
    sigma_step = float(sigmas[1] / sigmas[0])
    for _ in range(2):
        mus = np.linspace(mu - mu_step, mu + mu_step, 21)
        sigmas = np.geomspace(max(sigma / sigma_step, min_sigma, 0.02), sigma * sigma_step, 11)
        mu, sigma = _grid_best(mus, sigmas, count, first, second, cut, weights)
        mu_step = float(mus[1] - mus[0])
        sigma_step = float(sigmas[1] / sigmas[0])
    return mu, sigma


def _grid_best(
    mus: np.ndarray,
    sigmas: np.ndarray,
    count: float,
    first: float,
    second: float,
    cut: np.ndarray,
    weights: np.ndarray,
) -> tuple[float, float]:
    """The grid point of the largest censored lognormal log-likelihood (``count``, ``first``, ``second``: the
    weighted count, sum and sum of squares of the complete log run times)."""
    mu = mus[None, :]
    sigma = sigmas[:, None]
    likelihood = -count * np.log(sigma) - (second - 2.0 * mu * first + count * mu * mu) / (
        2.0 * sigma * sigma
    )
    z = (cut[None, None, :] - mu[:, :, None]) / sigma[:, :, None]
    likelihood = likelihood + (_log_survival(z) * weights[None, None, :]).sum(axis=2)
    row, column = np.unravel_index(int(np.argmax(likelihood)), likelihood.shape)
    return float(mus[column]), float(sigmas[row])


def fit(
    values: Sequence[float],
    source: str,
    settings: DurationSettings,
    censored: Sequence[float] = (),
) -> DurationFit:
    """The lognormal fit of observed run times (at least one), with ``censored``: run times so far of the jobs
    still running (a job running for 600 s says the median is likely not 100 s). With two or more observations
    the median and the spread are fitted together (`censored_fit`). ``values`` and ``censored`` must be the
    jobs of one window by start time (`pooltree.forecast.window`): the completed and the running ones of the
    same starts."""
    logs = [math.log(max(value, _MIN_SECONDS)) for value in values]
    mean = sum(logs) / len(logs)
    if source == "prior":
        sigma = settings.prior_sigma
    elif len(logs) >= 2:
        sigma = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    else:
        sigma = settings.default_sigma
    sigma = max(sigma, settings.min_sigma)
    positive = [math.log(value) for value in censored if value > 0]
    if positive and source != "prior" and len(logs) >= 2 and sigma > 0:
        mean, sigma = censored_fit(logs, positive, settings.min_sigma)
    elif positive and sigma > 0:  # no spread (min_sigma 0, equal run times): every job runs the median
        mean = _censored_median(logs, positive, sigma)
    return DurationFit(math.exp(mean), sigma, len(logs), source)


def choose(
    own: Sequence[float],
    pool: Sequence[float],
    settings: DurationSettings,
    running: Sequence[float] = (),
) -> DurationFit:
    """The task's own observations, else its pool's, else the prior (one pseudo-observation at its median);
    ``running``: how long the task's running jobs of the same start window have run (censored observations)."""
    if own:
        return fit(own, "operation", settings, running)
    if pool:
        return fit(pool, "pool", settings, running)
    return fit([settings.prior_median], "prior", settings, running)


def remaining(distribution: Distribution, elapsed: float, rng: random.Random) -> float:
    """Remaining run time of a job of ``distribution`` that has run ``elapsed`` seconds: a draw of the run time
    conditioned on being longer than ``elapsed`` (inverse CDF of the truncated distribution), minus ``elapsed``."""
    elapsed = max(elapsed, 0.0)
    if distribution.kind == "fixed":
        return max(distribution.a - elapsed, 0.0)
    if distribution.kind == "uniform":
        low = max(distribution.a, elapsed)
        if low >= distribution.b:
            return 0.0
        return low + (distribution.b - low) * rng.random() - elapsed
    median, sigma = distribution.a, distribution.b
    if sigma <= 0:
        return max(median - elapsed, 0.0)
    floor = _NORMAL.cdf(math.log(max(elapsed, _MIN_SECONDS) / median) / sigma) if elapsed > 0 else 0.0
    u = floor + (1.0 - floor) * rng.random()
    u = min(max(u, 1e-12), 1.0 - 1e-12)
    total = median * math.exp(sigma * _NORMAL.inv_cdf(u))
    return max(total - elapsed, 0.0)


@dataclass(frozen=True)
class RemainingTimes(Distribution):
    """The run times of a task's jobs that are running at the fork: each job's own remaining time, drawn
    conditioned on how long that job has run (`remaining`), handed out in the order the jobs are placed; a job
    of the task that starts after them (a preempted one starting again) draws a whole run time from the
    lognormal ``a``, ``b`` (the seed's distribution of the task).

    Each job drawn on its own keeps the shape of what matters, the last of them to end: the jobs' remaining times
    are not lognormal (a job near its end has almost none left, a young one the whole distribution), and one
    lognormal fitted to a group of them (the model before: four groups by age, each fitted by its median and 95th
    percentile from 32 draws) put the last end of 50 jobs of LN(337 s, 0.6) at p10/p90 of 711-758 / 2,179-2,264 s
    against 800-845 / 1,768-1,786 s drawn job by job: ranges too wide, and finishes late where it counts."""

    drawn: tuple[float, ...] = ()
    taken: list[int] = field(default_factory=lambda: [0], compare=False, hash=False, repr=False)
    """How many of ``drawn`` were handed out (the simulator samples once per job start)."""

    def sample(self, rng: random.Random) -> float:
        index = self.taken[0]
        if index < len(self.drawn):
            self.taken[0] = index + 1
            return self.drawn[index]
        return super().sample(rng)


def remaining_times(
    distribution: Distribution, elapsed: Sequence[float], rng: random.Random
) -> RemainingTimes:
    """The remaining times of running jobs that have run ``elapsed`` seconds each (in this order), each drawn from
    ``distribution`` given its own elapsed time (see `RemainingTimes`)."""
    drawn = tuple(remaining(distribution, seconds, rng) for seconds in elapsed)
    return RemainingTimes(distribution.kind, distribution.a, distribution.b, drawn)


def quantile_of(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile ``q`` of sorted ``ordered``."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def partial_pooling(pairs: Sequence[tuple[DurationFit, DurationFit]]) -> tuple[list[DurationFit], float]:
    """Each fit drawn towards the estimate it belongs to (``pairs``: (own, base): a task's fit and its pool's, or a
    pool's and the cluster's) as far as the data say they differ: a normal-normal model of the log median (and of
    the log spread) across the pairs, the spread between fits and their bases (``tau``) estimated by the method of
    moments from all the pairs (the squared differences less their sampling variances ``sigma^2 / n``, resp.
    ``1 / (2 (n - 1))``), each own estimate then weighted by ``tau^2 / (tau^2 + its variance)``. A fit with few
    jobs then leans on its base (where they are alike, fully), one with many keeps its own. The median each seed
    draws keeps the posterior's spread: its own part (``weight * variance``) drawn per fit, the base's part
    (``(1 - weight)`` of the base's doubt) shared with every fit that leans on the same base
    (`DurationFit.shared`). With fewer than two pairs nothing is estimated and the own fits stay. Also returns
    ``tau`` of the log median (0 when not estimated): how far a fit without jobs of its own may lie from its
    base."""
    if len(pairs) < 2:
        return [own for own, _ in pairs], 0.0
    medians = [math.log(own.median / base.median) for own, base in pairs]
    median_variances = [own.sigma**2 / own.count for own, _ in pairs]
    spreads = [math.log(max(own.sigma, 1e-6) / max(base.sigma, 1e-6)) for own, base in pairs]
    spread_variances = [1.0 / (2.0 * max(own.count - 1, 1)) for own, _ in pairs]
    tau_median = max(0.0, _mean([d * d for d in medians]) - _mean(median_variances))
    tau_spread = max(0.0, _mean([d * d for d in spreads]) - _mean(spread_variances))
    found = []
    for (own, base), difference, variance, spread, spread_variance in zip(
        pairs, medians, median_variances, spreads, spread_variances, strict=True
    ):
        weight = tau_median / (tau_median + variance) if variance > 0 else 1.0
        spread_weight = tau_spread / (tau_spread + spread_variance)
        leaning = base.as_estimate()  # its doubt as parts shared under its key
        found.append(
            DurationFit(
                base.median * math.exp(weight * difference),
                base.sigma * math.exp(spread_weight * spread),
                own.count,
                own.source,
                math.hypot(math.sqrt(weight * variance), (1.0 - weight) * (leaning.doubt or 0.0)),
                tuple((estimate, (1.0 - weight) * part) for estimate, part in leaning.shared),
                own.key,
            )
        )
    return found, math.sqrt(tau_median)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
