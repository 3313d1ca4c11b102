"""Node shards answer the heartbeats the leader proved empty and decide as one process.

Recorded runs of the single-process scheduler (starts, completions, preemptions, and long quiet stretches) are
replayed through shard steps (``InProcessShards``: each node's heartbeat to its shard, which answers it when the
leader's last verdict proves it empty and forwards it otherwise); the started and preempted allocations must be
the recorded ones, while the shards answer a good part of the heartbeats themselves. A scheduler whose state
generation misses changes (none at all, or none after fair-share updates) is caught by the same comparison.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from recorded_run import PREEMPTING, make_scheduler, record_quiet_run, record_run, wavering_memory

from pooltree.node.wire import FinishedJobReport, HeartbeatRequest, RunningJobReport
from pooltree.shards import verdicts
from pooltree.shards.inprocess import InProcessShards
from pooltree.shards.recording import ReplayDivergence, replay
from pooltree.shards.verdicts import PROOF_PROBE, UNUSED_PROOFS, LeaderVerdicts, ShardNodes
from pooltree.strategy.core import SchedulerCore


@pytest.mark.parametrize("count", [1, 2, 3])
def test_shards_decide_as_one_process_on_a_run_with_preemptions(tmp_path: Path, count: int) -> None:
    recorder, recorded = record_run(tmp_path / "recorded.db")
    scheduler = make_scheduler(tmp_path / "sharded.db", PREEMPTING)
    shards = InProcessShards(scheduler, count)
    assert replay(recorder.recording, scheduler, shards) == recorded
    assert recorded.preempted_count > 0
    assert shards.answered > 0


@pytest.mark.parametrize("count", [1, 2])
def test_shards_answer_quiet_stretches_and_decide_as_one_process(tmp_path: Path, count: int) -> None:
    recorder, recorded = record_quiet_run(tmp_path / "recorded.db")
    assert recorded.started_count > 20 and recorded.preempted_count > 0
    scheduler = make_scheduler(tmp_path / "sharded.db", PREEMPTING)
    shards = InProcessShards(scheduler, count)
    assert replay(recorder.recording, scheduler, shards) == recorded
    heartbeats = len(recorded.started)
    assert shards.answered + shards.forwarded == heartbeats
    assert shards.answered >= heartbeats * 0.4  # the idle and full stretches never reach the leader
    # the notes of answered heartbeats reached the leader (but those after the last forwarded heartbeat)
    assert shards.answered - sum(len(s._skips) for s in shards.shards) == shards.leader.applied


@pytest.mark.parametrize("frozen", ["bump", "updated"])
def test_a_generation_that_misses_changes_decides_otherwise(tmp_path: Path, frozen: str) -> None:
    """Without the generation moving on job and operation changes, or on a fair-share update that made an
    operation starve, shards answer heartbeats the leader would give work: the comparison sees it."""
    recorder, recorded = record_quiet_run(tmp_path / "recorded.db")
    scheduler = make_scheduler(tmp_path / "frozen.db", PREEMPTING)
    if frozen == "bump":
        scheduler.generation.bump = lambda: None  # type: ignore[method-assign]
    else:
        scheduler.generation.updated = lambda tree, core: None  # type: ignore[method-assign]
    try:
        decisions = replay(recorder.recording, scheduler, InProcessShards(scheduler, 2))
    except ReplayDivergence:
        return
    assert decisions != recorded


def _heartbeat(
    running: list[RunningJobReport], finished: list[FinishedJobReport] | None = None
) -> HeartbeatRequest:
    return HeartbeatRequest(
        "n1", np.array([2.0, 2.0, 8.0, 0.0, 0.0]), frozenset({"x"}), running, finished or []
    )


def test_a_shard_answers_only_the_proven_heartbeat_at_the_proven_generation() -> None:
    job = RunningJobReport("j1", "op1", "main", (1.0, 1.0, 0.0, 0.0, 0.0), statistics={"t": 1})
    answer = {"start": [], "preempt": [], "abort": [], "acknowledge": [], "heartbeat_period": 1.0}
    shard = ShardNodes()
    shard.remember(_heartbeat([job]), "10.0.0.1", {**answer, "acknowledge": ["j0"]}, (3, {}))
    assert shard.generation == 3
    # the same reports (running jobs' statistics are not read by the scheduler) from the same peer: answered
    same = RunningJobReport("j1", "op1", "main", (1.0, 1.0, 0.0, 0.0, 0.0), statistics={"t": 2})
    assert shard.answer(_heartbeat([same]), "10.0.0.1", 5.0) == answer
    # another peer, a finished job, another usage or memory report, another job: to the leader
    assert shard.answer(_heartbeat([same]), "10.0.0.2", 6.0) is None
    finished = FinishedJobReport("j0", "op1", "main", "completed", 0.0, 1.0)
    assert shard.answer(_heartbeat([same], [finished]), "10.0.0.1", 6.0) is None
    more = RunningJobReport("j1", "op1", "main", (1.0, 1.0, 0.0, 0.0, 0.0), memory_usage=5.0)
    assert shard.answer(_heartbeat([more]), "10.0.0.1", 6.0) is None
    assert shard.answer(_heartbeat([]), "10.0.0.1", 6.0) is None
    # the leader's state moved on: to the leader, until a new verdict
    shard.learn(4)
    assert shard.answer(_heartbeat([same]), "10.0.0.1", 7.0) is None
    shard.learn(2)  # an older generation never goes back
    assert shard.generation == 4
    assert shard.take_skips() == [("n1", 5.0)] and shard.take_skips() == []
    assert shard.answered == 1
    shard.remember(_heartbeat([job]), "10.0.0.1", answer, None)
    assert shard.answer(_heartbeat([same]), "10.0.0.1", 8.0) is None


@pytest.mark.parametrize("count", [1, 2])
def test_shards_decide_as_one_process_with_measured_memory(
    tmp_path: Path, count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs report measured memory that moves at every heartbeat: below the reserve it changes nothing and the
    shards still answer; above it (the accounted usage grows) the heartbeats go to the leader."""
    raised: list[str] = []
    report_usage = SchedulerCore.report_usage

    def counting(core: SchedulerCore, allocation_id: str, reported: np.ndarray) -> bool:
        changed = report_usage(core, allocation_id, reported)
        if changed:
            raised.append(allocation_id)
        return changed

    monkeypatch.setattr(SchedulerCore, "report_usage", counting)
    recorder, recorded = record_quiet_run(tmp_path / "recorded.db", wavering_memory)
    recorded_raises = len(raised)
    assert recorded_raises >= 4  # reports above the reserve raised accounted usage in the recorded run
    raised.clear()
    assert recorded.preempted_count > 0
    scheduler = make_scheduler(tmp_path / "sharded.db", PREEMPTING)
    shards = InProcessShards(scheduler, count)
    assert replay(recorder.recording, scheduler, shards) == recorded
    assert shards.answered >= len(recorded.started) * 0.3
    # every report that raised the accounted usage in one process reached the leader through the shards (a bound
    # above the reserve would let the shards answer some: the usage would differ while decisions may not yet)
    assert len(raised) == recorded_raises


def test_a_shard_lets_memory_vary_up_to_its_bound() -> None:
    job = RunningJobReport("j1", "op1", "main", (1.0, 1.0, 0.0, 0.0, 0.0), memory_usage=100.0)
    other = RunningJobReport("j2", "op1", "main", (1.0, 1.0, 0.0, 0.0, 0.0), memory_usage=500.0)
    answer = {"start": [], "preempt": [], "abort": [], "acknowledge": [], "heartbeat_period": 1.0}
    shard = ShardNodes()
    shard.remember(_heartbeat([job, other]), None, answer, (1, {"j1": 300.0}))

    def with_memory(first: float, second: float) -> HeartbeatRequest:
        return _heartbeat(
            [
                RunningJobReport("j1", "op1", "main", (1.0, 1.0, 0.0, 0.0, 0.0), memory_usage=first),
                RunningJobReport("j2", "op1", "main", (1.0, 1.0, 0.0, 0.0, 0.0), memory_usage=second),
            ]
        )

    assert shard.answer(with_memory(250.0, 500.0), None, 1.0) == answer
    assert shard.answer(with_memory(300.0, 500.0), None, 2.0) == answer
    assert shard.answer(with_memory(301.0, 500.0), None, 3.0) is None  # above j1's bound
    assert shard.answer(with_memory(100.0, 501.0), None, 4.0) is None  # j2 has no bound: exactly as proven


def test_the_leader_proves_a_node_sparingly_while_its_proofs_go_unused(tmp_path: Path) -> None:
    """A node whose last `UNUSED_PROOFS` proofs no shard used (the state moved before its next heartbeat) is proven
    at one quiet heartbeat in `PROOF_PROBE`; the first note of a heartbeat a shard answered for it proves every
    one again. Another node's proofs are not touched."""
    scheduler = make_scheduler(tmp_path / "leader.db", PREEMPTING)
    leader = LeaderVerdicts(scheduler)
    heartbeat = HeartbeatRequest("n1", np.array([2.0, 2.0, 8 << 30, 0.0, 0.0]), frozenset(), [], [])
    other = HeartbeatRequest("n2", np.array([2.0, 2.0, 8 << 30, 0.0, 0.0]), frozenset(), [], [])
    now = 1.0

    def proofs(node: HeartbeatRequest, count: int) -> list[bool]:
        nonlocal now
        made = []
        for _ in range(count):
            now += 1.0
            answer = scheduler.process_heartbeat(node, now)
            made.append(leader.proven(node, answer) is not None)
        return made

    probe = [False] * (PROOF_PROBE - 1) + [True]
    assert proofs(heartbeat, UNUSED_PROOFS) == [True] * UNUSED_PROOFS  # an idle node: provably empty
    assert proofs(heartbeat, 2 * PROOF_PROBE) == probe * 2
    assert leader.proofs_spared == 2 * (PROOF_PROBE - 1)
    assert proofs(other, UNUSED_PROOFS) == [True] * UNUSED_PROOFS
    leader.apply_skips([("n1", now)])  # a shard answered a heartbeat of n1 on its last proof
    assert proofs(heartbeat, UNUSED_PROOFS + 1) == [True] * UNUSED_PROOFS + [False]
    assert proofs(other, PROOF_PROBE) == probe


def test_sparing_proofs_keeps_the_decisions_and_the_quiet_answers(tmp_path: Path) -> None:
    """The run with long idle and full stretches replayed with proofs spared after one unused proof: the same
    decisions, the quiet stretches still answered by the shards, and some proofs spared."""
    recorder, recorded = record_quiet_run(tmp_path / "recorded.db")
    scheduler = make_scheduler(tmp_path / "sharded.db", PREEMPTING)
    shards = InProcessShards(scheduler, 2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verdicts, "UNUSED_PROOFS", 1)
        assert replay(recorder.recording, scheduler, shards) == recorded
    assert shards.leader.proofs_spared > 0
    assert shards.answered >= len(recorded.started) * 0.3
