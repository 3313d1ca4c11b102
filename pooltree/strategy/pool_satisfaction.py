"""The tree's (and a pool's) ``use_pool_satisfaction_for_scheduling``: a pool competes with its own satisfaction.

YTsaurus (``TDynamicAttributesManager::UpdateAttributesAtCompositeElement``, and the same in
``ComputeSatisfactionRatioAtUpdate``): an active pool's satisfaction in its parent's choice is its best child's
(the default); with the option in effect for the pool it is ``min(best child's, the pool's own local satisfaction)``,
so a pool that already has more than its fair share does not win a heartbeat just because one of its operations
is hungry. A pool's value of the option wins over its parent's, the tree's is the root's (`EffectiveSettings`).

The strategy keeps each pool's key (``_Element.sat``) where its heaps are made (`stages.remake_pool_heap`,
`BestLeaf.recompute`, `PreemptiveStages._best_among`). A pool's own satisfaction moves with every
allocation below it, so while any pool uses the option (`SchedulingTree.pool_satisfaction_used`) a usage change
re-keys every ancestor (no early stop in `BestLeaf.propagate`) and the incremental publish makes the heaps
anew (`changes.py`); with the option nowhere, nothing here runs and every result is as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from pooltree.strategy.elements import _Element
from pooltree.strategy.shares import local_satisfaction_ratio


def pool_key(pool: _Element, best_child: float, total: Sequence[float]) -> float:
    """``best_child`` (the best active child's satisfaction), or the pool's own local satisfaction when that is
    lower and the option is in effect for the pool."""
    if not pool.settings.use_pool_satisfaction or pool.parent is None:
        return best_child
    usage_share = [u / t if t > 0 else 0.0 for u, t in zip(pool.usage, total, strict=True)]
    own = local_satisfaction_ratio(usage_share, pool.fair_share, pool.blocked)
    return own if own < best_child else best_child
