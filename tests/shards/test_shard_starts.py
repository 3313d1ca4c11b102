"""Node shards that start allocations decide as one process.

Recorded runs of the single-process scheduler (starts, completions, preemptions, measured memory above the
reserve) are replayed with the stages of every heartbeat run in the replica of the node's shard (``ShardStarts``:
starts claimed from the leader, the truth brought forward and the replicas fed by increments). The started and
preempted allocations must be the recorded ones; a replica that misses an increment must be caught by the same
comparison.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from recorded_run import (
    BUSY,
    PREEMPTING,
    Node,
    make_scheduler,
    record_busy_run,
    record_quiet_run,
    record_run,
    wavering_memory,
)

from pooltree.resources import RESOURCES
from pooltree.shards import replica as replica_module
from pooltree.shards.inprocess import InProcessShards
from pooltree.shards.recording import RecordingScheduler, ReplayDivergence, replay
from pooltree.shards.replica import TreeReplica
from pooltree.shards.starts import ShardStarts


def swelling_memory(operation_id: str, start: float, now: float) -> float:
    """Jobs started in [10, 11) s measure 5 GiB after 3 s (two of them overcommit their 8-GiB node), others
    100 MiB."""
    return 5 * 2**30 if 10.0 <= start < 11.0 and now - start >= 3.0 else 100 * 2**20


@pytest.mark.parametrize("count", [1, 3])
def test_shards_start_and_preempt_as_one_process(tmp_path: Path, count: int) -> None:
    recorder, recorded = record_run(tmp_path / "recorded.db")
    scheduler = make_scheduler(tmp_path / "sharded.db", PREEMPTING)
    shards = ShardStarts(scheduler, count)
    assert replay(recorder.recording, scheduler) == recorded
    assert recorded.started_count > 0 and recorded.preempted_count > 0
    assert shards.passes > 0 and shards.leader_passes == 0
    claims = sum(r.claims for replicas in shards.replicas for r in replicas.values())
    assert claims >= recorded.started_count


@pytest.mark.parametrize("count", [2])
def test_shards_decide_as_one_process_on_quiet_stretches_and_measured_memory(
    tmp_path: Path, count: int
) -> None:
    for name, memory in (("quiet", None), ("memory", wavering_memory), ("swelling", swelling_memory)):
        recorder, recorded = record_quiet_run(tmp_path / f"{name}-recorded.db", memory)
        assert recorded.started_count > 20 and recorded.preempted_count > 0
        scheduler = make_scheduler(tmp_path / f"{name}-sharded.db", PREEMPTING)
        shards = ShardStarts(scheduler, count)
        assert replay(recorder.recording, scheduler) == recorded, name
        replicas = [r for replicas in shards.replicas for r in replicas.values()]
        assert len(replicas) == count
        # a replica is copied once and follows the truth by increments (publishes and operations too)
        assert sum(r.copies for r in replicas) == count
        assert sum(r.applied for r in replicas) > recorded.started_count


@pytest.mark.parametrize("count", [2, 3])
def test_shards_follow_each_other_between_updates(tmp_path: Path, count: int) -> None:
    """Eight nodes, one heartbeat each per fair-share period: every replica takes the other shards' starts and
    ends between copies, and the decisions (a limited pool, a starving operation that preempts) are the recorded."""
    recorder, recorded = record_busy_run(tmp_path / "recorded.db")
    assert recorded.started_count > 100 and recorded.preempted_count > 0
    scheduler = make_scheduler(tmp_path / "sharded.db", BUSY)
    shards = ShardStarts(scheduler, count)
    assert replay(recorder.recording, scheduler) == recorded
    replicas = [r for replicas in shards.replicas for r in replicas.values()]
    assert sum(r.copies for r in replicas) == count  # then only increments, publishes included
    assert sum(r.applied for r in replicas) > 2 * recorded.started_count
    # in one process a replica is never behind the truth: the leader refuses no claim
    assert sum(r.claims for r in replicas) >= recorded.started_count
    assert sum(r.refused for r in replicas) == 0
    # passes the strategy's own rule proved empty were not run in a replica (and decided the same)
    assert shards.proven_empty > 0 and shards.passes > 0


@pytest.mark.parametrize(
    "dropped",
    [
        "StartCounted",  # a start another shard's pass booked (a leader's start goes as `AllocationStarted`)
        "AllocationFinished",
        "PreemptCounted",  # a victim of another shard's pass (a leader's preemption: `AllocationPreempted`)
        "PendingWork",
        "Published",
        "UsageChanged",
    ],
)
def test_a_replica_that_misses_an_increment_decides_otherwise(
    tmp_path: Path, dropped: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Increments of one kind are lost on their way to the replicas: the replay diverges, or (a replica that
    missed pending work claims starts of an operation that has none left) the leader refuses claims. Usage
    reports above the reserve are in a run where jobs swell past their node's memory, the rest in the busy one."""
    if dropped == "UsageChanged":
        recorder, recorded = record_quiet_run(tmp_path / "recorded.db", swelling_memory)
        trees = PREEMPTING
    else:
        recorder, recorded = record_busy_run(tmp_path / "recorded.db")
        trees = BUSY
    apply = replica_module._apply
    seen = [0]

    def lossy(replica: object, strategy: object, increment: object, owned: bool) -> None:
        if type(increment).__name__ == dropped:
            seen[0] += 1
            return
        apply(replica, strategy, increment, owned)  # type: ignore[arg-type]

    monkeypatch.setattr(replica_module, "_apply", lossy)
    scheduler = make_scheduler(tmp_path / "lossy.db", trees)
    shards = ShardStarts(scheduler, 2)
    try:
        decisions = replay(recorder.recording, scheduler)
    except (ReplayDivergence, KeyError, AssertionError):
        assert seen[0] > 0
        return
    assert seen[0] > 0
    refused = sum(r.refused for replicas in shards.replicas for r in replicas.values())
    assert decisions != recorded or refused > 0


def test_a_tree_a_replica_cannot_decide_is_scheduled_by_the_leader(tmp_path: Path) -> None:
    """With the tree's packing on (a part that keeps per-heartbeat windows of its own), every pass runs on the
    leader's truth, and the decisions are the recorded ones."""
    packing = {
        "default": {
            **PREEMPTING["default"],
            "config": {**PREEMPTING["default"]["config"], "packing": {"enable": True}},
        }
    }
    recorder = RecordingScheduler(make_scheduler(tmp_path / "recorded.db", packing))
    durations: dict[str, float] = {}
    nodes = [Node(f"n{i}", durations) for i in range(3)]
    spec = {"pool": "a", "tasks": {"main": {"command": "true", "cpu_limit": 1, "job_count": 10}}}
    durations[recorder.start_operation("vanilla", spec, "u", 0.0).id] = 1.5
    now = 0.0
    while now < 6.0:
        if now == int(now):
            recorder.update_fair_share("default", now)
        node = nodes[int(now * 4) % len(nodes)]
        node.apply(recorder.heartbeat(node.heartbeat(now), now), now)
        now = round(now + 0.25, 2)
    assert recorder.decisions.started_count >= 10
    scheduler = make_scheduler(tmp_path / "sharded.db", packing)
    shards = ShardStarts(scheduler, 2)
    assert replay(recorder.recording, scheduler) == recorder.decisions
    assert shards.leader_passes == len(recorder.decisions.started) and shards.passes == 0


def test_verdicts_and_shards_that_start_allocations_decide_as_one_process(tmp_path: Path) -> None:
    """The two steps of a node shard together: a heartbeat the leader proved empty is answered by the shard
    (`InProcessShards`), any other has its stages run in the shard's replica (`ShardStarts`). The preemptive
    backoff (2.5 s, nodes heartbeat every second) moves at the heartbeats the shards answered: the replica takes
    it from the leader (without that the replay diverges)."""
    config = {**PREEMPTING["default"]["config"], "preemptive_scheduling_backoff": 2500}
    trees = {"default": {**PREEMPTING["default"], "config": config}}
    recorder, recorded = record_quiet_run(tmp_path / "recorded.db", trees=trees)
    scheduler = make_scheduler(tmp_path / "sharded.db", trees)
    starts = ShardStarts(scheduler, 2)
    verdicts = InProcessShards(scheduler, 2)
    assert replay(recorder.recording, scheduler, verdicts) == recorded
    assert verdicts.answered >= len(recorded.started) * 0.4 and starts.passes > 0


def keep_replicas_behind(
    monkeypatch: pytest.MonkeyPatch, caught_up: Callable[[TreeReplica], None] = lambda replica: None
) -> None:
    """Replicas take their increments late: three passes in four see nothing new, the fourth applies everything
    held since (as shard processes a pipe's latency behind would), then ``caught_up(replica)`` runs; a replica
    copied from the truth is behind in nothing."""
    apply, copy_from = TreeReplica.apply, TreeReplica.copy_from
    held: dict[int, list[object]] = {}
    passes = [0]

    def late(replica: TreeReplica, increments: list[object]) -> None:
        waiting = held.setdefault(id(replica), [])
        waiting.extend(increments)
        passes[0] += 1
        if passes[0] % 4 == 0:
            held[id(replica)] = []
            apply(replica, waiting)  # type: ignore[arg-type]
            caught_up(replica)

    def fresh(replica: TreeReplica, *args: object) -> None:
        held.pop(id(replica), None)  # a copy is the truth itself: nothing is late
        copy_from(replica, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(TreeReplica, "apply", late)
    monkeypatch.setattr(TreeReplica, "copy_from", fresh)


def test_replicas_behind_the_truth_never_overshoot_a_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replicas that take their increments late (three passes in four see nothing new, as shard processes a pipe's
    latency behind would) claim starts in pool ``c`` (cpu limit 5) that the truth has no room for: the leader
    refuses them, and the pool's usage in the truth never goes above its limit."""
    keep_replicas_behind(monkeypatch)
    scheduler = make_scheduler(tmp_path / "behind.db", BUSY)
    shards = ShardStarts(scheduler, 2)
    used: list[float] = []

    def pool_usage() -> None:
        element = scheduler.cores["default"].strategy.state.elements.get("c")
        if element is not None:
            used.append(element.usage[RESOURCES.index("cpu")])

    _, decisions = record_busy_run(tmp_path / "unused.db", scheduler, pool_usage)
    assert decisions.started_count > 50
    assert max(used) == pytest.approx(5.0)  # the pool ran at its limit, never above
    assert sum(r.refused for replicas in shards.replicas for r in replicas.values()) > 0


@pytest.mark.parametrize("serials", [True, False])
def test_replicas_behind_the_truth_take_its_tie_order_when_they_catch_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serials: bool
) -> None:
    """Replicas behind the truth (as above) stamp their own passes' starts before the starts the truth booked
    meanwhile for the other shard; once a replica has applied everything the truth did, every element's
    least-recently-served serial (``last_start``, the heaps' tie order) and the next serial are the truth's,
    because start increments carry the truth's serial (`deltas.at_serial`, `deltas.restamp`). Without the
    serials the replicas' tie order drifts from the truth's (their grants' guesses then miss)."""
    if not serials:
        monkeypatch.setattr(replica_module, "at_serial", lambda strategy, serial: None)
        monkeypatch.setattr(replica_module, "restamp", lambda strategy, operation_id, serial: None)
    compared: list[bool] = []
    scheduler = make_scheduler(tmp_path / "behind.db", BUSY)

    def caught_up(replica: TreeReplica) -> None:
        truth = scheduler.cores["default"].strategy.state
        copy = replica.strategy.state  # type: ignore[union-attr]
        compared.append(
            copy.start_serial == truth.start_serial
            and all(
                element.last_start == truth.elements[element_id].last_start
                for element_id, element in copy.elements.items()
            )
        )

    keep_replicas_behind(monkeypatch, caught_up)
    ShardStarts(scheduler, 2)
    _, decisions = record_busy_run(tmp_path / "unused.db", scheduler)
    assert decisions.started_count > 50 and len(compared) > 20
    if serials:
        assert all(compared)
    else:
        assert not all(compared)


@pytest.mark.parametrize("run", ["busy", "swelling"])
def test_replicas_made_and_fed_in_their_pickling_form_decide_as_one_process(tmp_path: Path, run: str) -> None:
    """Each replica made from the truth's snapshot in bytes (`pickling.snapshot_of`, what a shard process
    receives) and every increment and claim answer passed through `pickling.dumps` / `loads`: the decisions are
    the recorded ones (the busy run: a limited pool, starving preemption; the swelling one: usage reports above the
    reserve, aborts for overcommit)."""
    if run == "busy":
        recorder, recorded = record_busy_run(tmp_path / "recorded.db")
        trees = BUSY
    else:
        recorder, recorded = record_quiet_run(tmp_path / "recorded.db", swelling_memory)
        trees = PREEMPTING
    scheduler = make_scheduler(tmp_path / "pickled.db", trees)
    shards = ShardStarts(scheduler, 2, pickled=True)
    assert replay(recorder.recording, scheduler) == recorded
    replicas = [r for replicas in shards.replicas for r in replicas.values()]
    assert sum(r.copies for r in replicas) == 2 and sum(r.refused for r in replicas) == 0
    assert sum(r.applied for r in replicas) > recorded.started_count
    # publishes of the same structure went as their changes, derived from each replica's own published tree
    assert shards.published_as_changes > 0 and sum(r.published_changes for r in replicas) > 0
    # the replicas hold no controller's object and no payload: only what the pickling form carries
    for replica in replicas:
        assert replica.strategy is not None
        assert all(a.payload is None for a in replica.strategy.allocations.values())
