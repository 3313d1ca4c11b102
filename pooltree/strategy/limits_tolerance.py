"""A pool's ``resource_limits_overcommit_tolerance``: how far a preemptive stage may go past its ``resource_limits``.

YTsaurus (``TResourceTreeElement::IncreaseLocalResourceUsagePrecommitWithCheckUnsafe`` with ``allowLimitsOvercommit``,
which ``DoScheduleAllocation`` passes in preemptive stages only): when an allocation is started with preemption,
the room left under a limited pool is ``resource_limits - usage + tolerance`` instead of ``resource_limits - usage``;
the regular stages keep the plain limit. The usage past the limit does not stay: after the allocation starts, the
pool's violated limits make its preemptible allocations victims (`PreemptiveStages._preempt_after_scheduling`), as
YTsaurus preempts for violated limits. So a starving operation in a pool at its limit can start its allocation and
have the pool's own preemptible allocations make room, instead of not starting at all.

The strategy reads the tolerance as ``_Element.limits_tolerance`` (from the pool's spec; None without one) in
`RegularStage.try_schedule`, where the preemptive stages pass their per-pool discounts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pooltree.resources import Vector


def overcommit_tolerance(pool_config: Any) -> Vector | None:
    """A pool config's ``resource_limits_overcommit_tolerance`` as a read-only vector (zeros where unset), or None
    when the pool sets none (or only zeros)."""
    tolerance = getattr(pool_config, "resource_limits_overcommit_tolerance", None)
    if tolerance is None:
        return None
    vector = np.asarray(getattr(tolerance, "vector", tolerance), dtype=float)
    if not np.any(vector > 0):
        return None
    out = vector.copy()
    out.flags.writeable = False
    return out


def tolerance_floats(spec_tolerance: Vector | None) -> tuple[float, ...] | None:
    """The element's tolerance as floats for the heartbeat's per-resource loop."""
    return None if spec_tolerance is None else tuple(float(x) for x in spec_tolerance)
