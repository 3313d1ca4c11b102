"""The pure vector fair-share update (YTsaurus vector HDRF): guarantees, fair-share functions, statuses.

``update_fair_share(root, total_resources, settings, now, state)`` is the entry point; the input model
is in ``pooltree.fairshare.model``; the status helpers are shared with the scheduler.
"""

from pooltree.fairshare.model import (
    ROOT_ID,
    DetailedFairShare,
    Element,
    ElementResult,
    FairShareResult,
    IntegralGuarantees,
    Operation,
    Pool,
    UpdateSettings,
    UpdateState,
)
from pooltree.fairshare.status import (
    BELOW_FAIR_SHARE,
    INFINITE_SATISFACTION_RATIO,
    NORMAL,
    is_below_fair_share,
    local_satisfaction_ratio,
    strictly_dominates_non_blocked,
)
from pooltree.fairshare.update import update_fair_share

__all__ = [
    "BELOW_FAIR_SHARE",
    "INFINITE_SATISFACTION_RATIO",
    "NORMAL",
    "ROOT_ID",
    "DetailedFairShare",
    "Element",
    "ElementResult",
    "FairShareResult",
    "IntegralGuarantees",
    "Operation",
    "Pool",
    "UpdateSettings",
    "UpdateState",
    "is_below_fair_share",
    "local_satisfaction_ratio",
    "strictly_dominates_non_blocked",
    "update_fair_share",
]
