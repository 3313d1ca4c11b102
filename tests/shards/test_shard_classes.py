"""Replicas that never hold another shard's allocation decide as one process (issue 25, step 2 of
`pooltree/shards/ARCHITECTURE.md`, "Not done" 2).

Recorded runs of the single process are replayed with every heartbeat's stages in the replica of the node's shard
(`ShardStarts`, 2 shards in one process). Each replica holds only its own nodes' allocations: other nodes' starts,
ends, preemptions and usage reports reach it as deltas of their operation (`deltas.py`), and it keeps no
preemptible lists: its stages classify its allocations by the leader's boundaries (`ClassesMoved` after each
batch) and, for an operation its own pass changed, by the leader's answer to a class query. Every class a
replica's stages read is the truth's at that read, and the decisions are the recorded ones. With a wrong boundary,
without the queries, or with a delta missing, the same replays decide otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from recorded_run import BUSY, PREEMPTING, make_scheduler, record_busy_run, record_run

from pooltree.shards import deltas, replica
from pooltree.shards.deltas import ClassesMoved
from pooltree.shards.recording import RecordingScheduler, ReplayDivergence, replay
from pooltree.shards.replica import TreeReplica
from pooltree.shards.starts import ShardStarts
from pooltree.strategy.elements import OperationRuntime
from pooltree.strategy.preemptible import ClassBoundaries
from pooltree.strategy.preemption import PreemptiveStages

_RUNS = ["preempting", "busy"]


def _recorded(tmp_path: Path, run: str) -> tuple[RecordingScheduler, Any, dict[str, Any]]:
    if run == "busy":
        recorder, recorded = record_busy_run(tmp_path / "recorded.db")
        return recorder, recorded, BUSY
    recorder, recorded = record_run(tmp_path / "recorded.db")
    return recorder, recorded, PREEMPTING


def _check_reads(shards: ShardStarts, monkeypatch: pytest.MonkeyPatch, reads: list[tuple[str, bool]]) -> None:
    """Each class a replica's stages read is compared with the truth's class of the same allocation then."""
    plain = TreeReplica.classes

    class Checked:
        def __init__(self, held: TreeReplica, boundaries: ClassBoundaries) -> None:
            self.held = held
            self.boundaries = boundaries

        def status(self, allocation: Any) -> Any:
            got = self.boundaries.status(allocation)
            truth = shards.trees[self.held.tree].core.strategy
            listed = truth.allocations[allocation.id]
            reads.append((allocation.id, got == truth.preemption.status(listed)))
            return got

    def classes(self: TreeReplica, runtime: OperationRuntime) -> Any:
        return Checked(self, plain(self, runtime))

    monkeypatch.setattr(TreeReplica, "classes", classes)


def _assert_holds_only_its_own(shards: ShardStarts) -> None:
    for replicas in shards.replicas:
        for held in replicas.values():
            strategy = held.strategy
            assert strategy is not None
            assert all(held.owns(a.node_address) for a in strategy.allocations.values())
            # its stages read classes through the reader handed to them, no method replaced on the instance
            assert "classes" not in vars(strategy.preemption)
            assert strategy.preemption.class_reader == held.classes
            assert all(
                not node.allocations for address, node in strategy.nodes.items() if not held.owns(address)
            )


@pytest.mark.parametrize("run", _RUNS)
def test_replicas_without_other_shards_allocations_decide_as_one_process(
    tmp_path: Path, run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder, recorded, trees = _recorded(tmp_path, run)
    assert recorded.preempted_count > 0
    # every preemptive stage analyses its node, as before the skip of stages with nothing to start or stop
    # (`PreemptiveStages._nothing_to_stop`): their class reads are what the replicas answer here
    monkeypatch.setattr(PreemptiveStages, "_nothing_to_stop", lambda self, node: False)
    scheduler = make_scheduler(tmp_path / "sharded.db", trees)
    shards = ShardStarts(scheduler, 2)
    reads: list[tuple[str, bool]] = []
    _check_reads(shards, monkeypatch, reads)
    counted: list[str] = []
    count_start = replica.count_start
    monkeypatch.setattr(
        replica,
        "count_start",
        lambda strategy, op, amounts, serial=0: (
            counted.append(op),
            count_start(strategy, op, amounts, serial),
        ),
    )
    assert replay(recorder.recording, scheduler) == recorded
    assert shards.passes > 0 and shards.leader_passes == 0
    assert reads and all(ok for _, ok in reads), [read for read in reads if not read[1]][:5]
    assert counted, "no replica applied another shard's start as a delta"
    assert sum(held.class_queries for replicas in shards.replicas for held in replicas.values()) > 0
    _assert_holds_only_its_own(shards)


def _replay_with(tmp_path: Path, run: str) -> bool:
    recorder, recorded, trees = _recorded(tmp_path, run)
    scheduler = make_scheduler(tmp_path / "sharded.db", trees)
    ShardStarts(scheduler, 2)
    try:
        return replay(recorder.recording, scheduler) == recorded
    except ReplayDivergence:
        return False


@pytest.mark.parametrize("run", _RUNS)
def test_a_wrong_boundary_decides_otherwise(
    tmp_path: Path, run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every batch's boundaries one start later than the truth's: the replicas classify otherwise."""
    apply = replica._apply

    def shifted(held: TreeReplica, strategy: Any, increment: Any, owned: bool) -> None:
        if isinstance(increment, ClassesMoved):
            increment = ClassesMoved(tuple((op, a + 1, p + 1) for op, a, p in increment.boundaries))
        apply(held, strategy, increment, owned)

    monkeypatch.setattr(replica, "_apply", shifted)
    assert not _replay_with(tmp_path, run)


def test_without_class_queries_the_replicas_decide_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica reading the batch's boundaries also for an operation its own pass changed misclassifies (the
    busy run: its passes start and then preempt within one heartbeat; the preempting run never reads a class its
    own pass moved)."""
    plain = TreeReplica.classes

    def classes(self: TreeReplica, runtime: OperationRuntime) -> Any:
        self.marked.clear()
        return plain(self, runtime)

    monkeypatch.setattr(TreeReplica, "classes", classes)
    assert not _replay_with(tmp_path, "busy")


@pytest.mark.parametrize("missing", ["count_start", "count_finish", "count_preempt"])
def test_a_missing_delta_decides_otherwise(
    tmp_path: Path, missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replica, missing, lambda *args: None)
    assert not _replay_with(tmp_path, "busy")


def test_an_operation_without_allocations_has_no_preemptible_allocation() -> None:
    assert ClassBoundaries(float("inf"), float("inf")) == deltas.NO_BOUNDARIES
