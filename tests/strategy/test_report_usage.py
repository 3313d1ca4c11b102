"""``TreeScheduler.report_usage``'s short answer from Python floats (``_within_reserve``) decides as its numpy path:
the same answers, usages and node usages as the rule written plainly (``usage_above_reserve`` then
``np.array_equal``), on reports below, at and above the reserve, NaN, as tuples, lists and vectors, before and after an
allocation's usage was raised."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.config import parse_pool_trees
from pooltree.controllers.operations import TaskSpec, VanillaController
from pooltree.resources import CPU, MEMORY, vector
from pooltree.strategy import NodeHeartbeat
from pooltree.strategy import scheduler as scheduler_module
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.scheduler import TreeScheduler, usage_above_reserve
from pooltree.tree import PoolTree

GiB = 1024.0**3
NODE = vector(user_slots=10, cpu=10, memory=40 * GiB)
JOB = vector(user_slots=1, cpu=1, memory=4 * GiB)


def _core() -> tuple[SchedulerCore, list[str]]:
    core = SchedulerCore(PoolTree(parse_pool_trees({"t": {"pools": {"a": {}}}})["t"]))
    core.add_node("n0", NODE)
    core.register_operation("op", VanillaController("op", [TaskSpec("main", 3, JOB)]), user="u", pool="a")
    core.update_fair_share(0.0)
    started = core.process_heartbeat(NodeHeartbeat("n0", NODE), 0.0).allocations_to_start
    return core, [allocation.id for allocation in started]


def _plain_report_usage(strategy: TreeScheduler, allocation_id: str, reported: Any) -> bool:
    """The rule as it reads, every report through numpy's vectors."""
    allocation = strategy.allocations.get(allocation_id)
    if allocation is None or allocation.preempted or allocation.node_address not in strategy.nodes:
        return False
    usage = usage_above_reserve(allocation.reserve, reported)
    if np.array_equal(usage, allocation.resources):
        return False
    strategy._change_usage(allocation, usage)
    return True


def _outcome(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception as error:  # the same failure on both sides counts as the same decision
        return type(error)


_AMOUNTS = st.sampled_from([0.0, 0.5, 1.0, 1.5, 3 * GiB, 4 * GiB, 4 * GiB + 1.0, 6 * GiB, math.nan])


_FORMS = {"list": list, "tuple": tuple, "vector": np.array}
"""How a report reaches ``report_usage``: a tuple as ``RunningJobReport.counted_usage`` holds it, a list, a vector."""


@st.composite
def _reports(draw: Any) -> list[tuple[int, list[float], str]]:
    reports = []
    for _ in range(draw(st.integers(1, 12))):
        index = draw(st.integers(0, 2))
        values = [float(v) for v in JOB.tolist()]
        values[CPU] = draw(st.sampled_from([0.5, 1.0, 1.5, math.nan]))
        values[MEMORY] = draw(_AMOUNTS)
        reports.append((index, values, draw(st.sampled_from(sorted(_FORMS)))))
    return reports


@settings(max_examples=150, deadline=None)
@given(_reports())
def test_the_short_answer_decides_as_the_numpy_rule(reports: list[tuple[int, list[float], str]]) -> None:
    fast, ids = _core()
    plain, plain_ids = _core()
    for index, values, form in reports:
        reported: Any = _FORMS[form](values)
        got = _outcome(fast.report_usage, ids[index], reported)
        want = _outcome(_plain_report_usage, plain.strategy, plain_ids[index], np.array(values))
        assert got == want
        for allocation_id, plain_id in zip(ids, plain_ids, strict=True):
            np.testing.assert_array_equal(
                fast.strategy.allocations[allocation_id].resources,
                plain.strategy.allocations[plain_id].resources,
            )
        np.testing.assert_array_equal(fast.strategy.nodes["n0"].usage, plain.strategy.nodes["n0"].usage)
        np.testing.assert_array_equal(
            fast.strategy.operation_usage("op"), plain.strategy.operation_usage("op")
        )


def test_a_report_within_the_reserve_is_answered_without_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below and at the reserve of an allocation never raised: answered before ``usage_above_reserve``; above it,
    or once raised, the vectors are made."""
    core, ids = _core()
    calls: list[Any] = []

    def counted(reserve: Any, reported: Any) -> Any:
        calls.append(reported)
        return usage_above_reserve(reserve, reported)

    monkeypatch.setattr(scheduler_module, "usage_above_reserve", counted)
    below = [float(v) for v in JOB.tolist()]
    below[MEMORY] = 3 * GiB
    assert not core.report_usage(ids[0], below)
    assert not core.report_usage(ids[0], [float(v) for v in JOB.tolist()])
    assert not core.report_usage(
        ids[0], tuple(float(v) for v in JOB.tolist())
    )  # equal to the reserve's floats
    assert calls == []
    above = list(below)
    above[MEMORY] = 5 * GiB
    assert core.report_usage(ids[0], above)
    assert len(calls) == 1
    assert not core.report_usage(
        ids[0], above
    )  # raised: its usage is no longer its reserve, the vectors decide
    assert len(calls) == 2
