"""Tentative pool trees in the simulator: an operation runs on trial in its tentative trees too and leaves the ones
where its jobs are too slow.

The rules are the core's, as in the live service (`pooltree/strategy/tentative.py`): which trees are tentative
(``tentative_trees``: the spec's ``tentative_pool_trees``, or the scenario's ``default_tentative_pool_trees`` with
``use_default_tentative_pool_trees``; ``non_tentative_operation_types``), the eligibility each tentative tree's
gate asks before the controller (``attach_eligibility``: the sample, saturation), and the ban after each
completed job (``TentativeEligibility.on_finished``). This part of the simulation only feeds them: at arrival the
operation is registered in its tentative trees as well (one controller for all its trees, as the live service
attaches one), each job's end in the tree of its node is reported with its duration, and a banned tree is left:
the operation's jobs there are aborted (``banned_in_tentative_tree``), its work goes back to its other trees, and
it is unregistered from that tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pooltree.errors import PooltreeError
from pooltree.strategy.model import FinishedAllocation
from pooltree.strategy.tentative import (
    BANNED_IN_TENTATIVE_TREE,
    TentativeEligibility,
    asks_for_tentative_trees,
    attach_eligibility,
    non_tentative_types,
    spec_options,
    tentative_trees,
    with_tentative_trees,
)

if TYPE_CHECKING:
    from pooltree.sim.engine import Simulation
    from pooltree.sim.state import _Job, _Op


class SimulationTentative:
    """The operations of one `Simulation` running in tentative trees (a part it owns)."""

    def __init__(self, simulation: Simulation) -> None:
        self.sim = simulation
        self.operations: dict[str, TentativeEligibility] = {}
        """Operation id → its eligibility, while it runs in some tentative tree."""

    def trees_for(self, op: _Op) -> list[str]:
        """The operation's tentative trees (``ConfigError`` for a bad spec or a missing tree, as at a live start)."""
        spec = op.spec.spec
        if not asks_for_tentative_trees(spec):
            return []
        snapshot = self.sim.scenario.snapshot
        return tentative_trees(
            spec_options(spec),
            op.spec.type,
            snapshot.pool_trees,
            non_tentative_types({name: tree.config for name, tree in snapshot.pool_trees.items()}),
            f"operations.{op.spec.id}.spec",
            defaults=snapshot.default_tentative_pool_trees,
        )

    def attach(self, op: _Op, trees: list[str]) -> None:
        """Register the operation (already registered in its regular tree) in its tentative ``trees``; a tree
        that refuses it is left out (its limits, as a live start would be refused there)."""
        joined = []
        spec = with_tentative_trees(op.spec.spec, list(op.regular_trees), trees)
        for name in trees:
            tree = self.sim.trees[name]
            try:
                state = tree.core.register_operation(
                    op.spec.id,
                    op.controller,
                    user=op.spec.user,
                    operation_type=op.spec.type,
                    pool=op.spec.spec.pool_for_tree(name, op.spec.user),
                    weight=op.spec.spec.weight_for_tree(name),
                    resource_limits=op.spec.spec.resource_limits_for_tree(name),
                    spec=spec,
                    now=self.sim.now,
                )
            except PooltreeError:
                continue
            tree.changed = True
            joined.append(name)
            if state == "running" and op.state == "running":
                self.sim._add_pending(tree, op)
        if not joined:
            return
        op.tentative_trees = tuple(joined)
        snapshot = self.sim.scenario.snapshot
        self.operations[op.spec.id] = attach_eligibility(
            {name: self.sim.trees[name].core.strategy.tentative for name in joined},
            op.spec.id,
            joined,
            spec_options(op.spec.spec),
            {name: snapshot.pool_trees[name].config for name in joined},
        )

    def on_finished(self, job: _Job, finished: FinishedAllocation) -> None:
        """A job ended in the tree of its node: a sample (completed jobs only); the trees it bans are left."""
        op = job.op
        eligibility = self.operations.get(op.spec.id)
        if eligibility is None:
            return
        now = self.sim.now
        tree = job.node.tree
        banned = eligibility.on_finished(job.task.name, tree, finished.state, now - job.start, now)
        for name in banned:
            if name in op.tentative_trees:
                self.leave(op, name)

    def leave(self, op: _Op, name: str) -> None:
        """Take the operation out of tentative tree ``name``: its jobs there are aborted and run again elsewhere."""
        tree = self.sim.trees[name]
        tree.core.strategy.tentative.operations.pop(op.spec.id, None)
        op.tentative_trees = tuple(t for t in op.tentative_trees if t != name)
        jobs = sorted(
            (job for job in self.sim.jobs.values() if job.op is op and job.node.tree == name),
            key=lambda job: job.serial,
        )
        for job in jobs:
            self.sim.job_model.finish_job(
                job, FinishedAllocation(job.allocation.id, "aborted", abort_reason=BANNED_IN_TENTATIVE_TREE)
            )
        if op.spec.id in tree.core.controllers:  # event ``operation_banned_in_tentative_tree`` of that tree
            tree.core.unregister_operation(op.spec.id, self.sim.now, state=BANNED_IN_TENTATIVE_TREE)
        tree.changed = True
        self.sim._drop_pending(tree, op.spec.id)
        if not op.tentative_trees:
            self.operations.pop(op.spec.id, None)

    def finish(self, op: _Op, state: str) -> None:
        """The operation ended: it leaves its tentative trees (their jobs go with it)."""
        for name in op.tentative_trees:
            tree = self.sim.trees[name]
            tree.core.strategy.tentative.operations.pop(op.spec.id, None)
            registered = op.spec.id in tree.core.controllers  # false: that tree's update unregistered it
            leftover = (
                tree.core.unregister_operation(op.spec.id, self.sim.now, state=state) if registered else []
            )
            for allocation in leftover:
                job = self.sim.jobs.get(allocation.id)
                if job is not None:
                    self.sim.job_model.drop_job(job, "aborted" if state != "completed" else "completed")
                    if job.node.alive:
                        self.sim._wake(job.node)
            tree.changed = True
            self.sim._drop_pending(tree, op.spec.id)
        op.tentative_trees = ()
        self.operations.pop(op.spec.id, None)
