"""`TreeProjection`: one projection of the runtime tree per period, shared by the fair-share input and the
strategy's element rows.

Seeded periods on a three-level tree with every kind of change between them (usage, arrivals, departures,
suspensions, weight and limits updates, moves between pools, an ephemeral pool, a new tree config, an operation
with a plain-map spec for a while). Each period makes one delta from the shared projection (as `SchedulerCore`
does) and hands it to both builds; both are compared field by field with builds from scratch, and the projection
must compute each operation's key once per period: for every running operation after a walk, for the operations
the delta names otherwise, never again in the second build.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.fairshare import update_fair_share
from pooltree.strategy.build import scheduling_tree_from_runtime
from pooltree.strategy.snapshot import StrategyConfig
from pooltree.tree import PoolTree, build_fair_share_input, projection
from pooltree.tree.projection import TreeProjection
from tests.periods import Builds, InputReads
from tests.strategy.test_build_incremental import TOTAL, definition, move_usage
from tests.strategy.test_build_unchanged_structure import Usage, comparable
from tests.tree.test_fair_share_input_cache import flat


class KeyCount:
    """Counts `projection.operation_key` calls (what the projection computes per operation and period)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = projection.operation_key

        def counted(op: Any, chain: tuple[Any, ...]) -> tuple[Any, ...]:
            self.calls += 1
            return original(op, chain)

        monkeypatch.setattr(projection, "operation_key", counted)


def change(rng: random.Random, tree: PoolTree, usage: Usage, leaves: list[str], period: int) -> None:
    """One change of the tree's operations or pools, chosen by ``rng``."""
    running = [op_id for op_id, op in tree.operations.items() if op.running]
    action = rng.randrange(7)
    if action == 0 or len(running) < 10:
        op_id, pool = f"late{period}", rng.choice(leaves)
        spec = OperationSpec.model_validate({"pool": pool})
        tree.register_operation(op_id, user="u", pool=pool, spec=spec, now=1000.0 + period)
        usage.set(op_id, rng.randint(0, 3), rng.randint(0, 6))
    elif action == 1:
        op_id = rng.choice(running)
        tree.unregister_operation(op_id)
        usage.values.pop(op_id, None)
    elif action == 2:
        op_id = rng.choice(running)
        tree.set_operation_suspended(op_id, not tree.operation(op_id).suspended)
    elif action == 3:
        update = tree.prepare_parameters_update(rng.choice(running), weight=rng.choice([0.5, 2.0, 4.0]))
        tree.commit_parameters_update(update)
    elif action == 4:
        update = tree.prepare_parameters_update(rng.choice(running), pool=rng.choice(leaves))
        tree.commit_parameters_update(update)
    elif action == 5:
        update = tree.prepare_parameters_update(
            rng.choice(running), resource_limits={"cpu": rng.randint(2, 9)}
        )
        tree.commit_parameters_update(update)
    else:
        # a pool change: an operation in a new ephemeral pool of its user
        op_id = f"eph{period}"
        tree.register_operation(op_id, user=f"user{period}", pool=None, now=2000.0 + period)
        usage.set(op_id, 1, 2)


@pytest.mark.parametrize("seed", range(3))
def test_one_projection_per_period_feeds_both_builds(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    tree_config, leaves = definition(seed)
    tree = PoolTree(tree_config)
    usage = Usage()
    for index in range(80):
        pool = rng.choice(leaves)
        spec: Any = OperationSpec.model_validate({"pool": pool})
        if index == 7:
            spec = {"pool": pool, "preemption_mode": "graceful"}  # a plain map: walked every period
        tree.register_operation(f"op{index:03d}", user=f"u{index % 5}", pool=pool, spec=spec, now=index)
        usage.set(f"op{index:03d}", rng.randint(0, 4), rng.randint(0, 8))
    shared = TreeProjection()
    input_cache, build_cache = InputReads(shared), Builds(shared)
    keys = KeyCount(monkeypatch)
    walks = incremental = 0
    for period in range(40):
        if period == 12:
            tree.unregister_operation("op007")  # from now on every spec is frozen
            usage.values.pop("op007", None)
        if period == 25:
            tree.apply_config(definition(seed + 1)[0])  # every pool config replaced (leaves keep their names)
        if period % 3 == 1:
            change(rng, tree, usage, leaves, period)
        move_usage(rng, usage, rng.choice([1, 3, 10]))
        delta = shared.delta(tree)
        before, exact = keys.calls, shared.exact
        running = sum(op.running for op in tree.operations.values())
        root, settings = input_cache.input(tree, usage, delta=delta)
        after_input = keys.calls
        result = update_fair_share(root, TOTAL, settings, float(period))
        config = StrategyConfig.from_options(tree.config)
        built = build_cache.build(tree, result, TOTAL, config, delta=delta)
        assert keys.calls == after_input  # the second build of the period finds the projection advanced
        if delta.operations is None or not exact:
            assert after_input - before == running  # a walk (the plain-map spec forces one while it runs)
            walks += 1
        else:
            assert after_input - before == sum(  # only the operations the delta names, running now
                1
                for op_id in delta.operations
                if (op := tree.operations.get(op_id)) is not None and op.running
            )
            incremental += 1 if delta.operations else 0
        fresh_root, _ = build_fair_share_input(tree, usage)
        assert flat(root) == flat(fresh_root)
        fresh = scheduling_tree_from_runtime(
            tree, dataclasses.replace(result, elements=dict(result.elements)), TOTAL, config
        )
        assert comparable(built) == comparable(fresh)
        assert list(built.elements) == list(fresh.elements)
        assert built.children == fresh.children
        assert set(shared.operations) == {op_id for op_id, op in tree.operations.items() if op.running}
        assert set(shared.pools) == set(tree.pools)
    assert walks >= 12 and incremental >= 5


def test_builds_that_walk_read_the_projection_in_the_tree_order() -> None:
    """The builds make their rows from the projection's walk, not from the tree: an operation activated from a
    queue after later ones started is appended to the projection's operations, and a build that walks (here:
    new caches on the shared projection) still gets the rows in registration order and the pools' children in
    the pools' order, as builds from scratch do."""
    pools = {"a": {"max_running_operation_count": 1}, "b": {}}
    tree = PoolTree(parse_pool_trees({"t": {"pools": pools}})["t"])
    usage = Usage()
    for op_id, pool in (("op1", "a"), ("op2", "a"), ("op3", "b"), ("op4", "b")):
        spec = OperationSpec.model_validate({"pool": pool})
        tree.register_operation(op_id, user="u", pool=pool, spec=spec, now=0.0)
        usage.set(op_id, 1, 2)
    shared = TreeProjection()
    input_cache, build_cache = InputReads(shared), Builds(shared)
    for period, step in enumerate(("first", "activate", "walk")):
        if step == "activate":
            tree.unregister_operation("op1")  # op2 (registered before op3) leaves the queue
            usage.values.pop("op1")
        if step == "walk":
            tree.unregister_operation(
                "op4"
            )  # the input brings its build up to date, the new rows' cache walks
            usage.values.pop("op4")
            build_cache = Builds(shared)
        delta = shared.delta(tree)
        root, settings = input_cache.input(tree, usage, delta=delta)
        if step != "first":
            assert shared.changes is not None  # advanced with the delta, not walked
        if step == "activate":
            assert not shared.ordered  # op2 was appended after op3 and op4
        result = update_fair_share(root, TOTAL, settings, float(period))
        config = StrategyConfig.from_options(tree.config)
        built = build_cache.build(tree, result, TOTAL, config, delta=delta)
        fresh_root, _ = build_fair_share_input(tree, usage)
        assert flat(root) == flat(fresh_root)
        fresh = scheduling_tree_from_runtime(
            tree, dataclasses.replace(result, elements=dict(result.elements)), TOTAL, config
        )
        assert list(built.elements) == list(fresh.elements)
        assert built.children == fresh.children
        assert comparable(built) == comparable(fresh)
    assert list(shared.operations) == ["op2", "op3"]
