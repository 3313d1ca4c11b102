"""The tree's ``packing``: an operation waits for a node its allocation packs well on.

YTsaurus (``TPackingStatistics``, ``PackingMetric``, the scheduling stages' ``BadPacking`` deactivation and the
``regular_packing_fallback`` stage): with ``packing.enable``, in a regular stage an operation about to be asked
for an allocation on a node first compares the node with the recent heartbeats it saw. A heartbeat snapshot is the
node's usage and limits at that moment (the usage counts allocations started earlier in the same heartbeat). For
the operation's smallest allocation ``d`` and a node's free resources ``f``, both as shares of the tree's total
resources, the metric is

- ``angle``: ``1 - cos(d, f)``;
- ``angle_length`` (default): ``(1 - cos(d, f)) * |f| / |d|``;

smaller is better (a node whose free resources have the allocation's shape and little more). Among the
operation's past snapshots (at most ``max_heartbeat_window_size``, default 10, newest first) younger than
``max_heartbeat_age`` (1 h) on which the allocation would have fit, a snapshot is *better* when its metric ``m``
and the current one ``c`` satisfy ``m < c - absolute_metric_value_tolerance`` (0.05) and
``m < c / relative_metric_value_tolerance`` (1.5). The node is accepted when the window holds at least
``min_window_size_for_schedule`` (0) snapshots and fewer than ``max_better_past_snapshots`` (2) are better.
A rejected node's snapshot joins the window and the operation is skipped (deactivation reason ``bad_packing``)
until an allocation starts on this node in the stage (then the rejected operations are tried again); an
accepted node's snapshot joins the window once the allocation started. When the regular stages started nothing
and some operation was rejected, the ``regular_packing_fallback`` stage runs right after them over the rejected
operations and starts at most one allocation with packing ignored (as ``docs/yt-semantics.md`` restates YTsaurus's
current ``DoRegularAllocationScheduling``; older YTsaurus ran it after the preemptive stages over every
operation). Preemptive stages ignore packing.

pooltree uses the operation's componentwise minimum over its pending tasks as its smallest allocation (YTsaurus
picks one of its tasks' minimum needs at random when they differ). Nodes have no disk quota in pooltree, so
``CanSchedule`` compares resources only.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pooltree.config.packing import PackingConfig
from pooltree.errors import join_path
from pooltree.strategy.model import ExecNode, HeartbeatResult, SchedulingStage

if TYPE_CHECKING:
    from pooltree.strategy.stages import RegularStage

_EPSILON = 1e-9


@dataclass(frozen=True)
class HeartbeatSnapshot:
    """A node's usage and limits at one moment of a heartbeat."""

    time: float
    usage: tuple[float, ...]
    limits: tuple[float, ...]

    def free(self) -> list[float]:
        return [limit - used for limit, used in zip(self.limits, self.usage, strict=True)]

    def fits(self, demand: Sequence[float]) -> bool:
        return all(d <= f + _EPSILON for d, f in zip(demand, self.free(), strict=True))


def packing_metric(
    free: Sequence[float], demand: Sequence[float], total: Sequence[float], metric: str
) -> float:
    """YTsaurus's ``PackingMetric`` over shares of the tree's total resources (resources the tree lacks are left
    out)."""
    f = [x / t if t > 0 else 0.0 for x, t in zip(free, total, strict=True)]
    d = [x / t if t > 0 else 0.0 for x, t in zip(demand, total, strict=True)]
    length_f = math.sqrt(sum(x * x for x in f))
    length_d = math.sqrt(sum(x * x for x in d))
    cos = (
        sum(a * b for a, b in zip(f, d, strict=True)) / (length_f * length_d)
        if length_f and length_d
        else 0.0
    )
    angle = 1.0 - cos
    if metric == "angle":
        return angle
    return angle * (length_f / length_d if length_d else math.inf)


class PackingStatistics:
    """One operation's window of recent heartbeat snapshots (newest first)."""

    def __init__(self) -> None:
        self.window: deque[HeartbeatSnapshot] = deque()

    def record(self, snapshot: HeartbeatSnapshot, config: PackingConfig) -> None:
        self.window.appendleft(snapshot)
        while len(self.window) > config.max_heartbeat_window_size:
            self.window.pop()

    def accepts(
        self,
        snapshot: HeartbeatSnapshot,
        demand: Sequence[float],
        total: Sequence[float],
        config: PackingConfig,
    ) -> bool:
        current = packing_metric(snapshot.free(), demand, total, config.metric)
        threshold = snapshot.time - config.max_heartbeat_age
        better = 0
        for past in self.window:
            if past.time < threshold or not past.fits(demand):
                continue
            value = packing_metric(past.free(), demand, total, config.metric)
            if (
                value < current - config.absolute_metric_value_tolerance
                and value < current / config.relative_metric_value_tolerance
            ):
                better += 1
        return (
            len(self.window) >= config.min_window_size_for_schedule
            and better < config.max_better_past_snapshots
        )


class Packing:
    """The tree's packing: its config, each operation's statistics, the operations rejected in the current
    regular stage, and whether the fallback stage (packing ignored) is running."""

    def __init__(self) -> None:
        self.config = PackingConfig()
        self.statistics: dict[str, PackingStatistics] = {}
        self.in_regular_stage = False
        """True while a regular stage (not the fallback) runs with packing enabled: `RegularStage.try_schedule` checks then."""
        self.rejected: set[str] = set()
        """Operations rejected for their packing in the current heartbeat's regular stages."""

    def configure(self, config: PackingConfig) -> None:
        self.config = config
        if not config.enable:
            self.statistics.clear()

    def forget(self, operation_id: str) -> None:
        self.statistics.pop(operation_id, None)

    def check(
        self,
        operation_id: str,
        snapshot: HeartbeatSnapshot,
        demand: Sequence[float],
        total: Sequence[float],
    ) -> bool:
        """Whether the operation takes this node now; a rejected node's snapshot is recorded at once."""
        stats = self.statistics.get(operation_id)
        if stats is None:
            stats = self.statistics[operation_id] = PackingStatistics()
        if not any(d > 0 for d in demand):
            return True  # no shape to pack (YTsaurus's metric is then undefined and never "better")
        if stats.accepts(snapshot, demand, total, self.config):
            return True
        stats.record(snapshot, self.config)
        return False

    def accepted(self, operation_id: str, snapshot: HeartbeatSnapshot) -> None:
        """An allocation started on the accepted node: its snapshot joins the window."""
        stats = self.statistics.get(operation_id)
        if stats is not None:
            stats.record(snapshot, self.config)


def run_packing_fallback(regular: RegularStage, node: ExecNode, now: float, result: HeartbeatResult) -> None:
    """The ``regular_packing_fallback`` stage, right after the regular stages when they started nothing and
    rejected some operation for its packing: over the rejected operations only, one allocation with packing
    ignored (``regular``: the tree's `RegularStage`)."""
    rejected = regular.packing.rejected
    others = [e for e in regular.state.elements.values() if e.is_op and e.id not in rejected]
    regular.schedule(
        node, now, result, stage=SchedulingStage.REGULAR_PACKING_FALLBACK, excluded=others, one_only=True
    )


def packing_config(tree_config: Any, path: str) -> PackingConfig:
    """The tree config's ``packing`` (kept raw in the model's extras)."""
    raw = (getattr(tree_config, "model_extra", None) or {}).get("packing")
    return PackingConfig.parse(raw, join_path(path, "packing"))
