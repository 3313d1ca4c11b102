"""SchedulerCore end to end: real pool tree runtime, real fair-share update, heartbeats, events (seeds' project)."""

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import MapController, TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import FinishedAllocation, NodeHeartbeat, StarvationStatus
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3
POOLS = {
    "project-root": {
        "strong_guarantee_resources": {"cpu": 100},
        "max_running_operation_count": 10,
        "pools": {
            "project-adhoc": {"strong_guarantee_resources": {"cpu": 80}},
            "project-batch": {"weight": 10, "max_running_operation_count": 1},
            "project-backup": {"strong_guarantee_resources": {"cpu": 20}},
        },
    }
}
NODE = vector(user_slots=10, cpu=10, memory=40 * GiB)


def make_core(**config) -> SchedulerCore:
    tree = PoolTree(parse_pool_trees({"physical": {"config": config, "pools": POOLS}})["physical"])
    core = SchedulerCore(tree)
    for index in range(10):
        core.add_node(f"n{index}", NODE)
    return core


def task(jobs: int) -> list[TaskSpec]:
    return [TaskSpec("main", jobs, vector(user_slots=1, cpu=1, memory=GiB))]


def cycle(core: SchedulerCore, now: float, pending: dict[str, list[FinishedAllocation]]) -> list:
    core.update_fair_share(now)
    results = []
    for index in range(10):
        address = f"n{index}"
        result = core.process_heartbeat(NodeHeartbeat(address, NODE, finished=pending.pop(address, [])), now)
        for record in result.allocations_to_preempt:
            pending.setdefault(address, []).append(FinishedAllocation(record.allocation_id, "aborted"))
        results.append(result)
    return results


def test_project_example_through_scheduler_core():
    core = make_core(fair_share_starvation_tolerance=1.0)
    pending: dict[str, list[FinishedAllocation]] = {}
    assert core.register_operation(
        "batch", MapController("batch", task(300)), user="u", pool="project-batch"
    ) == ("running")
    # the batch pool runs one operation at a time: a second one waits
    assert core.register_operation(
        "batch-2", MapController("batch-2", task(5)), user="u", pool="project-batch"
    ) == ("pending")
    for t in range(3):
        cycle(core, float(t), pending)
    assert core.strategy.element_usage("batch")[1] == 100
    fair = core.last_result.elements["batch"].fair_share
    assert abs(fair[1] - 1.0) < 1e-6
    core.register_operation(
        "adhoc", MapController("adhoc", task(100)), user="u", pool="project-adhoc", now=10
    )
    for t in range(10, 41):
        cycle(core, float(t), pending)
    assert core.strategy.starvation_status("adhoc") == StarvationStatus.NON_STARVING
    for t in range(41, 120):
        cycle(core, float(t), pending)
    assert core.strategy.starvation["adhoc"].starving_since == 41
    # adhoc's fair share: its guarantee 80 plus 1/11 of the remaining 20 by weight (batch has weight 10);
    # with tolerance 1.0 it starves (and preempts 1-cpu allocations) until usage reaches that share
    fair_cpu = core.last_result.elements["adhoc"].fair_share[1] * 100
    assert abs(fair_cpu - (80 + 20 / 11)) < 1e-6
    # it stops at 81: batch's remaining 19 allocations all start below batch's fair share (18.2 cpu), the
    # boundary one included, so none of them is preemptible
    adhoc_usage = core.strategy.element_usage("adhoc")[1]
    assert adhoc_usage == 81
    assert core.operation_view("batch")["preemptible_allocation_count"] == 0
    events = core.drain_events()
    kinds = {event["event"] for event in events}
    assert {
        "operation_started",
        "operation_running",
        "operation_pending",
        "allocation_started",
        "allocation_preempted",
        "allocation_aborted",
    } <= kinds
    preempted = [e for e in events if e["event"] == "allocation_preempted"]
    assert len(preempted) == adhoc_usage
    assert all(e["preemptor_operation_id"] == "adhoc" and e["reason"] == "preemption" for e in preempted)
    view = core.operation_view("batch")
    assert view["progress"]["aborted_job_count_by_reason"] == {"preemption": adhoc_usage}
    # completing the running batch operation lets the pending one run
    aborted = core.unregister_operation("batch", 130.0, state="aborted")
    assert len(aborted) == 100 - adhoc_usage
    events = core.drain_events()
    assert {
        "event": "operation_running",
        "time": 130.0,
        "operation_id": "batch-2",
        "tree": "physical",
    } in events


def test_vanilla_operation_completes_and_is_unregistered_on_update():
    core = make_core()
    core.register_operation("other", MapController("other", task(3)), user="u", pool="project-batch")
    controller = VanillaController("v", task(2))
    core.register_operation("v", controller, user="u", pool="project-adhoc", operation_type="vanilla")
    pending: dict[str, list[FinishedAllocation]] = {}
    results = cycle(core, 0.0, pending)
    started = [a for r in results for a in r.allocations_to_start]
    started = [a for a in started if a.operation_id == "v"]
    assert len(started) == 2
    for allocation in started:
        core.on_allocation_finished(FinishedAllocation(allocation.id, "completed"), 5.0)
    core.update_fair_share(6.0)
    assert "v" not in core.controllers
    assert any(e["event"] == "operation_completed" and e["operation_id"] == "v" for e in core.drain_events())
