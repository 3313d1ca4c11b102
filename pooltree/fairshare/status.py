"""Scheduling status and satisfaction helpers (yt-semantics §c and §e.2), shared with the scheduler.

Every function works on single vectors (shape (5,)) and on stacks of vectors (shape (n, 5)); the update
calls them once for all elements.
"""

from __future__ import annotations

import numpy as np

from pooltree.fairshare.batch import row_all, row_any, row_max, row_min

INFINITE_SATISFACTION_RATIO = 1e9
RATIO_COMPUTATION_PRECISION = 1e-9  # "nearly zero" fair share
RATIO_COMPARISON_PRECISION = 1e-4  # "fair share ≈ demand" for operations' status
_LARGEST = float(np.finfo(np.float64).max)

NORMAL = "normal"
BELOW_FAIR_SHARE = "below_fair_share"


def _blocked(fair_share: np.ndarray, demand_share: np.ndarray) -> np.ndarray:
    """Resource r is blocked when the fair share already covers the demand: FS_r ≥ demand_r."""
    return np.asarray(fair_share) >= np.asarray(demand_share)


def strictly_dominates_non_blocked(
    lhs: np.ndarray, rhs: np.ndarray, fair_share: np.ndarray, demand_share: np.ndarray
) -> np.ndarray | bool:
    """lhs > rhs in every non-blocked resource; if all resources are blocked, in at least one resource."""
    lhs, rhs = np.asarray(lhs, dtype=float), np.asarray(rhs, dtype=float)
    blocked = _blocked(fair_share, demand_share)
    greater = lhs > rhs
    all_blocked = row_all(blocked)
    result = np.where(all_blocked, row_any(greater), row_all(greater | blocked))
    return bool(result) if result.ndim == 0 else result


def is_below_fair_share(
    fair_share: np.ndarray,
    usage_share: np.ndarray,
    demand_share: np.ndarray,
    tolerance: float | np.ndarray,
    *,
    is_operation: bool | np.ndarray = False,
    schedulable: bool | np.ndarray = True,
) -> np.ndarray | bool:
    """Status rule §c: below fair share iff min(FS × tolerance, demand) strictly dominates usage (non-blocked).

    Operations use tolerance 1.0 when FS + 1e-4 dominates demand, and are never below fair share when
    not schedulable.
    """
    fs = np.asarray(fair_share, dtype=float)
    us = np.asarray(usage_share, dtype=float)
    ds = np.asarray(demand_share, dtype=float)
    tol = np.asarray(tolerance, dtype=float)
    is_op = np.asarray(is_operation)
    full = row_all(fs + RATIO_COMPARISON_PRECISION >= ds)
    tol = np.where(is_op & full, 1.0, tol)
    bound = np.minimum(fs * np.asarray(tol)[..., None], ds)
    below = np.asarray(strictly_dominates_non_blocked(bound, us, fs, ds))
    below = below & ~(is_op & ~np.asarray(schedulable))
    return bool(below) if below.ndim == 0 else below


def local_satisfaction_ratio(
    fair_share: np.ndarray, usage_share: np.ndarray, demand_share: np.ndarray
) -> np.ndarray | float:
    """§e.2: how much of its fair share an element uses (< 1 hungry, ≥ 1 satisfied, 1e9 if FS ≈ 0)."""
    fs = np.asarray(fair_share, dtype=float)
    us = np.asarray(usage_share, dtype=float)
    ds = np.asarray(demand_share, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(fs > 0, us / np.where(fs > 0, fs, 1.0), np.nan)
    zero_fs = row_all(fs <= RATIO_COMPUTATION_PRECISION)
    over = row_any(us > fs)
    # Some usage above fair share: max ratio, 0/0 = 0, x/0 = 1e9.
    over_ratio = np.where(fs > 0, ratio, np.where(us > 0, INFINITE_SATISFACTION_RATIO, 0.0))
    over_value = np.minimum(row_max(over_ratio), INFINITE_SATISFACTION_RATIO)
    blocked = _blocked(fs, ds)
    all_blocked = row_all(blocked)
    # All blocked: min ratio with 0/0 = 1 and x/0 = 1.
    blocked_ratio = np.where(fs > 0, ratio, 1.0)
    blocked_value = row_min(blocked_ratio)
    # Otherwise: max over non-blocked resources with FS != 0 (0 if none).
    # np.nan_to_num(ratio, nan=0.0) (NaN -> 0, ±inf -> ±largest float), without its Python-level overhead.
    finite_ratio = np.where(np.isnan(ratio), 0.0, np.clip(ratio, -_LARGEST, _LARGEST))
    regular = np.where(~blocked & (fs != 0), finite_ratio, -np.inf)
    regular_value = row_max(regular)
    regular_value = np.where(np.isfinite(regular_value), regular_value, 0.0)
    result = np.where(
        zero_fs,
        INFINITE_SATISFACTION_RATIO,
        np.where(over, over_value, np.where(all_blocked, blocked_value, regular_value)),
    )
    return float(result) if np.ndim(result) == 0 else result
