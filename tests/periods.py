"""Reads and builds of one tree period after period, as `SchedulerCore` makes them, for tests that drive the input
read or the strategy's build without a core: a `KeptState` (the tree's projection, the previous read's or build's
rows) and each period's delta from it (`KeptState.delta`), or the one the test gives."""

from __future__ import annotations

from typing import Any

from pooltree.resources import Vector
from pooltree.strategy.build import build_scheduling_tree
from pooltree.strategy.kept import KeptState
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig
from pooltree.tree import FairShareInput, read_input
from pooltree.tree.delta import PeriodDelta, RuntimeTree
from pooltree.tree.projection import TreeProjection


class InputReads:
    """One tree's fair-share input read again and again (a read that raises leaves no rows: the next walks)."""

    def __init__(self, projection: TreeProjection | None = None) -> None:
        self.kept = KeptState(projection if projection is not None else TreeProjection())

    @property
    def projection(self) -> TreeProjection:
        return self.kept.projection

    def read(
        self, tree: RuntimeTree, resources: Any, *, nodes: Any = None, delta: PeriodDelta | None = None
    ) -> FairShareInput:
        delta = delta if delta is not None else self.kept.delta(tree)
        previous, self.kept = self.kept.input, self.kept.read(None)
        read = read_input(
            tree, resources, nodes=nodes, projection=self.kept.projection, previous=previous, delta=delta
        )
        self.kept = self.kept.read(read.rows)
        return read

    def input(self, tree: RuntimeTree, resources: Any, **options: Any) -> tuple[Any, Any]:
        """The root and the settings of the next read."""
        read = self.read(tree, resources, **options)
        return read.root, read.settings


class Builds:
    """One tree's `SchedulingTree` built again and again (a build that raises leaves no rows: the next walks)."""

    def __init__(self, projection: TreeProjection | None = None) -> None:
        self.kept = KeptState(projection if projection is not None else TreeProjection())

    @property
    def projection(self) -> TreeProjection:
        return self.kept.projection

    def build(
        self,
        tree: RuntimeTree,
        result: Any,
        total: Vector,
        config: StrategyConfig | None = None,
        *,
        delta: PeriodDelta | None = None,
    ) -> SchedulingTree:
        delta = delta if delta is not None else self.kept.delta(tree)
        previous, self.kept = self.kept.build, KeptState(self.kept.projection)
        built, rows = build_scheduling_tree(
            tree, result, total, config, self.kept.projection, previous, delta
        )
        self.kept = self.kept.built(rows)
        return built
