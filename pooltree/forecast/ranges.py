"""The runs of a forecast summed up as a range: p10 / p50 / p90 of when something happens.

Each seed of a forecast is one draw of what may happen. The range a user reads is a statement about what *will*
happen: one more draw. The runs' own p10 and p90 (sample quantiles of a handful of draws) are too narrow for
that: with 4 runs the interval between the interpolated p10 and p90 of the runs holds one more draw of the same
distribution only about half of the time (the draws' spread is underestimated, and the true quantiles lie
outside the sample's more often than inside). The published p10 and p90 are therefore the ends of an 80%
**prediction interval** for one more draw: the runs' times taken in log seconds (waits are positive and skewed:
a few runs far later than the rest), ``mean ± t(0.9, n - 1) · s · sqrt(1 + 1/n)`` with Student's t for ``n``
runs (the standard interval for a new observation of a normal sample whose mean and spread are estimated from
the sample itself), never narrower than the runs' own p10-p90. p50 is the runs' median.

**Runs that did not see it happen within the horizon.** Such a run says only that its time is later than the
horizon: a right-censored observation. The order statistics then decide the median and the upper end
(``quantile``: a percentile that reaches such a run is "after the horizon"), but the lower end is still known:
the mean and spread in log seconds are fitted by maximum likelihood with those runs censored at the horizon
(`pooltree.forecast.durations.censored_fit`, the fit the run-time model uses for jobs still running), and p10 is
the same prediction interval's lower end (never later than the runs' own p10). Left to the order statistics, a
range with some runs after the horizon started at the earliest of its runs or at "after the horizon", and an
operation two runs of four saw start near the horizon started before p10 in about half of the back-test's cases
(``bench/forecast_backtest.py``); its upper end also comes from the fit when the fit puts it within the horizon.

The t quantile comes from Hill's expansion (Abramowitz & Stegun 26.7.5; exact closed forms for 1 and 2 degrees of
freedom); it is within 0.3% of the exact value from 3 degrees of freedom on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

from pooltree.forecast.durations import censored_fit

QUANTILES = (0.1, 0.5, 0.9)
LOG_OFFSET = 1.0
"""Seconds added before taking logs (a run where it happens at once has a wait of 0)."""


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of ``values`` (``inf`` for "did not happen"); inf when it reaches one."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    a, b = ordered[low], ordered[high]
    if position == low:
        return a
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return a + (b - a) * (position - low)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile ``p`` (> 0.5) with ``df`` degrees of freedom (see the module docstring)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        a = 4.0 * p * (1.0 - p)
        return (2.0 * p - 1.0) * math.sqrt(2.0 / a)
    z = NormalDist().inv_cdf(p)
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def prediction_range(
    values: Sequence[float], margin: float = 0.0, horizon: float | None = None
) -> tuple[float, float, float]:
    """(p10, p50, p90) of one more draw like ``values`` (seconds from now; inf: after the horizon), p10 earlier and
    p90 later by ``margin`` (the timing resolution); p10 never before 0 when no value is. ``horizon``: seconds
    from now every run covered (an inf is then a time later than it, see the module docstring; None: the order
    statistics alone answer for a range with an inf)."""
    low, mid, high = (quantile(values, q) for q in QUANTILES)
    finite = [value for value in values if not math.isinf(value)]
    n = len(values)
    if finite and n >= 2 and (len(finite) == n or horizon is not None):
        logs = [math.log(max(value, 0.0) + LOG_OFFSET) for value in finite]
        if len(finite) == n:
            mean = sum(logs) / n
            spread = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        else:
            assert horizon is not None
            censored = [math.log(max(horizon, 0.0) + LOG_OFFSET)] * (n - len(finite))
            mean, spread = censored_fit(logs, censored, 0.0)
        if spread > 1e-9:  # runs that agree (to rounding) leave the margin alone
            width = t_quantile(0.9, n - 1) * spread * math.sqrt(1.0 + 1.0 / n)
            low = min(low, math.exp(mean - width) - LOG_OFFSET)
            upper = math.exp(mean + width) - LOG_OFFSET
            if len(finite) == n:
                high = max(high, upper)
            elif horizon is not None and upper > horizon:
                high = math.inf  # the fit's upper end is after the horizon too
    if not math.isinf(low):
        low -= margin
        if min(values) >= 0:
            low = max(low, 0.0)
    if not math.isinf(high):
        high += margin
    return low, mid, high
