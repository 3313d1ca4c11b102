"""A shard's preemptive stages need of an operation's preemption classes only what the leader can send: the
truth's two boundaries and the truth's start order of the shard's own allocations (issue 25, the design in
`pooltree/shards/ARCHITECTURE.md`, "Not done" 2).

Recorded runs of the single process are replayed with every heartbeat's stages in the replica of the node's shard
(`ShardStarts`, in one process: the replica's bookings reach the truth as they are made); the replicas' stages read
each class from the truth's boundaries at the read (`ClassBoundaries`) and the truth's number of the allocation,
never from the replica's own lists. The decisions are the recorded ones, and the replicas number their
allocations as the truth does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from recorded_run import BUSY, PREEMPTING, make_scheduler, record_busy_run, record_run

from pooltree.shards.recording import replay
from pooltree.shards.starts import ShardStarts
from pooltree.strategy.elements import OperationRuntime
from pooltree.strategy.model import Allocation, PreemptionStatus
from pooltree.strategy.preemptible import ClassBoundaries, PreemptionClasses
from pooltree.strategy.preemption import PreemptiveStages
from pooltree.strategy.scheduler import TreeScheduler


class _TruthClasses:
    """An operation's classes as the leader would send them: the truth's boundaries, and for an allocation of
    the shard the truth's start order of it."""

    def __init__(self, truth: TreeScheduler, boundaries: ClassBoundaries, reads: list[bool]) -> None:
        self.truth = truth
        self.boundaries = boundaries
        self.reads = reads

    def status(self, allocation: Allocation) -> PreemptionStatus:
        listed = self.truth.allocations[allocation.id]
        self.reads.append(listed.start_order == allocation.start_order)
        return self.boundaries.status(listed)


def _read_from_the_truth(shards: ShardStarts, monkeypatch: pytest.MonkeyPatch, reads: list[bool]) -> None:
    plain = PreemptiveStages.classes

    def classes(stages: PreemptiveStages, runtime: OperationRuntime) -> PreemptionClasses:
        for replicas in shards.replicas:
            for tree, replica in replicas.items():
                if (
                    replica.strategy is not None
                    and replica.strategy.preemption is stages
                    and not replica.applying  # (a preemption increment's record has the truth's class)
                ):
                    truth = shards.trees[tree].core.strategy
                    return _TruthClasses(truth, truth.operations[runtime.id].lists.boundaries(), reads)
        return plain(stages, runtime)  # the truth's own stages (none run in these replays)

    monkeypatch.setattr(PreemptiveStages, "classes", classes)


@pytest.mark.parametrize("run", ["preempting", "busy"])
def test_shard_stages_reading_the_truths_boundaries_decide_as_one_process(
    tmp_path: Path, run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if run == "busy":
        recorder, recorded = record_busy_run(tmp_path / "recorded.db")
        trees = BUSY
    else:
        recorder, recorded = record_run(tmp_path / "recorded.db")
        trees = PREEMPTING
    assert recorded.preempted_count > 0
    scheduler = make_scheduler(tmp_path / "sharded.db", trees)
    shards = ShardStarts(scheduler, 2)
    reads: list[bool] = []
    _read_from_the_truth(shards, monkeypatch, reads)
    assert replay(recorder.recording, scheduler) == recorded
    assert shards.passes > 0 and shards.leader_passes == 0
    assert reads and all(reads), "a replica numbered an allocation otherwise than the truth"
