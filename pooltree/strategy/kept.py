"""`KeptState`: everything one fair-share period of a tree keeps for the next, in one object (issue 28).

A period reads the runtime tree through its delta (`pooltree.tree.delta`), builds the fair-share input, runs the
update and builds the strategy's tree. What each of these keeps for the next period lives here and nowhere else:
`SchedulerCore` and `pooltree fair-share`'s step each hold one `KeptState` per tree, hand it to the period and get
it back brought up to date. Nothing is kept in module globals, and no step keeps state of its own between periods.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pooltree.fairshare.model import UpdateState
from pooltree.strategy.build import BuildCache
from pooltree.tree import FairShareInputCache
from pooltree.tree.delta import PeriodDelta, RuntimeTree
from pooltree.tree.projection import TreeProjection


class KeptState:
    """What one period of a tree hands the next."""

    __slots__ = ("build", "input", "projection", "update")

    def __init__(self) -> None:
        self.projection = TreeProjection()
        """The tree's one projection: the revision the next period's delta starts from, each element's static parts
        for both builds (`pooltree.tree.projection`)."""
        self.input = FairShareInputCache(self.projection)
        """The previous fair-share input, and what the input wrote and re-laid since the update read it."""
        self.build = BuildCache(self.projection)
        """The strategy's previous build (`pooltree.strategy.build_rows`)."""
        self.update: Any = None
        """The previous update's returned state (`UpdateState`: integral volumes, historic usage, the flattened tree
        with what was derived from it); None before the first update."""

    def delta(self, tree: RuntimeTree, resources: Any = None) -> PeriodDelta:
        """This period's delta of ``tree`` from where the previous period stood (``resources``: the operations whose
        usage or pending work was notified, see `PeriodDelta`)."""
        return self.projection.delta(tree, resources)

    def update_state(self, base: UpdateState | None = None) -> Any:
        """The state this period's update starts from: ``base`` (default: the previous update's returned state),
        with the previous update's flattened tree and the input's delta since that update (the operations it wrote,
        the pools it re-laid; `UpdateState.written`, `.relaid`)."""
        written = self.input.take_written()
        relaid = self.input.take_relaid()
        previous = self.update
        state = previous if base is None else base
        if not isinstance(state, UpdateState):
            return state
        if base is not None:
            state = dataclasses.replace(state, layout=getattr(previous, "layout", None))
        if written is not None:
            state = dataclasses.replace(state, written=written, relaid=relaid)
        return state

    def update_failed(self) -> None:
        """The update that read this period's input failed: the next one reads every row and lays the tree anew."""
        self.input.forget_written()
