"""`KeptState`: everything one fair-share period of a tree keeps for the next, in one object (issue 28).

A period reads the runtime tree through its delta (`pooltree.tree.delta`), reads the fair-share input, runs the
update and builds the strategy's tree. What each of these keeps for the next period lives here and nowhere else:
`SchedulerCore` and `pooltree fair-share`'s step each hold the `KeptState` the previous period returned, hand it to
the period, and hold the one the period returns (`updated`; `failed` when the period stopped half-way). Nothing is
kept in module globals, and no step of the computation keeps state of its own between periods. The publish's own
state (`pooltree.strategy.publish_step.PublishStep`) is the strategy's: it indexes the published elements, which are
the strategy's, and only publishes change it (what heartbeats change for the next publish goes through the strategy's
change log, `pooltree.strategy.change_log`; `pooltree/tree/ARCHITECTURE.md`).

The projection is an object that brings itself up to date with the period's delta; the input's and the strategy's
previous builds are values (`InputRows`, `BuildRows`) the period's read and build take and return (`read`, `built`);
what the input wrote for the update is not kept in them but handed from the read to the update
(`pooltree.tree.FairShareInput` → `update_state`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pooltree.fairshare.model import UpdateState
from pooltree.strategy.build_rows import BuildRows
from pooltree.tree import FairShareInput, InputRows
from pooltree.tree.delta import PeriodDelta, RuntimeTree
from pooltree.tree.projection import TreeProjection


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class KeptState:
    """What one period of a tree hands the next (immutable: a period returns a new one)."""

    projection: TreeProjection
    """The tree's one projection: the revision the next period's delta starts from, each element's static parts
    for both builds (`pooltree.tree.projection`)."""
    input: InputRows | None = None
    """The rows of the previous fair-share input read (its model objects kept in the projection's entries), which
    the next read takes (and may bring up to date in place); None: the next read walks the tree."""
    build: BuildRows | None = None
    """The rows of the strategy's previous build (`pooltree.strategy.build_rows`), which the next build takes (and
    may re-make in place); None: the next build walks the tree."""
    update: Any = None
    """The previous update's returned state (`UpdateState`: integral volumes, historic usage, the flattened tree
    with what was derived from it); None before the first update."""
    ssd: Any = None
    """The SSD classification of the running operations the last period made with its publish
    (`pooltree.strategy.ssd_preemption.SsdOperations`, while the tree enables SSD priority preemption); None: none,
    or the period stopped before its publish (the next one classifies every running operation)."""
    complete: bool = True
    """Whether that update read the input read just before it (False: a period stopped between its read and the
    end of its update, so what the next read writes is not all that changed since: that update reads every row and
    lays the tree anew)."""

    @classmethod
    def new(cls) -> KeptState:
        """The state before a tree's first period: one projection, no input read, no build."""
        return cls(TreeProjection())

    def delta(self, tree: RuntimeTree, resources: Any = None) -> PeriodDelta:
        """This period's delta of ``tree`` from where the previous period stood (``resources``: the operations whose
        usage or pending work was notified, see `PeriodDelta`)."""
        return self.projection.delta(tree, resources)

    def update_state(self, read: FairShareInput, base: UpdateState | None = None) -> Any:
        """The state the update of ``read`` starts from: ``base`` (default: the previous update's returned state),
        with the previous update's flattened tree and what ``read`` wrote, re-laid and made anew since that
        update (`UpdateState.written`, `.relaid`, `.renewed`)."""
        previous = self.update
        state = previous if base is None else base
        if not isinstance(state, UpdateState):
            return state
        if base is not None:
            state = dataclasses.replace(state, layout=getattr(previous, "layout", None))
        if self.complete and read.written is not None:
            state = dataclasses.replace(state, written=read.written, relaid=read.relaid, renewed=read.renewed)
        return state

    def updated(self, state: Any) -> KeptState:
        """What the next period starts from after an update that read this period's input returned ``state`` (the
        SSD classification is this period's once its publish makes it: `finished`)."""
        return dataclasses.replace(self, update=state, complete=True, ssd=None)

    def read(self, rows: InputRows | None) -> KeptState:
        """What the next period starts from once this one's input read returned ``rows``."""
        return dataclasses.replace(self, input=rows)

    def built(self, rows: BuildRows) -> KeptState:
        """What the next period starts from once this one's build returned ``rows``."""
        return dataclasses.replace(self, build=rows)

    def finished(self, ssd: Any) -> KeptState:
        """What the next period starts from once this one's publish made the SSD classification ``ssd``."""
        return dataclasses.replace(self, ssd=ssd)

    def failed(self) -> KeptState:
        """What the next period starts from when this one stops before its update is published (its computation
        failed, or the publish refused it: `update_steps.publish_update`): the next update reads every row, the
        next period classifies every running operation for SSD and its build walks the tree (no rows: the stopped
        build took the previous ones and may have brought them half up to date, or walked the tree while it
        changed). Its input read walks the tree too, unless the period's read returned (`read`: its rows)."""
        if not self.complete and self.ssd is None and self.build is None and self.input is None:
            return self
        return dataclasses.replace(self, complete=False, ssd=None, build=None, input=None)
