"""Discretized fair share: operations' fair-share functions as staircases of whole jobs (YTsaurus tree options
``enable_discretized_fair_share`` and ``max_discretized_steps``).

YTsaurus (``yt/yt/library/vector_hdrf/fair_share_update.cpp``, ``TOperationElement::PrepareFairShareByFitFactor``,
with its scheduler side in ``yt/yt/server/scheduler/strategy/pool_tree_element.cpp``) replaces an operation's
FairShareByFitFactor (b.5: a ramp to its usage on [0, 1], then to its demand on [1, 2]) by a staircase when all of:

- the tree option is on, and the operation's parent is a pool (the root never discretizes its operations: its
  ``IsDiscretizedFairShareEnabled`` is false, a pool's is the tree option);
- the operation has pending allocations (K, its needed resources' user slots, > 0; with the spec's
  ``apply_specified_resource_limits_to_demand``, of the needed resources capped by its limits);
- its per-job vector, the aggregated *initial* minimum needed allocation resources as a share of the tree's
  total (fixed when the operation materializes), has a positive component;
- it does not take the gang step function (that one wins).

The staircase: step k (k = 1..K) at fit factor ``k · (2 / (K + 1))`` lifts the value from v(k−1) to v(k), with
``v(k) = min(k · perJob, demand share)`` per resource (v(0) = 0); flat between steps and after the last one up to
f = 2. Functions are left-continuous, so at a step's fit factor the value is still the lower one: an operation
whose parent's fit factor lies between two steps gets a whole number of jobs. Note that K counts *pending*
allocations only: an operation with running jobs tops out at ``min(K · perJob, demand)``, as in YTsaurus.

Above ``max_discretized_steps`` (M, default 100, > 0) pending allocations, only a window of at most M steps is a
staircase: its centre is the operation's fair share of the previous update (its usage share when it has none,
zero when that is zero too) in jobs of the dominant resource, ``round(hint[dom] / perJob[dom])`` clamped to
[0, K]; ``lo = max(0, centre − M // 2)``, ``hi = min(K, lo + M)``, ``lo = max(0, hi − M)``. Below the window the
function ramps linearly from (0, 0) to (f(lo), v(lo)), and above it from (f(hi), v(hi)) to (2, demand share).

Only the operations' functions change; pools sum them as before, so with the option off nothing here runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.errors import ConfigError
from pooltree.fairshare import functions as fn
from pooltree.fairshare.layout import _share, _Tree
from pooltree.resources import RESOURCE_COUNT, USER_SLOTS

DEFAULT_MAX_STEPS = 100


def check_max_steps(value: Any, field: str = "settings.max_discretized_steps") -> int:
    """``max_discretized_steps`` as YTsaurus registers it: an integer greater than 0."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ConfigError(field, f"must be an integer greater than 0, got {value!r}")
    return int(value)


@dataclass(frozen=True, slots=True)
class DiscretizedInputs:
    """What the staircases read besides the operations' shares: the tree and its total, every operation's per-job
    resources (``settings.discretized_job_resources``), ``max_discretized_steps``, the operations' limits-to-demand
    flags, usage and demand (b.1's), dominant resources, and the previous update's fair shares by id."""

    tree: _Tree
    total: np.ndarray
    job_resources: Mapping[str, Any]
    max_steps: Any
    apply_limits: np.ndarray
    usage: np.ndarray
    demand: np.ndarray
    dominant: np.ndarray
    previous: Mapping[str, np.ndarray]


def eligible(
    inputs: DiscretizedInputs, ops: np.ndarray, step: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which of ``ops`` take the staircase; their pending allocation counts and per-job share vectors (rows of
    ``ops``; zero where not eligible)."""
    tree = inputs.tree
    job_resources = inputs.job_resources
    pending = np.zeros(len(ops), dtype=np.int64)
    per_job = np.zeros((len(ops), RESOURCE_COUNT))
    parents = tree.parent[ops]
    for k, i in enumerate(ops.tolist()):
        op = tree.elements[i]
        resources = job_resources.get(op.id)
        if resources is None or int(parents[k]) == 0 or step[k]:
            continue
        if inputs.apply_limits[i]:
            # YTsaurus's apply_specified_resource_limits_to_demand: the needed resources capped by the limits,
            # their user slots the pending count (the demand was capped so in ``guarantees.compute_attributes``).
            pending[k] = max(round(float(inputs.demand[i][USER_SLOTS] - inputs.usage[i][USER_SLOTS])), 0)
        else:
            pending[k] = max(int(op.pending_allocation_count), 0)  # type: ignore[attr-defined]
        per_job[k] = resources
    per_job = _share(per_job, inputs.total)
    mask = (pending > 0) & (per_job.max(axis=1) > 0.0) if len(ops) else np.zeros(0, dtype=bool)
    return mask, pending, per_job


def window(pending: int, max_steps: int, hint_jobs: int) -> tuple[int, int]:
    """The steps ``[lo, hi]`` built as a staircase: all of them up to ``max_steps``, else ``max_steps`` around
    ``hint_jobs``."""
    if pending <= max_steps:
        return 0, pending
    lo = max(0, hint_jobs - max_steps // 2)
    hi = min(pending, lo + max_steps)
    return max(0, hi - max_steps), hi


def hint_jobs(
    previous: np.ndarray | None, usage: np.ndarray, per_job: np.ndarray, dominant: int, pending: int
) -> int:
    """The window's centre in jobs: the previous fair share (else the usage share, else 0) in the dominant
    resource divided by one job's share of it, rounded half away from zero, clamped to [0, pending]."""
    if previous is not None:
        hint = previous
    elif usage.max() > 0.0:
        hint = usage
    else:
        return 0
    one = float(per_job[dominant])
    if one <= 0.0:
        return 0
    jobs = math.floor(float(hint[dominant]) / one + 0.5)
    return min(max(jobs, 0), pending)


def staircase(
    pending: int, lo: int, hi: int, demand: np.ndarray, per_job: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The points (fit factors, values) of one operation's staircase FSBFF on [0, 2]."""
    width = 2.0 / (pending + 1)

    def value(k: int) -> np.ndarray:
        return np.zeros(RESOURCE_COUNT) if k <= 0 else np.minimum(per_job * float(k), demand)

    xs: list[float] = [0.0]
    ys: list[np.ndarray] = [np.zeros(RESOURCE_COUNT)]
    if lo > 0:
        xs.append(lo * width)
        ys.append(value(lo))
    xs.append((lo + 1) * width)
    ys.append(ys[-1])
    for k in range(lo + 1, hi + 1):
        up = value(k)
        if not np.array_equal(up, ys[-1]):  # a step that adds nothing (capped by demand) is no point
            xs.append(k * width)
            ys.append(up)
        if k < hi:
            xs.append((k + 1) * width)
            ys.append(up)
        elif hi == pending:
            xs.append(2.0)
            ys.append(up)
    if hi < pending:
        xs.append(2.0)
        ys.append(np.asarray(demand, dtype=float))
    return np.array(xs), np.array(ys)


def staircases(
    pending: np.ndarray, lo: np.ndarray, hi: np.ndarray, demand: np.ndarray, per_job: np.ndarray
) -> fn.FunctionBatch:
    """``staircase`` of many operations at once (the same points, bit for bit), as one FSBFF batch.

    Each function is (0, 0), then (f(lo), v(lo)) when lo > 0, then for k = lo..hi−1 the pair (f(k+1), v(k)),
    (f(k+1), v(k+1)) (flat, then the step), then (2, v(K)) or, with a window below K, (2, demand); a point equal to
    the one before it (a step that adds nothing) is dropped.
    """
    n = len(pending)
    width = 2.0 / (pending + 1).astype(float)
    steps = hi - lo
    owner = np.repeat(np.arange(n), steps)
    start = np.repeat(np.cumsum(steps) - steps, steps)
    k = np.repeat(lo, steps) + (np.arange(len(owner)) - start)
    x_pair = (k + 1) * width[owner]
    low = np.minimum(per_job[owner] * k[:, None].astype(float), demand[owner])
    high = np.minimum(per_job[owner] * (k + 1)[:, None].astype(float), demand[owner])
    with_lo = lo > 0
    # Per function: [start, (lo point), pairs..., end]; counts before dropping repeats.
    sizes = 2 + with_lo.astype(np.int64) + 2 * steps
    offsets = fn.offsets_from_counts(sizes)
    x = np.empty(int(offsets[-1]))
    y = np.empty((int(offsets[-1]), RESOURCE_COUNT))
    first = offsets[:-1]
    x[first], y[first] = 0.0, 0.0
    at_lo = first[with_lo] + 1
    x[at_lo] = lo[with_lo] * width[with_lo]
    y[at_lo] = np.minimum(per_job[with_lo] * lo[with_lo][:, None].astype(float), demand[with_lo])
    pair_base = np.repeat(first + 1 + with_lo, steps) + 2 * (np.arange(len(owner)) - start)
    x[pair_base], y[pair_base] = x_pair, low
    x[pair_base + 1], y[pair_base + 1] = x_pair, high
    last = offsets[1:] - 1
    x[last] = 2.0
    full = hi == pending
    y[last] = np.where(full[:, None], np.minimum(per_job * pending[:, None].astype(float), demand), demand)
    repeat = np.zeros(len(x), dtype=bool)
    repeat[1:] = (x[1:] == x[:-1]) & np.all(y[1:] == y[:-1], axis=1)
    repeat[first] = False
    keep = ~repeat
    kept = np.add.reduceat(keep.astype(np.int64), first) if n else np.zeros(0, dtype=np.int64)
    return fn.FunctionBatch(fn.offsets_from_counts(kept), x[keep], y[keep])


def operation_fair_share_by_suggestion(
    inputs: DiscretizedInputs,
    ops: np.ndarray,
    step: np.ndarray,
    usage: np.ndarray,
    demand: np.ndarray,
    guarantee: np.ndarray,
    limits: np.ndarray,
) -> fn.FunctionBatch:
    """``functions.operation_fair_share_by_suggestion`` for ``ops`` (rows of ``step``, the usage and demand shares,
    ``guarantee`` and ``limits`` by op) with the eligible operations' FSBFF a staircase; one batch in the order of
    ``ops``."""
    max_steps = check_max_steps(inputs.max_steps)
    mask, pending, per_job = eligible(inputs, ops, step)
    if not mask.any():
        return fn.operation_fair_share_by_suggestion(usage, demand, step, guarantee, limits)
    stairs = np.flatnonzero(mask)
    previous = inputs.previous
    tree = inputs.tree
    counts = pending[stairs]
    lo, hi = np.zeros(len(stairs), dtype=np.int64), counts.copy()
    for k in np.flatnonzero(counts > max_steps).tolist():  # windows: only operations above the step count
        i, count = int(ops[stairs[k]]), int(counts[k])
        centre = hint_jobs(
            previous.get(tree.ids[i]), usage[stairs[k]], per_job[stairs[k]], int(inputs.dominant[i]), count
        )
        lo[k], hi[k] = window(count, max_steps, centre)
    fsbff = staircases(counts, lo, hi, demand[stairs], per_job[stairs])
    stair_batch = fn.fair_share_by_suggestion(fsbff, guarantee[stairs], limits[stairs], merge_collinear=False)
    if len(stairs) == len(ops):
        return stair_batch
    plain = np.flatnonzero(~mask)
    plain_batch = fn.operation_fair_share_by_suggestion(
        usage[plain], demand[plain], step[plain], guarantee[plain], limits[plain]
    )
    position = np.empty(len(ops), dtype=np.int64)
    position[plain] = np.arange(len(plain))
    position[stairs] = len(plain) + np.arange(len(stairs))
    return fn.gather(fn.concatenate([plain_batch, stair_batch]), position)


def finish(
    inputs: DiscretizedInputs, fair_share: np.ndarray, ops: np.ndarray, step: np.ndarray
) -> tuple[frozenset[str], dict[str, np.ndarray]]:
    """After the update: the operations whose function was a staircase (YTsaurus ``DiscretizedFairShareActive``) and
    every operation's fair share, the next update's window hint (YTsaurus ``LastFairShare``)."""
    ids = inputs.tree.ids
    mask, _, _ = eligible(inputs, ops, step)
    rows = np.array(fair_share[ops], dtype=float)
    active = frozenset(ids[i] for i in ops[mask].tolist())
    return active, {ids[i]: rows[k] for k, i in enumerate(ops.tolist())}
