"""The tree's ``default_gpu_full_host_preemption`` (issue 30): a starving full-host GPU operation of the default
segment that waited past ``timeout`` clears a whole host in a stage of its own, unless too much non-preemptible
progress would be lost.

Two hosts of 8 GPUs. ``a0`` fills host h0 and ``a1`` host h1 with 1-GPU jobs; then ``full`` asks for one 8-GPU
job. Each of the three operations' fair share is a third of the GPUs (5.3), so on each host 5 allocations are
non-preemptible and 3 preemptible: normal preemption can free 3 GPUs, never 8, and ``full`` starves."""

from __future__ import annotations

from typing import Any

import pytest

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.errors import ConfigError
from pooltree.resources import vector
from pooltree.strategy import FinishedAllocation, NodeHeartbeat
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree

GiB = 1024.0**3
NODES = {"n0": ("h0",), "n1": ("h1",)}
TREE_CONFIG = {
    "fair_share_starvation_timeout": 1000,
    "preemptive_scheduling_backoff": 0,
    "max_unpreemptible_running_allocation_count": 0,
}


def _limits() -> Any:
    return vector(user_slots=8, cpu=8, gpu=8, memory=8 * GiB)


def _run(
    option: dict[str, Any] | None, *, until: int = 20, spec: dict[str, Any] | None = None
) -> tuple[SchedulerCore, list[Any]]:
    config = dict(TREE_CONFIG)
    if option is not None:
        config["default_gpu_full_host_preemption"] = option
    trees = parse_pool_trees({"t": {"config": config}})
    assert unsupported_options(trees) == []
    core = SchedulerCore(PoolTree(trees["t"]))
    for address, tags in NODES.items():
        core.add_node(address, _limits(), tags)
    for op, tag in (("a0", "h0"), ("a1", "h1")):
        task = TaskSpec("main", 8, vector(user_slots=1, cpu=1, gpu=1, memory=GiB / 4))
        core.register_operation(
            op, VanillaController(op, [task]), user="u", spec={"scheduling_tag_filter": tag}, now=0.0
        )
    _round(core, 0.0)
    assert core.operation_view("a0")["running_allocation_count"] == 8
    task = TaskSpec("main", 1, vector(user_slots=1, cpu=1, gpu=8, memory=GiB))
    core.register_operation("full", VanillaController("full", [task]), user="u", spec=spec or {}, now=1.0)
    preempted: list[Any] = []
    for t in range(1, until):
        preempted.extend(_round(core, float(t)))
        for node in core.strategy.nodes.values():  # the nodes report the preempted allocations gone
            for allocation in list(node.allocations.values()):
                if allocation.preempted:
                    core.on_allocation_finished(FinishedAllocation(allocation.id, "aborted"), t + 0.5)
    return core, preempted


def _round(core: SchedulerCore, now: float) -> list[Any]:
    core.update_fair_share(now)
    records = []
    for address, tags in NODES.items():
        records.extend(
            core.process_heartbeat(NodeHeartbeat(address, _limits(), tags), now).allocations_to_preempt
        )
    return records


def _running(core: SchedulerCore, op: str) -> int:
    return int(core.operation_view(op)["running_allocation_count"])


def test_without_the_option_the_full_host_operation_starves() -> None:
    core, preempted = _run(None)
    assert _running(core, "full") == 0
    assert core.strategy.starvation_status("full") != "non_starving"
    assert preempted == []


def test_after_the_timeout_it_clears_a_host() -> None:
    core, preempted = _run({"enable": True, "timeout": 5000, "max_preemption_penalty": 1000})
    assert _running(core, "full") == 1
    assert {r.reason.value for r in preempted} == {"default_gpu_full_host_preemption"}
    assert {r.stage.value for r in preempted} == {"preemptive_default_gpu_full_host"}
    assert len(preempted) == 8 and len({r.node_address for r in preempted}) == 1
    assert "non_preemptible" in {r.allocation_status.value for r in preempted}
    assert min(r.time for r in preempted) > 1.0 + 5.0  # not before the timeout


def test_not_when_the_lost_progress_exceeds_the_penalty() -> None:
    # five non-preemptible 1-GPU allocations running ~6 s already lose 30 GPU-seconds
    core, preempted = _run({"enable": True, "timeout": 5000, "max_preemption_penalty": 10})
    assert _running(core, "full") == 0
    assert preempted == []


def test_an_operation_of_another_segment_is_not_a_default_full_host_one() -> None:
    core, preempted = _run(
        {"enable": True, "timeout": 5000, "max_preemption_penalty": 1000},
        spec={"scheduling_segment": "large_gpu"},
    )
    assert _running(core, "full") == 0
    assert preempted == []


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="max_preemption_penalty"):
        parse_pool_trees(
            {"t": {"config": {"default_gpu_full_host_preemption": {"max_preemption_penalty": -1}}}}
        )
    with pytest.raises(ConfigError, match=r"default_gpu_full_host_preemption\.foo"):
        parse_pool_trees({"t": {"config": {"default_gpu_full_host_preemption": {"foo": 1}}}})
