"""The tree's ``node_reconnection_timeout`` (YTsaurus alias ``total_resource_limits_consider_delay``, default 5 min).

YTsaurus (``AreTotalResourceLimitsStable``, ``ComputeSchedulingTagFilterResourceLimits``): for this long after the
scheduler connects (starts or takes over), nodes are still coming back, so the resources of the nodes matching an
element's ``scheduling_tag_filter`` are not trusted: such an element's limits are not capped by them (YTsaurus makes
them infinite; pooltree's fair-share input then uses the tree's totals, which caps the same shares at 1). Elements
without a tag filter use the tree's totals anyway. After the timeout the matching nodes' sum applies again.

The live service sets each core's ``connection_time`` when it revives at start; the simulator has no connection
(its cluster is there from the start), so nothing changes there.
"""

from __future__ import annotations

from typing import Any


def total_resource_limits_stable(connection_time: float | None, timeout: float, now: float) -> bool:
    """Whether ``now`` is at least ``timeout`` past the connection (always, without a connection time)."""
    return connection_time is None or now >= connection_time + timeout


def nodes_for_tag_filters(nodes: Any, connection_time: float | None, timeout: float, now: float) -> Any:
    """The node view the fair-share input sums for scheduling tag filters: ``None`` (no tag-filter caps) while the
    tree's resource limits are not stable yet, else ``nodes``."""
    return nodes if total_resource_limits_stable(connection_time, timeout, now) else None
