"""The tree's ``enable_absolute_fair_share_starvation_tolerance``: starvation tolerance as an absolute margin.

YTsaurus (``TPoolTreeOperationElement::GetStatus``): an operation whose fair share covers its demand (within
1e-4 in every resource) is tested with tolerance 1.0, as always. Otherwise, with the option on, it is ``normal``
unless the gap between its fair share and its usage (``fair_share - usage_share``) is above its aggregated minimum
needed allocation (the componentwise minimum over its pending tasks' allocations, as a share of the tree's
resources) in every resource that is not blocked (a resource is blocked when the fair share covers the demand;
``pooltree.fairshare.status.strictly_dominates_non_blocked``). Only then does the usual relative rule
(``fair share × tolerance``) decide. So an operation whose missing share is smaller than one of its allocations
can never fit is not starving, however small its tolerance. Pools keep the relative rule.

The minimum needed allocation is the controller's, read at the fair-share update (the strategy's runtime knows
it, the fair-share input does not), so the rule is applied to the update's result before the strategy reads it
(`SchedulerCore.update_fair_share`): the simulator and the live service get it alike. ``pooltree fair-share``
(a snapshot without controllers) keeps the relative rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pooltree.fairshare.status import RATIO_COMPARISON_PRECISION, strictly_dominates_non_blocked
from pooltree.resources import Vector


def gap_exceeds_min_needed(
    fair_share: Vector, usage_share: Vector, demand_share: Vector, min_needed_share: Vector
) -> bool:
    """Whether ``fair_share - usage_share`` strictly dominates the minimum needed share (non-blocked
    resources): the condition under which the absolute tolerance lets the relative rule decide."""
    return bool(
        strictly_dominates_non_blocked(fair_share - usage_share, min_needed_share, fair_share, demand_share)
    )


def apply_absolute_starvation_tolerance(
    result: Any, min_needed: Mapping[str, Vector], total_resources: Vector
) -> list[str]:
    """Clear the ``below_fair_share`` flag of the operations the absolute tolerance keeps ``normal``, in the
    update's result arrays (before anything reads its per-element view). ``min_needed`` maps operation id to its
    aggregated minimum needed allocation resources. Returns the ids cleared (sorted)."""
    elements = getattr(result, "elements", None)
    arrays = getattr(elements, "arrays", None)
    index = getattr(elements, "index", None)
    if not isinstance(arrays, Mapping) or not isinstance(index, Mapping):
        return []  # an injected update without result arrays: the relative rule stands
    below = arrays["below"]
    fair_share, usage_share, demand_share = (
        arrays["fair_share"],
        arrays["usage_share"],
        arrays["demand_share"],
    )
    total = np.asarray(total_resources, dtype=float)
    positive = total > 0
    cleared: list[str] = []
    for operation_id, needed in min_needed.items():
        row = index.get(operation_id)
        if row is None or not below[row]:
            continue
        fs, ds = fair_share[row], demand_share[row]
        if np.all(fs + RATIO_COMPARISON_PRECISION >= ds):
            continue  # tolerance 1.0 applies, as without the option
        needed_share = np.zeros_like(total)
        np.divide(np.asarray(needed, dtype=float), total, out=needed_share, where=positive)
        if not gap_exceeds_min_needed(fs, usage_share[row], ds, needed_share):
            below[row] = False
            cleared.append(operation_id)
    return sorted(cleared)
