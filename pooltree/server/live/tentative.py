"""Tentative pool trees in the live service: an operation started with ``tentative_pool_trees`` runs in them too,
and leaves one once its jobs there are too slow (the rules: `pooltree/strategy/tentative.py`).

At start the tentative trees (YTsaurus's ``GetOperationPoolTrees``: missing trees refused unless
``ignore_missing_pool_trees``, trees whose ``non_tentative_operation_types`` list the type left out) are added to
the trees the operation is registered in; their ``scheduling_options_per_pool_tree`` entry says
``tentative: true``, as YTsaurus's runtime parameters do. Each tentative tree's scheduler gets the operation's
eligibility in its :class:`~pooltree.strategy.tentative.TentativeGate` (which counts the jobs it starts). Job ends
are fed to the eligibility; a tree banned by a completed job is left after the heartbeat's reports are read: the operation's
entry there is erased (committed first) and its jobs there are aborted with ``banned_in_tentative_tree``
(YTsaurus's ``OnOperationBannedInTentativeTree``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pooltree.server.live.orphans import leave_trees
from pooltree.strategy.tentative import (
    BANNED_IN_TENTATIVE_TREE,
    TentativeEligibility,
    attach_eligibility,
    non_tentative_types,
    tentative_trees,
)

if TYPE_CHECKING:
    from pooltree.node.wire import FinishedJobReport
    from pooltree.server.live.model import LiveJob, LiveOperation
    from pooltree.server.live.scheduler import LiveScheduler


class LiveTentative:
    """The eligibility of each operation running in tentative trees, and the bans to carry out."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler
        self.operations: dict[str, TentativeEligibility] = {}
        self.pending_bans: dict[str, list[str]] = {}
        """Operation id → trees banned by the reports of the current heartbeat (left by :meth:`apply_bans`)."""

    def trees_for_start(self, spec: Mapping[str, Any], operation_type: str) -> list[str]:
        """The tentative trees of a new operation (raises ``ConfigError`` for a bad spec or a missing tree)."""
        return tentative_trees(
            spec,
            operation_type,
            self.scheduler.registry.trees,
            non_tentative_types({name: tree.config for name, tree in self.scheduler.registry.trees.items()}),
            defaults=self.scheduler.default_tentative_pool_trees,
        )

    def attach(self, op: LiveOperation, trees: list[str]) -> None:
        """Give the operation's eligibility to the schedulers of its tentative ``trees`` and mark them in its
        runtime parameters."""
        if not trees:
            return
        scheduler = self.scheduler
        self.operations[op.id] = attach_eligibility(
            {tree: scheduler.cores[tree].strategy.tentative for tree in trees},
            op.id,
            trees,
            op.spec,
            {tree: scheduler.registry.trees[tree].config for tree in trees},
        )
        per_tree = op.runtime_parameters.get("scheduling_options_per_pool_tree") or {}
        for tree in trees:
            if tree in per_tree:
                per_tree[tree] = {**per_tree[tree], "tentative": True}

    def forget(self, operation_id: str) -> None:
        eligibility = self.operations.pop(operation_id, None)
        self.pending_bans.pop(operation_id, None)
        if eligibility is None:
            return
        for tree in eligibility.trees:
            core = self.scheduler.cores.get(tree)
            if core is not None:
                core.strategy.tentative.operations.pop(operation_id, None)

    def on_finished(self, job: LiveJob, report: FinishedJobReport, now: float) -> None:
        """A job's end as its node reports it; its duration is the node's (start to finish, as YTsaurus's
        prepare + exec duration), else the scheduler's."""
        eligibility = self.operations.get(job.operation_id)
        if eligibility is None or not job.tree:
            return
        start = report.start_time if report.start_time else job.start_time
        duration = max(0.0, (report.finish_time or job.finish_time or now) - start)
        state = report.state
        banned = eligibility.on_finished(job.task_name, job.tree, state, duration, now)
        if banned:
            self.pending_bans.setdefault(job.operation_id, []).extend(banned)

    def apply_bans(self, now: float) -> None:
        """Take each operation out of the tentative trees banned for it; its jobs there are aborted."""
        bans, self.pending_bans = self.pending_bans, {}
        for operation_id, trees in bans.items():
            op = self.scheduler.operations.get(operation_id)
            if op is None or op.is_final:
                continue
            gone = [tree for tree in trees if tree in op.trees]
            for tree in gone:
                core = self.scheduler.cores.get(tree)
                if core is not None:
                    core.strategy.tentative.operations.pop(operation_id, None)
            if gone and len(gone) < len(op.trees):
                leave_trees(self.scheduler, op, gone, now, reason=BANNED_IN_TENTATIVE_TREE)
