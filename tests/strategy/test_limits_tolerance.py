"""A pool's ``resource_limits_overcommit_tolerance`` (issue 30): in preemptive stages only, an allocation may start
up to the tolerance past the pool's ``resource_limits`` (YTsaurus's ``allowLimitsOvercommit``).

One node of 10 cpu. Pool P (limits 4 cpu) runs ``filler`` on 4 cpu, all within its fair share (not preemptible);
``hungry`` in P (fair share 1 cpu) starves for a 1-cpu job. The node has room but the pool has none: without a
tolerance ``hungry`` never starts; with a tolerance of 1 cpu the preemptive stage starts it (the regular stage still
cannot)."""

from __future__ import annotations

import numpy as np
from strategykit import Kit

from pooltree.config import parse_pool_trees
from pooltree.config.support import unsupported_options
from pooltree.strategy import SchedulingStage, StrategyConfig
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree


def _cpu(amount: float) -> np.ndarray:
    vector = np.full(5, np.inf)
    vector[1] = amount
    return vector


def _run(tolerance: float | None) -> tuple[Kit, list]:
    kit = Kit(node_count=1, node_cpu=10, config=StrategyConfig(preemptive_scheduling_backoff=0.0))
    options = {"specified_resource_limits": _cpu(4)}
    if tolerance is not None:
        options["resource_limits_overcommit_tolerance"] = np.array([0.0, tolerance, 0.0, 0.0, 0.0])
    kit.pool("P", **options)
    kit.operation("filler", "P", jobs=4)
    kit.set_fair_share({"P": 5, "filler": 4})
    kit.round(0)
    assert kit.usage_cpu("filler") == 4
    kit.operation("hungry", "P", jobs=1)
    kit.set_fair_share({"P": 5, "filler": 4, "hungry": 1})
    started = []
    for t in range(1, 40):
        for result in kit.round(float(t)):
            started.extend(result.allocations_to_start)
    return kit, started


def test_without_a_tolerance_the_pool_limit_holds() -> None:
    kit, started = _run(None)
    assert started == [] and kit.usage_cpu("hungry") == 0


def test_a_tolerance_lets_the_preemptive_stage_start_past_the_limit() -> None:
    kit, started = _run(1.0)
    assert [a.operation_id for a in started] == ["hungry"]
    assert kit.usage_cpu("P") == 5
    assert any(
        e.get("stage") == SchedulingStage.PREEMPTIVE_NORMAL.value
        for e in kit.events
        if e.get("event") == "allocation_started"
    )


def test_the_pool_option_is_implemented() -> None:
    trees = parse_pool_trees(
        {
            "t": {
                "pools": {
                    "p": {"resource_limits": {"cpu": 4}, "resource_limits_overcommit_tolerance": {"cpu": 1}}
                }
            }
        }
    )
    assert unsupported_options(trees) == []
    core = SchedulerCore(PoolTree(trees["t"]))
    core.update_fair_share(0.0)
    assert core.strategy.tree.elements["p"].resource_limits_overcommit_tolerance.tolist() == [0, 1, 0, 0, 0]
