"""One test per preemption rule of the seeds (preemption.ru.txt, chyt-resources-and-graceful-preemption.ru.txt) and
yt-semantics §c–e, each named after the option or rule it pins down."""

import numpy as np
from strategykit import Kit
from test_scenarios import fragmented_kit

from pooltree.strategy import AbortReason, SchedulingStage, StarvationStatus, StrategyConfig


def filled_pair(*, filler_pool_options: dict | None = None, interruptible: bool = False, **config) -> Kit:
    """One node of 10 cpu filled by pool a's operation; pool b's operation gets the whole fair share at t=1."""
    kit = Kit(node_count=1, node_cpu=10, config=StrategyConfig(**config))
    kit.pool("a", **(filler_pool_options or {}))
    kit.pool("b")
    kit.operation("filler", "a", jobs=30, interruptible=interruptible)
    kit.set_fair_share({"a": 10, "filler": 10})
    kit.round(0)
    assert kit.usage_cpu("filler") == 10
    kit.operation("hungry", "b", jobs=30)
    kit.set_fair_share({"a": 0, "filler": 0, "b": 10, "hungry": 10})
    kit.publish(1)
    return kit


def test_allocation_preemption_timeout_is_what_interruptible_allocations_get_to_finish():
    kit = filled_pair(allocation_preemption_timeout=15.0, interruptible=True)
    kit.publish(40)  # starving: now > 1 + 30
    result = kit.heartbeat(0, 40.0)
    assert len(result.allocations_to_preempt) == 1
    record = result.allocations_to_preempt[0]
    assert record.reason == AbortReason.PREEMPTION and record.timeout == 15.0 and record.interruptible
    assert record.preemptor_operation_id == "hungry"
    controller = kit.ops["filler"]["controller"]
    pending = controller.pending_allocation_count
    kit.heartbeat(0, 41.0)  # the interrupted job completed in time with half its input: the rest returns
    assert controller.interrupted_job_count == 1
    assert controller.pending_allocation_count == pending + 1
    assert controller.aborted_job_count_by_reason["preemption"] == 0


def test_allocation_preemption_timeout_exceeded_aborts_and_requeues_the_whole_job():
    kit = filled_pair(allocation_preemption_timeout=15.0)
    kit.publish(40)
    result = kit.heartbeat(0, 40.0)
    assert result.allocations_to_preempt[0].timeout == 15.0
    assert not result.allocations_to_preempt[0].interruptible
    controller = kit.ops["filler"]["controller"]
    kit.heartbeat(0, 41.0)  # the node aborted it (not interruptible, or the timeout ran out)
    assert controller.aborted_job_count_by_reason["preemption"] == 1
    assert controller.interrupted_job_count == 0
    assert abs(controller.processed_fraction_pending - controller.pending_allocation_count) < 1e-9


def test_preemptive_scheduling_backoff_limits_preemptive_stages_per_node():
    kit = filled_pair(preemptive_scheduling_backoff=2.0)
    kit.publish(40)
    assert kit.heartbeat(0, 40.0).preemptive_scheduling_performed
    assert not kit.heartbeat(0, 41.0).preemptive_scheduling_performed
    assert not kit.heartbeat(0, 42.0).preemptive_scheduling_performed  # strict: now > last + backoff
    later = kit.heartbeat(0, 42.5)
    assert later.preemptive_scheduling_performed
    assert len(later.allocations_to_start) == 1  # at most one allocation started with preemption
    assert later.scheduled_with_preemption == later.allocations_to_start[0].id


def test_non_preemptible_resource_usage_threshold_protects_a_small_usage_prefix():
    threshold = np.array([4.0, np.inf, np.inf, np.inf, np.inf])  # fewer than 4 slots used before it: kept
    kit = filled_pair(
        filler_pool_options={"non_preemptible_resource_usage_threshold": threshold},
        preemptive_scheduling_backoff=0.0,
    )
    kit.publish(40)
    view = kit.scheduler.element_view("filler")
    assert view["non_preemptible_allocation_count"] == 4
    for t in range(40, 80):
        kit.heartbeat(0, float(t))
    assert kit.usage_cpu("filler") == 4  # never below the threshold, although its fair share is 0
    assert kit.usage_cpu("hungry") == 6
    preempted = kit.ops["filler"]["controller"].aborted_job_count_by_reason["preemption"]
    assert preempted == 6


def test_tree_non_preemptible_resource_usage_threshold_from_max_unpreemptible_running_allocation_count():
    kit = filled_pair(max_unpreemptible_running_allocation_count=3, preemptive_scheduling_backoff=0.0)
    kit.publish(40)
    for t in range(40, 80):
        kit.heartbeat(0, float(t))
    assert kit.usage_cpu("filler") == 3


def test_aggressive_stage_serves_only_aggressively_starving_operations():
    """The seed's example: threshold 0.5, large allocations on a cluster fragmented by small ones."""
    kit = fragmented_kit()
    kit.publish(20)
    for t in range(21, 141, 5):  # starving, not aggressively: only the normal stage may act for large-op
        for result in kit.round(float(t)):
            assert all(
                p.stage != SchedulingStage.PREEMPTIVE_AGGRESSIVE for p in result.allocations_to_preempt
            )
    assert kit.scheduler.starvation_status("large-op") == StarvationStatus.STARVING
    assert kit.usage_cpu("large-op") == 0
    results = kit.round(141.0)
    assert kit.scheduler.starvation_status("large-op") == StarvationStatus.AGGRESSIVELY_STARVING
    records = [p for r in results for p in r.allocations_to_preempt]
    assert records and {p.stage for p in records} == {SchedulingStage.PREEMPTIVE_AGGRESSIVE}
    assert {p.preemptor_operation_id for p in records} == {"large-op"}
    assert any(p.allocation_status.value == "aggressively_preemptible" for p in records)


def test_allow_aggressive_preemption_false_protects_aggressively_preemptible_allocations():
    kit = filled_pair(
        filler_pool_options={"allow_aggressive_preemption": False},
        enable_aggressive_starvation=True,
        aggressive_preemption_satisfaction_threshold=0.5,
        preemptive_scheduling_backoff=0.0,
    )
    kit.set_fair_share({"a": 4, "filler": 4, "b": 6, "hungry": 6})
    kit.publish(2)
    kit.publish(200)
    assert kit.scheduler.starvation_status("hungry") == StarvationStatus.AGGRESSIVELY_STARVING
    view = kit.scheduler.element_view("filler")
    assert view["aggressively_preemptible_allocation_count"] == 2
    records = []
    for t in range(200, 230):
        records.extend(kit.heartbeat(0, float(t)).allocations_to_preempt)
    assert records and all(p.stage == SchedulingStage.PREEMPTIVE_AGGRESSIVE for p in records)
    # the aggressive stage takes Preemptible allocations, but the pool forbids aggressive preemption of the rest
    assert {p.allocation_status.value for p in records} == {"preemptible"}
    assert kit.usage_cpu("filler") == 4


def test_graceful_preemption_asks_preemptible_allocations_to_finish_with_graceful_timeout():
    """preemption_mode graceful: no one needs to wait for the resources, and the timeout may be 10 minutes."""
    kit = Kit(node_count=1, node_cpu=10, config=StrategyConfig(allocation_graceful_preemption_timeout=600.0))
    kit.pool("chyt")
    kit.operation("clique", "chyt", jobs=10, kind="vanilla", preemption_mode="graceful")
    kit.set_fair_share({"chyt": 10, "clique": 10})
    kit.round(0)
    kit.set_fair_share({"chyt": 6, "clique": 6})  # fair share shrinks; no other operation exists at all
    kit.publish(1)
    result = kit.heartbeat(0, 1.0)
    assert len(result.allocations_to_preempt) == 4
    assert all(p.reason == AbortReason.GRACEFUL_PREEMPTION for p in result.allocations_to_preempt)
    assert all(p.stage == SchedulingStage.GRACEFUL_PREEMPTION for p in result.allocations_to_preempt)
    assert all(p.timeout == 600.0 for p in result.allocations_to_preempt)
    kit.heartbeat(0, 2.0)
    assert kit.usage_cpu("clique") == 6  # converged: usage = fair share, no restart above it
    assert not kit.heartbeat(0, 3.0).allocations_to_preempt
