"""One period delta (`pooltree.tree.delta`): the tree's changes since the previous period are found once per period
and read by both consumers (the fair-share input and the strategy's build), which then take the same incremental
paths as before: an unchanged tree reuses both builds, operations arriving or leaving patch them, a change of the
pools walks the tree.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.fairshare import layout, update_fair_share
from pooltree.resources import vector
from pooltree.strategy import build, build_rows
from pooltree.strategy.core import SchedulerCore
from pooltree.tree import PoolTree, fair_share_input
from pooltree.tree.delta import PeriodDelta, period_delta
from tests.sim.test_publish_changes import _Controller

LIMITS = vector(user_slots=8, cpu=8, memory=16 * 1024.0**3)


def _tree() -> PoolTree:
    pools = {"a": {}, "b": {"pools": {"b1": {}, "b2": {}}}}
    return PoolTree(parse_pool_trees({"t": {"pools": pools}})["t"])


def test_delta_says_what_changed_since_the_previous_period() -> None:
    tree = _tree()
    first = period_delta(tree, None)
    assert first.operations is None and not first.unchanged  # no previous period: walk
    start = tree.revision
    assert period_delta(tree, start) == PeriodDelta(tree, start, start, frozenset())
    assert period_delta(tree, start).unchanged
    tree.register_operation("op1", user="u", pool="a", spec=OperationSpec.model_validate({"pool": "a"}))
    tree.register_operation("op2", user="u", pool="b1", spec=OperationSpec.model_validate({"pool": "b1"}))
    moved = period_delta(tree, start, resources={"op1"})
    assert moved.operations == {"op1", "op2"} and moved.resources == {"op1"}
    assert moved.applies_to(tree, start) and not moved.applies_to(tree, start - 1)
    assert not moved.applies_to(_tree(), start)
    middle = tree.revision
    tree.register_operation("op3", user="u", pool="new", spec=OperationSpec.model_validate({"pool": "new"}))
    assert period_delta(tree, middle).operations is None  # an ephemeral pool: the pools changed, walk


class _Counting:
    """Counts the calls of the tree's own record of operation changes."""

    def __init__(self, tree: PoolTree) -> None:
        self.calls = 0
        self.original = tree.operations_changed_since

    def __call__(self, revision: int) -> Any:
        self.calls += 1
        return self.original(revision)


@pytest.mark.parametrize("arrivals", [0, 1, 3])
def test_each_period_asks_the_tree_once(arrivals: int) -> None:
    """`SchedulerCore` finds a period's changes once and hands them to the input and the build (before the delta,
    each of them asked the tree), and both still take their incremental paths."""
    tree = _tree()
    core = SchedulerCore(tree)
    core.add_node("n1", LIMITS)
    serial = 0
    for _ in range(2):
        serial += 1
        core.register_operation(f"op{serial}", _Controller(f"op{serial}", 2), user="u", pool="a", now=0.0)
    core.update_fair_share(0.0)
    counting = _Counting(tree)
    tree.operations_changed_since = counting  # type: ignore[method-assign]
    input_root = core.kept.input.root
    for period in range(1, 4):
        for _ in range(arrivals):
            serial += 1
            core.register_operation(
                f"op{serial}",
                _Controller(f"op{serial}", 1),
                user="u",
                pool=("a", "b1", "b2")[serial % 3],
                now=float(period),
            )
        calls = counting.calls
        core.update_fair_share(float(period))
        assert counting.calls - calls == (1 if arrivals else 0)  # an unchanged revision needs no question
        assert core.kept.input.root is input_root  # patched or reused, never walked anew
        assert core.kept.build is not None and core.kept.build.key is not None
    assert core.operation_is_published(f"op{serial}")


def _core_with_two_operations() -> SchedulerCore:
    """A core on `_tree` with two operations in pool ``a``, after its first update."""
    core = SchedulerCore(_tree())
    core.add_node("n1", LIMITS)
    for serial in (1, 2):
        core.register_operation(f"op{serial}", _Controller(f"op{serial}", 2), user="u", pool="a", now=0.0)
    core.update_fair_share(0.0)
    return core


def test_the_layout_reads_the_delta_instead_of_comparing_every_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the period's delta (``UpdateState.relaid``: the pools whose children lists the input replaced, and
    ``.renewed``: the operations whose elements it made), the fair-share layout re-lays only those pools' blocks: nothing is flattened anew, and every result is that of an
    update of fresh copies."""
    core = _core_with_two_operations()
    flattened: list[Any] = []
    flatten_new = layout._flatten_new

    def counted(root: Any) -> Any:
        flattened.append(root)
        return flatten_new(root)

    monkeypatch.setattr(layout, "_flatten_new", counted)
    told: list[tuple[list[int], frozenset[str]]] = []
    patched = layout._patched

    def recorded(
        old: Any, blocks: Any, changed: list[int], child_lists: Any, renewed: Any, counts: Any
    ) -> Any:
        told.append((changed, renewed))
        return patched(old, blocks, changed, child_lists, renewed, counts)

    monkeypatch.setattr(layout, "_patched", recorded)
    serial = 2
    for period in range(1, 6):
        serial += 1
        pool = ("a", "b1", "b2")[serial % 3]
        core.register_operation(f"op{serial}", _Controller(f"op{serial}", 1), user="u", pool=pool, now=period)
        if period % 2 == 0:
            core.unregister_operation(f"op{serial - 2}", float(period))
        result = core.update_fair_share(float(period))
        assert not flattened  # the previous tree patched, not flattened anew
        assert f"op{serial}" in told[-1][1]  # the input said its element is new
        root = core.kept.input.root
        settings = core.kept.input.settings[1]
        fresh = update_fair_share(copy.deepcopy(root), core.total_resources, settings, float(period), None)
        flattened.clear()
        assert list(result.elements) == list(fresh.elements)
        for element_id in fresh.elements:
            assert (
                result.elements[element_id].fair_share.tolist()
                == fresh.elements[element_id].fair_share.tolist()
            )
    assert len(told) == 5 and all(changed for changed, _ in told)
    core.update_fair_share(6.0)  # nothing changed: the previous layout is taken whole, nothing compared
    assert len(told) == 5


def test_both_builds_read_the_changes_the_projection_classified(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the delta's operations did (where each ran, which run now) is classified once per period, by the
    projection, and both the input and the strategy's rows are brought up to date from that very record."""
    core = _core_with_two_operations()
    read: list[tuple[str, Any]] = []
    apply_input = fair_share_input._apply_operation_changes
    apply_rows = build_rows._operation_changes

    def input_reads(*args: Any) -> Any:
        read.append(("input", args[-1]))
        return apply_input(*args)

    def rows_read(*args: Any) -> Any:
        read.append(("rows", args[-1]))
        return apply_rows(*args)

    monkeypatch.setattr(fair_share_input, "_apply_operation_changes", input_reads)
    monkeypatch.setattr(build, "_operation_changes", rows_read)
    serial = 2
    for period in range(1, 5):
        serial += 1
        core.register_operation(f"op{serial}", _Controller(f"op{serial}", 1), user="u", pool="b1", now=period)
        core.unregister_operation(f"op{serial - 2}", float(period))
        read.clear()
        core.update_fair_share(float(period))
        changes = core.kept.projection.changes
        assert changes is not None
        assert changes.before == {f"op{serial - 2}": "a" if serial - 2 <= 2 else "b1"}
        assert [op_id for _, op_id, _ in changes.running] == [f"op{serial}"]
        assert [who for who, _ in read] == ["input", "rows"]
        assert all(record is changes for _, record in read)
