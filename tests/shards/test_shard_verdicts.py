"""Node shards answer the heartbeats the leader proved empty and decide as one process.

Recorded runs of the single-process scheduler (starts, completions, preemptions, and long quiet stretches) are
replayed through shard steps (``InProcessShards``: each node's heartbeat to its shard, which answers it when the
leader's last verdict proves it empty and forwards it otherwise); the started and preempted allocations must be
the recorded ones, while the shards answer a good part of the heartbeats themselves. A scheduler whose state
generation misses changes (none at all, or none after fair-share updates) is caught by the same comparison.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from recorded_run import (
    PREEMPTING,
    make_scheduler,
    record_full_run,
    record_quiet_run,
    record_run,
    wavering_memory,
)

from pooltree.node import wire
from pooltree.node.wire import FinishedJobReport, HeartbeatRequest, RunningJobReport
from pooltree.server.job_commands import JobCommands
from pooltree.server.live import generation
from pooltree.shards import verdicts
from pooltree.shards.inprocess import InProcessShards
from pooltree.shards.recording import ReplayDivergence, replay
from pooltree.shards.verdicts import (
    PROOF_PROBE,
    UNUSED_PROOFS,
    LeaderVerdicts,
    Proven,
    ShardNodes,
    StartEntryResources,
    expected_next,
    proven,
)
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.model import Allocation


def _two_cpu_heartbeat(address: str, now: float, running: list[dict[str, object]]) -> dict[str, object]:
    """A heartbeat of a 2-cpu, 2-slot node running ``running`` and reporting nothing finished."""
    return wire.heartbeat(
        address,
        sequence=0,
        time=now,
        resource_limits={"user_slots": 2, "cpu": 2, "memory": 8 << 30},
        resource_usage={},
        memory_limit=8 << 30,
        memory_usage=0,
        memory_meter="none",
        running_jobs=running,
        finished_jobs=[],
    )


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
    """Without the generation moving on operation changes, or on a fair-share update that made an operation
    starve, shards answer heartbeats the leader would give work: the comparison sees it."""
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


@pytest.mark.parametrize("count", [1, 2, 3])
def test_full_nodes_are_answered_while_jobs_start_elsewhere(tmp_path: Path, count: int) -> None:
    """A busy run (jobs start and end somewhere at nearly every heartbeat): the heartbeats of nodes full of long
    jobs are answered by the shards on their full-node proofs although the generation moved, and the decisions
    are the recorded ones, the preemptions on full nodes of an operation that starts to starve included."""
    recorder, recorded = record_full_run(tmp_path / "recorded.db")
    assert recorded.preempted_count > 0 and recorded.started_count > 50
    scheduler = make_scheduler(tmp_path / "sharded.db", PREEMPTING)
    shards = InProcessShards(scheduler, count)
    assert replay(recorder.recording, scheduler, shards) == recorded
    full = sum(shard.answered_full for shard in shards.shards)
    assert full >= 15  # none without the full-node proofs: the generation moves at every start and end
    assert shards.answered >= len(recorded.started) * 0.28


def test_the_heartbeat_after_starts_is_answered_when_it_reports_them_as_started(tmp_path: Path) -> None:
    """The leader proves the heartbeat its answer with starts leads to (the started jobs reported running with
    the resources of their start entries): the shard answers it; one that does not report a started job, or
    reports other resources, goes to the leader."""
    scheduler = make_scheduler(tmp_path / "leader.db", PREEMPTING)
    shards = InProcessShards(scheduler, 1)
    spec = {"pool": "a", "tasks": {"main": {"command": "true", "cpu_limit": 1, "job_count": 6}}}
    scheduler.start_operation("vanilla", spec, "u", 0.0)
    scheduler.update_fair_share("default", 0.0)

    def beat(address: str, now: float, running: list[dict[str, object]]) -> dict[str, object]:
        data = _two_cpu_heartbeat(address, now, running)
        return shards(data, now)

    def reports(
        answer: dict[str, object], resources: dict[str, float] | None = None
    ) -> list[dict[str, object]]:
        return [
            wire.running_job(
                entry["job_id"],
                entry["operation_id"],
                entry["task_name"],
                start_time=0.0,
                resource_usage=resources or entry["resources"],
            )
            for entry in answer[wire.START]  # type: ignore[union-attr]
        ]

    first = beat("n1", 1.0, [])
    assert len(first[wire.START]) == 2  # type: ignore[arg-type]
    assert beat("n1", 2.0, reports(first)) == {**first, wire.START: []}
    assert shards.answered == 1 and shards.forwarded == 1
    other = beat("n2", 2.0, [])
    assert len(other[wire.START]) == 2  # type: ignore[arg-type]
    beat("n2", 3.0, reports(other)[:1])  # a job the node did not start: to the leader (it aborts it later)
    assert shards.answered == 1 and shards.forwarded == 3
    third = beat("n3", 3.0, [])
    beat("n3", 4.0, reports(third, {"user_slots": 1, "cpu": 1}))  # not the start's resources: to the leader
    assert shards.answered == 1 and shards.forwarded == 5


def test_full_node_proofs_without_the_tree_flags_decide_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When what a full node's proof reads of the whole tree is not compared (a starving operation, which
    preempts on full nodes), the shards answer full nodes' heartbeats that the leader would preempt on."""
    recorder, recorded = record_full_run(tmp_path / "recorded.db")
    monkeypatch.setattr(generation, "full_flags", lambda core: ())
    scheduler = make_scheduler(tmp_path / "frozen.db", PREEMPTING)
    try:
        decisions = replay(recorder.recording, scheduler, InProcessShards(scheduler, 2))
    except ReplayDivergence:
        return
    assert decisions != recorded


class _Context:
    def __init__(self, **params: str) -> None:
        self.params = params

    def str_param(self, name: str) -> str:
        return self.params[name]


def test_a_job_aborted_on_a_full_node_voids_its_proof(tmp_path: Path) -> None:
    """A stop queued for a full node outside its heartbeats (``abort_job``) moves the node's stamp: the shard
    forwards the node's next heartbeat, whose answer carries the abort; another full node stays answered."""
    scheduler = make_scheduler(tmp_path / "leader.db", PREEMPTING)
    shards = InProcessShards(scheduler, 1)
    spec = {"pool": "a", "tasks": {"main": {"command": "true", "cpu_limit": 1, "job_count": 4}}}
    scheduler.start_operation("vanilla", spec, "u", 0.0)
    scheduler.update_fair_share("default", 0.0)
    running: dict[str, list[dict[str, object]]] = {"n1": [], "n2": []}

    def beat(address: str, now: float) -> dict[str, object]:
        data = _two_cpu_heartbeat(address, now, running[address])
        answer = shards(data, now)
        for entry in answer[wire.START]:
            running[address].append(
                wire.running_job(
                    entry["job_id"],
                    entry["operation_id"],
                    "main",
                    start_time=now,
                    resource_usage={"user_slots": 1, "cpu": 1},
                )
            )
        return answer

    for now, address in [(1.0, "n1"), (1.0, "n2"), (2.0, "n1"), (2.0, "n2")]:
        beat(address, now)  # both full (2 jobs each); then proven full
    scheduler.update_fair_share("default", 2.5)
    answered = shards.answered
    beat("n1", 3.0)
    beat("n2", 3.0)
    assert shards.answered == answered + 2
    victim = str(running["n1"][0]["job_id"])
    JobCommands(scheduler, lambda ctx: "").abort_job(_Context(job_id=victim))  # type: ignore[arg-type]
    answer = beat("n1", 4.0)
    assert [entry["job_id"] for entry in answer[wire.ABORT]] == [victim]
    assert shards.answered == answered + 2
    beat("n2", 4.0)  # n2's proof holds: only n1's stamp moved
    assert shards.answered == answered + 3


def _heartbeat(
    running: list[RunningJobReport], finished: list[FinishedJobReport] | None = None
) -> HeartbeatRequest:
    return HeartbeatRequest(
        "n1", np.array([2.0, 2.0, 8.0, 0.0, 0.0]), frozenset({"x"}), running, finished or []
    )


def _kept(
    heartbeat: HeartbeatRequest,
    answer: dict[str, Any],
    generation: int,
    bounds: dict[str, float],
    full: tuple[int, int] | None,
) -> Proven:
    """The leader's proof of ``heartbeat``'s next one after ``answer`` as a shard keeps it."""
    expected = expected_next(heartbeat, answer, StartEntryResources())
    assert expected is not None
    return proven((generation, bounds, full, expected), answer)


def test_a_shard_answers_only_the_proven_heartbeat_at_the_proven_generation() -> None:
    job = RunningJobReport("j1", "op1", "main", (1.0, 1.0, 0.0, 0.0, 0.0), statistics={"t": 1})
    answer = {"start": [], "preempt": [], "abort": [], "acknowledge": [], "heartbeat_period": 1.0}
    shard = ShardNodes()
    shard.remember("n1", "10.0.0.1", _kept(_heartbeat([job]), {**answer, "acknowledge": ["j0"]}, 3, {}, None))
    assert shard.generation == 3
    # what a shard process decodes a body for: a verdict from that peer that holds at the latest generation
    assert shard.holds("n1", "10.0.0.1") and not shard.holds("n1", "10.0.0.2") and not shard.holds("n2", None)
    # the same reports (the same statistics: the leader has them) from the same peer: answered
    same = RunningJobReport("j1", "op1", "main", (1.0, 1.0, 0.0, 0.0, 0.0), statistics={"t": 1})
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
    assert shard.answer(_heartbeat([same]), "10.0.0.1", 7.0) is None and not shard.holds("n1", "10.0.0.1")
    shard.learn(2)  # an older generation never goes back
    assert shard.generation == 4
    assert shard.take_skips() == [("n1", 5.0)] and shard.take_skips() == []
    assert shard.answered == 1
    shard.remember("n1", "10.0.0.1", None)
    assert shard.answer(_heartbeat([same]), "10.0.0.1", 8.0) is None


def test_a_full_nodes_verdict_holds_while_its_stamp_and_the_coarse_counter_do() -> None:
    job = RunningJobReport("j1", "op1", "main", (1.0, 1.0, 0.0, 0.0, 0.0))
    answer = {"start": [], "preempt": [], "abort": [], "acknowledge": [], "heartbeat_period": 1.0}
    shard = ShardNodes()
    shard.remember("n1", None, _kept(_heartbeat([job]), answer, 7, {}, (5, 6)))
    assert (shard.generation, shard.coarse, shard.stamps) == (7, 5, {"n1": 6})
    shard.learn(
        9, 5, [("n2", 8)]
    )  # another node's job and pending work moved: the generation, not n1's stamp
    assert shard.holds("n1", None) and shard.answer(_heartbeat([job]), None, 1.0) == answer
    assert shard.answered_full == 1
    shard.learn(10, 5, [("n1", 10)])  # n1's own change (a stop queued for it): to the leader
    assert not shard.holds("n1", None) and shard.answer(_heartbeat([job]), None, 2.0) is None
    shard.remember("n1", None, _kept(_heartbeat([job]), answer, 11, {}, (5, 10)))
    shard.learn(12, 5, [("n1", 10)])
    assert shard.answer(_heartbeat([job]), None, 3.0) == answer
    shard.learn(13, 13)  # a change that can give any node work: to the leader
    assert shard.answer(_heartbeat([job]), None, 4.0) is None
    # a verdict of a node that could start more holds at its generation only
    shard.remember("n1", None, _kept(_heartbeat([job]), answer, 13, {}, None))
    shard.learn(14, 13, [("n2", 14)])
    assert shard.answer(_heartbeat([job]), None, 5.0) is None


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
    shard.remember("n1", None, _kept(_heartbeat([job, other]), answer, 1, {"j1": 300.0}, None))

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


def test_a_shard_leaves_new_running_statistics_to_the_leader() -> None:
    """The leader keeps a running job's last statistics (``get_job``): a heartbeat sending other statistics than the
    proven one goes to the leader; one with the same (none, between the node's sends) is answered."""
    usage = (1.0, 1.0, 0.0, 0.0, 0.0)
    answer = {"start": [], "preempt": [], "abort": [], "acknowledge": [], "heartbeat_period": 1.0}
    shard = ShardNodes()
    proven_job = RunningJobReport("j1", "op1", "main", usage)
    shard.remember("n1", None, _kept(_heartbeat([proven_job]), answer, 1, {}, None))

    def with_statistics(statistics: dict[str, float]) -> HeartbeatRequest:
        return _heartbeat([RunningJobReport("j1", "op1", "main", usage, statistics=statistics)])

    assert shard.answer(with_statistics({}), None, 1.0) == answer
    assert shard.answer(with_statistics({"time/total": 1000.0}), None, 2.0) is None


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
            with scheduler.lock:
                made.append(leader.prove(node, answer) is not None)
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
    decisions, the quiet stretches still answered by the shards, and some proofs spared. (Its nodes report one
    slot and one cpu per job, not their start entries' resources, so every proof after starts goes unused here
    and counts toward the sparing: fewer heartbeats are answered than without sparing.)"""
    recorder, recorded = record_quiet_run(tmp_path / "recorded.db")
    scheduler = make_scheduler(tmp_path / "sharded.db", PREEMPTING)
    shards = InProcessShards(scheduler, 2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verdicts, "UNUSED_PROOFS", 1)
        assert replay(recorder.recording, scheduler, shards) == recorded
    assert shards.leader.proofs_spared > 0
    assert shards.answered >= len(recorded.started) * 0.25


def test_start_entry_resources_are_read_as_a_report_and_kept_per_owner_within_the_limit() -> None:
    """A start entry's resources read as the node's report of them (``parse_resources``), kept per distinct map by
    the `StartEntryResources` that read them (each `LeaderVerdicts` owns its own; none is module state), and
    forgotten all at once past the limit."""
    entry = {"cpu": 1, "memory": "1Gi", "user_slots": 1}
    mine, other = verdicts.StartEntryResources(), verdicts.StartEntryResources()
    read = mine.reported(entry)
    assert read == tuple(verdicts.parse_resources(entry, "resources").tolist())
    assert mine.reported(dict(reversed(list(entry.items())))) is read  # the same map in another order
    assert other.reported(entry) == read and other.reported(entry) is not read
    for index in range(verdicts._REPORTED_LIMIT + 1):
        mine.reported({"cpu": index, "user_slots": 1})
    assert len(mine._known) <= verdicts._REPORTED_LIMIT
    assert mine.reported(entry) == read
    assert LeaderVerdicts(None).entries is not LeaderVerdicts(None).entries  # type: ignore[arg-type]


def test_memory_bounds_follow_the_rule_and_are_computed_once_per_distinct_inputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job's memory bound is the rule's (``RunningJobReport.counted_usage``, ``usage_above_reserve``: its
    reserve's memory when a report at the reserve leaves the accounted usage as it is, else none), for a reserve
    that is the resources and one a report raised; the jobs that share their inputs share one computation; past the limit all are forgotten."""
    computed: list[object] = []
    rule = verdicts.usage_above_reserve

    def counted(reserve: np.ndarray, reported: np.ndarray) -> np.ndarray:
        computed.append(reserve)
        return rule(reserve, reported)

    monkeypatch.setattr(verdicts, "usage_above_reserve", counted)

    def allocation(name: str, resources: list[float], reserve: list[float] | None = None) -> Allocation:
        made = Allocation(name, "op", np.array(resources), node_address="n1")
        if reserve is not None:
            made.reserve = np.array(reserve)
        return made

    def expected(usage: tuple[float, ...], made: Allocation) -> float | None:
        memory = float(made.reserve[verdicts.MEMORY])
        report = RunningJobReport("j", "op", "main", usage, memory)
        above = rule(made.reserve, report.counted_usage)
        return memory if np.array_equal(above, made.resources) else None

    bounds = verdicts.MemoryBounds()
    gib = float(1 << 30)
    usage = (1, 1.0, 0, gib, 0)
    cases = [
        (usage, allocation("a", [1.0, 1.0, 0.0, gib, 0.0])),  # at the reserve: bound = the reserve
        (usage, allocation("b", [1.0, 1.0, 0.0, 2 * gib, 0.0], [1.0, 1.0, 0.0, gib, 0.0])),  # raised: none
        (
            (1, 1.0, 0, 2 * gib, 0),
            allocation("c", [1.0, 1.0, 0.0, gib, 0.0]),
        ),  # reports more than its reserve
        ((1, 2.0, 0, gib, 0), allocation("d", [1.0, 1.0, 0.0, gib, 0.0])),  # reports more cpu than accounted
    ]
    answers = [bounds.bound(u, made) for u, made in cases]
    assert answers == [expected(u, made) for u, made in cases]
    assert answers[0] == gib and answers[1] is None
    assert len(computed) == 4
    for index in range(5):  # jobs with the same inputs: no computation of their own
        assert bounds.bound(usage, allocation(f"e{index}", [1.0, 1.0, 0.0, gib, 0.0])) == gib
    assert len(computed) == 4
    for index in range(verdicts._BOUNDS_LIMIT + 1):
        bounds.bound((1, float(index), 0, gib, 0), allocation("f", [1.0, float(index), 0.0, gib, 0.0]))
    assert len(bounds._known) <= verdicts._BOUNDS_LIMIT
