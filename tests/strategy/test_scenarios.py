"""Heartbeat scenarios on a small in-memory cluster with a fake clock (yt-semantics §e, seeds' examples)."""

import numpy as np
from strategykit import Kit

from pooltree.resources import vector
from pooltree.strategy import AbortReason, SchedulingStage, StarvationStatus, StrategyConfig


def project_kit(**config) -> Kit:
    """The seeds' project: project-root 100 cpu; adhoc 80; batch weight 10; backup 20 (10 nodes of 10 cpu).

    The project sets fair_share_starvation_tolerance 1.0 so its pools starve until they reach the full fair share
    (with the default 0.8 an operation stops starving once usage exceeds 0.8 of it).
    """
    kit = Kit(node_count=10, node_cpu=10, config=StrategyConfig(**config))
    kit.pool("project-root", fair_share_starvation_tolerance=1.0)
    kit.pool("project-adhoc", "project-root")
    kit.pool("project-batch", "project-root", weight=10)
    kit.pool("project-backup", "project-root")
    kit.operation("batch", "project-batch", jobs=500)
    kit.set_fair_share({"project-root": 100, "project-batch": 100, "batch": 100})
    return kit


def run(kit: Kit, start: float, end: float) -> list:
    results = []
    for t in range(int(start), int(end)):
        results.extend(kit.round(float(t)))
    return results


def test_project_example_adhoc_starves_then_preempts_batch_and_backup_gets_guarantee():
    kit = project_kit()
    run(kit, 0, 3)
    assert kit.usage_cpu("batch") == 100  # batch fills the whole cluster
    kit.operation("adhoc", "project-adhoc", jobs=200)
    kit.set_fair_share({"project-adhoc": 80, "adhoc": 80, "project-batch": 20, "batch": 20})
    run(kit, 10, 41)  # adhoc below fair share since 10; starving only when now > 40
    assert kit.scheduler.starvation_status("adhoc") == StarvationStatus.NON_STARVING
    assert kit.usage_cpu("adhoc") == 0
    results = run(kit, 41, 46)
    assert kit.scheduler.starvation_status("adhoc") == StarvationStatus.STARVING
    assert kit.scheduler.starvation["adhoc"].starving_since == 41
    # backoff: preemptive stages ran at 0, 10, 16, ..., 40 (now > last + 5 s), next at 46
    assert not [p for r in results for p in r.allocations_to_preempt]
    results = run(kit, 46, 47)
    assert all(r.preemptive_scheduling_performed for r in results)
    started = [a for r in results for a in r.allocations_to_start if a.operation_id == "adhoc"]
    # one allocation with preemption per node heartbeat; nodes 00 and 01 hold batch's 20 oldest allocations,
    # which stay non-preemptible (first 4) and aggressively preemptible (next 16) within its fair share of 20
    assert sorted(a.node_address for a in started) == [kit.address(i) for i in range(2, 10)]
    preempted = [p for r in results for p in r.allocations_to_preempt]
    assert len(preempted) == 8
    assert all(p.reason == AbortReason.PREEMPTION and p.operation_id == "batch" for p in preempted)
    assert all(p.preemptor_operation_id == "adhoc" for p in preempted)
    # project-root is exactly satisfied, so it blocks; batch allocations are preemptible only within it
    assert all("conditionally preemptible" in p.explanation for p in preempted)
    assert preempted[0].explanation.startswith(
        f"Preempted to start allocation {started[0].id} of operation adhoc"
    )
    run(kit, 47, 101)
    assert kit.usage_cpu("adhoc") == 80
    assert kit.usage_cpu("batch") == 20
    kit.operation("backup", "project-backup", jobs=40)
    kit.set_fair_share(
        {"project-adhoc": 80, "adhoc": 80, "project-batch": 0, "batch": 0, "project-backup": 20, "backup": 20}
    )
    run(kit, 100, 200)
    assert kit.usage_cpu("backup") == 20
    assert kit.usage_cpu("adhoc") == 80
    assert kit.usage_cpu("batch") == 0
    aborted = kit.ops["batch"]["controller"].aborted_job_count_by_reason
    assert aborted["preemption"] == 100  # 80 for adhoc, 20 for backup
    view = kit.scheduler.element_view("adhoc")
    # an allocation is non-preemptible while the usage before it is below FS x 0.2 (0.8 * 0.2 rounds up in floats)
    expected = sum(1 for k in range(80) if k / 100 < 0.8 * 0.2)
    assert view["non_preemptible_allocation_count"] == expected
    assert view["aggressively_preemptible_allocation_count"] == 80 - expected
    assert view["preemptible_allocation_count"] == 0


def test_without_conditional_preemption_the_satisfied_project_root_blocks_preemption():
    kit = project_kit(enable_conditional_preemption=False)
    run(kit, 0, 3)
    kit.operation("adhoc", "project-adhoc", jobs=200)
    kit.set_fair_share({"project-adhoc": 80, "adhoc": 80, "project-batch": 20, "batch": 20})
    run(kit, 10, 60)
    assert kit.scheduler.starvation_status("adhoc") == StarvationStatus.STARVING
    assert kit.usage_cpu("adhoc") == 0


def starving_pair(**config) -> Kit:
    """Pool a's operation fills two-pool cluster; b's operation starves from t=1."""
    kit = Kit(node_count=2, node_cpu=10, config=StrategyConfig(**config))
    kit.pool("a")
    kit.pool("b")
    kit.operation("filler", "a", jobs=100)
    kit.set_fair_share({"a": 20, "filler": 20})
    kit.round(0)
    kit.operation("hungry", "b", jobs=50)
    kit.set_fair_share({"a": 10, "filler": 10, "b": 10, "hungry": 10})
    kit.publish(1)
    kit.publish(40)
    assert kit.scheduler.starvation_status("hungry") == StarvationStatus.STARVING
    return kit


def test_one_preemptive_allocation_per_heartbeat_and_backoff():
    kit = starving_pair()
    # node-01 holds filler's newest allocations (preemptible); node-00 its oldest ones (within fair share)
    first = kit.heartbeat(1, 40.0)
    assert first.preemptive_scheduling_performed
    assert [a.operation_id for a in first.allocations_to_start] == ["hungry"]
    assert len(first.allocations_to_preempt) == 1
    assert first.allocations_to_preempt[0].stage == SchedulingStage.PREEMPTIVE_NORMAL
    for t in (41.0, 43.0, 45.0):  # now > last + 5 s is required
        again = kit.heartbeat(1, t)
        assert not again.preemptive_scheduling_performed
        assert not again.allocations_to_preempt
    later = kit.heartbeat(1, 45.5)
    assert later.preemptive_scheduling_performed
    assert len(later.allocations_to_start) == 1 and len(later.allocations_to_preempt) == 1
    # the first heartbeat of another node always runs the preemptive stages; nothing there is preemptible
    other = kit.heartbeat(0, 45.5)
    assert other.preemptive_scheduling_performed and not other.allocations_to_start
    assert not other.allocations_to_preempt


def test_victims_are_latest_started_preemptible_first():
    kit = starving_pair()
    node = kit.scheduler.nodes[kit.address(1)]
    before = sorted(node.allocations.values(), key=lambda a: a.start_time)
    result = kit.heartbeat(1, 40.0)
    victim = kit.scheduler.allocations.get(result.allocations_to_preempt[0].allocation_id) or None
    assert victim is not None and victim.preemption is not None
    preemptible = [a for a in before if a.preemption_status.value == "preemptible" or a is victim]
    assert victim.start_time == max(a.start_time for a in preemptible)
    assert result.allocations_to_preempt[0].allocation_status.value == "preemptible"


def test_node_overcommit_preempts_latest_allocations():
    kit = starving_pair()
    smaller = vector(user_slots=6, cpu=6, memory=10 * 1024.0**3)
    # node-00 has nothing preemptible, so the preemptive stage cannot use it; the overcommit check then keeps
    # the oldest, least preemptible allocations that fit and preempts the rest
    before = sorted(kit.scheduler.nodes[kit.address(0)].allocations.values(), key=lambda a: a.start_time)
    result = kit.heartbeat(0, 41.0, limits=smaller)
    overcommit = [p for p in result.allocations_to_preempt if p.reason == AbortReason.RESOURCE_OVERCOMMIT]
    assert len(overcommit) == 4
    assert all(p.explanation == "Preempted due to node resource ovecommit" for p in overcommit)
    node = kit.scheduler.nodes[kit.address(0)]
    assert np.all(node.usage <= smaller)
    assert [p.allocation_id for p in overcommit] == [a.id for a in before[6:]]


def test_resource_limits_violation_preempts_down_to_the_limit():
    kit = Kit(node_count=1, node_cpu=10)
    kit.pool("lim")
    kit.operation("op", "lim", jobs=20)
    kit.set_fair_share({"lim": 10, "op": 10})
    kit.round(0)
    assert kit.usage_cpu("op") == 10
    kit.pools["lim"]["specified_resource_limits"] = vector(
        cpu=6, user_slots=np.inf, memory=np.inf, gpu=np.inf, network=np.inf
    )
    kit.set_fair_share({"lim": 6, "op": 6})
    kit.publish(10)
    result = kit.heartbeat(0, 10)
    violated = [p for p in result.allocations_to_preempt if p.reason == AbortReason.RESOURCE_LIMITS_VIOLATED]
    assert len(violated) == 4
    assert violated[0].explanation == 'Preempted due to violation of limits on pool "lim"'
    assert kit.usage_cpu("lim") == 6
    # and regular scheduling respects the hierarchical limit afterwards
    result = kit.heartbeat(0, 20)
    assert not result.allocations_to_start
    assert kit.ops["op"]["controller"].progress()["running_job_count"] <= 10


def fragmented_kit() -> Kit:
    """Seed example: aggressive threshold 0.5; a big-allocation operation on a cluster fragmented by small ones."""
    config = StrategyConfig(
        aggressive_preemption_satisfaction_threshold=0.5,
        enable_aggressive_starvation=True,
        max_schedule_attempts_per_heartbeat=1,
    )
    kit = Kit(node_count=10, node_cpu=10, config=config)
    kit.pool("small")
    kit.pool("large")
    kit.operation("small-op", "small", jobs=300)
    kit.set_fair_share({"small": 100, "small-op": 100})
    for t in range(10):  # round-robin fill: one allocation per node per heartbeat
        kit.round(float(t))
    assert kit.usage_cpu("small-op") == 100
    kit.config.max_schedule_attempts_per_heartbeat = 100
    kit.operation("large-op", "large", jobs=4, cpu=5)
    kit.set_fair_share({"small": 75, "small-op": 75, "large": 25, "large-op": 25})
    return kit


def test_aggressive_starvation_schedules_large_allocations_on_fragmented_cluster():
    kit = fragmented_kit()
    counts = kit.scheduler.element_view("small-op")
    kit.publish(20)
    counts = kit.scheduler.element_view("small-op")
    assert (
        counts["non_preemptible_allocation_count"],
        counts["aggressively_preemptible_allocation_count"],
        counts["preemptible_allocation_count"],
    ) == (38, 37, 25)
    for t in range(
        21, 141, 5
    ):  # starving but only 2-3 preemptible cpu per node: normal preemption cannot help
        kit.round(float(t))
    assert kit.scheduler.starvation_status("large-op") == StarvationStatus.STARVING
    assert kit.usage_cpu("large-op") == 0
    reasons = kit.scheduler.operations["large-op"].deactivation_reasons
    assert reasons["min_needed_resources_unsatisfied"] > 0
    results = kit.round(141.0)  # now > 20 + 120: aggressively starving
    assert kit.scheduler.starvation_status("large-op") == StarvationStatus.AGGRESSIVELY_STARVING
    preempted = [p for r in results for p in r.allocations_to_preempt]
    assert kit.usage_cpu("large-op") > 0
    assert preempted and all(p.reason == AbortReason.AGGRESSIVE_PREEMPTION for p in preempted)
    assert {p.allocation_status.value for p in preempted} <= {"preemptible", "aggressively_preemptible"}
    for result in results:  # victims: exactly what the node needed (minimal set)
        if result.allocations_to_start:
            freed = sum(float(kit.scheduler.nodes[result.address].resource_limits[1]) for _ in [0])
            assert len(result.allocations_to_preempt) == 5 and freed == 10


def test_graceful_clique_converges_to_fair_share_and_is_never_preempted_normally():
    kit = Kit(node_count=2, node_cpu=10)
    kit.pool("chyt")
    kit.operation(
        "clique", "chyt", jobs=20, kind="vanilla", preemption_mode="graceful", interruption_signal="SIGINT"
    )
    kit.set_fair_share({"chyt": 20, "clique": 20})
    kit.round(0)
    assert kit.usage_cpu("clique") == 20
    kit.operation("heavy", "chyt", jobs=100)
    kit.set_fair_share({"chyt": 20, "clique": 5, "heavy": 15})
    results = kit.round(1)
    graceful = [p for r in results for p in r.allocations_to_preempt]
    assert len(graceful) == 15
    assert all(p.reason == AbortReason.GRACEFUL_PREEMPTION for p in graceful)
    assert all(p.timeout == 60.0 and p.interruption_signal == "SIGINT" for p in graceful)
    assert kit.usage_cpu("clique") == 5
    for t in range(2, 60):
        results = kit.round(float(t))
        assert not [p for r in results for p in r.allocations_to_preempt if p.operation_id == "clique"]
    assert kit.usage_cpu("clique") == 5
    assert kit.usage_cpu("heavy") == 15
    controller = kit.ops["clique"]["controller"]
    assert controller.interrupted_job_count == 15 and controller.pending_allocation_count == 15
    assert kit.scheduler.element_view("clique")["deactivation_reasons"]["fair_share_exceeded"] > 0


def test_interrupted_map_job_returns_unprocessed_input_and_scheduling_tag_filter():
    kit = starving_pair()
    controller = kit.ops["filler"]["controller"]
    pending_before = controller.pending_allocation_count
    kit.ops["filler"]["controller"]._tasks["main"].spec.interruptible = True
    for allocation in kit.scheduler.operations["filler"].lists:
        allocation.interruptible = True
    result = kit.heartbeat(1, 40.0)
    assert result.allocations_to_preempt[0].interruptible
    kit.heartbeat(1, 41.0)  # node reports the interrupted job completed with half its input processed
    assert controller.interrupted_job_count == 1
    assert controller.pending_allocation_count == pending_before + 1
    assert abs(controller.processed_fraction_pending - (pending_before + 0.5)) < 1e-9
    kit.ops["hungry"]["scheduling_tag_filter"] = lambda tags: "gpu" in tags
    kit.publish(42)
    blocked = kit.heartbeat(1, 60.0)
    assert not [a for a in blocked.allocations_to_start if a.operation_id == "hungry"]
    assert kit.scheduler.element_view("hungry")["deactivation_reasons"]["scheduling_tag_filter_mismatch"] >= 1
