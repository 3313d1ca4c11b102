"""Operations' limits capped by their best allocation share (YTsaurus ``TOperationElement::ComputeLimitsShare``).

The strategy computes, per operation, the memory its allocations can take on the nodes given its memory per
allocation (``pooltree/strategy/best_allocation.py``) and hands the limits that bind in
``UpdateSettings.best_allocation_memory``. The update takes them as a cap on those operations' node limits (the
``tag_limits`` row, which the limits share is computed from), before the previous update's guarantees are looked
up, so they are taken again only under the same caps. Other resources are not capped, as YTsaurus's best allocation
share is one in them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pooltree.fairshare.layout import _Tree
from pooltree.resources import MEMORY


def cap_memory_limits(tree: _Tree, tag_limits: np.ndarray, caps: Mapping[str, float]) -> np.ndarray:
    """YTsaurus ``ComputeLimitsShare``'s best allocation share: the memory limit of every operation named in
    ``caps`` capped by it (``tag_limits`` itself when none is)."""
    if not caps:
        return tag_limits
    index = tree.id_index()
    rows: list[int] = []
    values: list[float] = []
    for op_id, cap in caps.items():
        row = index.get(op_id)
        if row is not None and tree.is_op[row]:
            rows.append(row)
            values.append(float(cap))
    if not rows:
        return tag_limits
    limits = tag_limits.copy()
    limits[rows, MEMORY] = np.minimum(limits[rows, MEMORY], values)
    limits.flags.writeable = False
    return limits
