"""The below_fair_share rule: YTsaurus checks every non-blocked resource, the seeds speak of the dominant one."""

from __future__ import annotations

import numpy as np

from pooltree.fairshare import (
    BELOW_FAIR_SHARE,
    NORMAL,
    Operation,
    Pool,
    UpdateSettings,
    is_below_fair_share,
    update_fair_share,
)
from pooltree.resources import vector


def test_dominant_resource_below_but_another_resource_above_is_not_below_fair_share() -> None:
    fair_share = np.array([0.0, 0.4, 0.0, 0.2, 0.0])
    demand = np.array([0.0, 1.0, 0.0, 1.0, 0.0])  # nothing blocked except the unused resources
    usage = np.array([0.0, 0.1, 0.0, 0.3, 0.0])
    # The seeds' wording: cpu (the dominant resource of the fair share) is used 0.1 < 0.4 × 0.8 -> below.
    dominant = int(np.argmax(fair_share))
    assert usage[dominant] < fair_share[dominant] * 0.8
    # YTsaurus: min(FS × tolerance, demand) must strictly dominate usage in every non-blocked resource;
    # memory (0.3 ≥ 0.16) is not below, so the element is not below fair share.
    assert not is_below_fair_share(fair_share, usage, demand, 0.8)
    # Both rules agree once memory is below too.
    assert is_below_fair_share(fair_share, np.array([0.0, 0.1, 0.0, 0.1, 0.0]), demand, 0.8)


def test_the_update_reports_the_status_with_the_non_blocked_rule() -> None:
    total = vector(user_slots=100, cpu=100, memory=100)

    def status(memory_usage: float) -> str:
        usage = vector(user_slots=1, cpu=10, memory=memory_usage)
        hungry = Operation("hungry", demand=vector(user_slots=10, cpu=100, memory=50), usage=usage)
        other = Operation("other", demand=vector(user_slots=10, cpu=100, memory=50), usage=np.zeros(5))
        root = Pool("<Root>", children=[Pool("a", children=[hungry]), Pool("b", children=[other])])
        return update_fair_share(root, total, UpdateSettings(), 0.0).elements["hungry"].scheduling_status

    # Fair share is half of everything each: cpu usage 10 of 50 is far below in both cases.
    assert status(memory_usage=10.0) == BELOW_FAIR_SHARE
    assert status(memory_usage=45.0) == NORMAL  # memory above 0.8 × 25: not below in every resource
