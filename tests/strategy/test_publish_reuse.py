"""`TreeScheduler.publish` skips configuring and rebalancing preemptible lists only where nothing could change.

Every publish in a scenario with shifting fair shares, starts, finishes and preemptions is checked against what
the full work would give: after it, configuring each operation's lists afresh and rebalancing moves nothing.
"""

from __future__ import annotations

from typing import Any

from strategykit import Kit

from pooltree.strategy import FinishedAllocation, PreemptibleLists, StrategyConfig
from pooltree.strategy.scheduler import TreeScheduler


def lists_state(lists: PreemptibleLists) -> list[tuple[str, str]]:
    return [(allocation.id, allocation.preemption_status.value) for allocation in lists]


def full_work_changes_nothing(scheduler: TreeScheduler) -> None:
    """Redo configure + rebalance for every operation; the lists must stay as publish left them."""
    for element in scheduler.state.elements.values():
        runtime = element.op
        if not element.is_op or runtime is None:
            continue
        before = lists_state(runtime.lists)
        fresh = PreemptibleLists()
        fresh.configure(*runtime.lists_key)
        for name in ("fair_share", "blocked", "total", "non_preemptible_threshold", "preemptible"):
            assert getattr(fresh, name) == getattr(runtime.lists, name), name
        runtime.lists.rebalance()
        assert lists_state(runtime.lists) == before, element.id


def count_rebalances(monkeypatch: Any) -> list[str]:
    calls: list[str] = []
    original = PreemptibleLists.rebalance

    def counted(self: PreemptibleLists) -> None:
        calls.append("rebalance")
        original(self)

    monkeypatch.setattr(PreemptibleLists, "rebalance", counted)
    return calls


def test_publish_reuses_settled_lists_and_redoes_changed_ones(monkeypatch):
    kit = Kit(node_count=4, node_cpu=10, config=StrategyConfig(fair_share_starvation_timeout=2.0))
    kit.pool("a")
    kit.pool("b")
    kit.operation("batch", "a", jobs=100)
    kit.operation("adhoc", "b", jobs=30)
    kit.set_fair_share({"a": 40, "batch": 40})
    for t in range(3):
        kit.round(float(t))
    assert kit.usage_cpu("batch") == 40
    full_work_changes_nothing(kit.scheduler)
    calls = count_rebalances(monkeypatch)
    # same shares, no allocation changed: one settling rebalance at most per operation, then none
    kit.publish(3.0)
    kit.publish(4.0)
    settled = len(calls)
    kit.publish(5.0)
    assert len(calls) == settled
    full_work_changes_nothing(kit.scheduler)
    # new shares: adhoc starves and preempts batch; every publish is checked against the full work
    kit.set_fair_share({"a": 20, "batch": 20, "b": 20, "adhoc": 20})
    for t in range(6, 30):
        kit.round(float(t))
        full_work_changes_nothing(kit.scheduler)
    assert kit.usage_cpu("adhoc") > 0 and kit.usage_cpu("batch") < 40  # preemption moved some over
    # an allocation finished after the last publish: the next publish rebalances that operation again
    before = len(calls)
    runtime = kit.scheduler.operations["batch"]
    assert runtime.lists_settled
    victim = next(iter(runtime.lists))
    kit.scheduler.finish_allocation(FinishedAllocation(victim.id, "completed"), 30.0)
    assert not runtime.lists_settled
    kit.publish(31.0)
    assert len(calls) > before
    full_work_changes_nothing(kit.scheduler)
