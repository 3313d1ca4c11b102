"""Stateful property test of the tree runtime: random starts, finishes, pool moves, limit edits, flag toggles.

After every step: counters recomputed from scratch match; every pending operation sits in the queue of a pool
that is at its running limit; a pool never gains a newly running non-lightweight operation beyond its limit; and
operations leave a pending queue in FIFO order (nobody behind a still-queued operation is activated).
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pooltree.config import parse_pool_trees
from pooltree.errors import PooltreeError
from pooltree.tree import OperationState, PoolTrees, TooManyOperationsError

POOLS = ["A", "A1", "A2", "B", "tmp"]
LIMITED = ["A", "A1", "A2", "B"]
BASE: dict[str, Any] = {
    "physical": {
        "config": {
            "max_running_operation_count": 5,
            "max_operation_count": 14,
            "max_ephemeral_pools_per_user": 2,
        },
        "pools": {
            "A": {
                "max_running_operation_count": 3,
                "max_operation_count": 9,
                "pools": {
                    "A1": {"max_running_operation_count": 2, "max_operation_count": 5},
                    "A2": {"max_running_operation_count": 1, "max_operation_count": 5},
                },
            },
            "B": {"mode": "fifo", "max_running_operation_count": 1, "max_operation_count": 6},
        },
    }
}
POOL_CONFIG_PATH = {"A": ("A",), "A1": ("A", "A1"), "A2": ("A", "A2"), "B": ("B",)}
ALLOWED_MOVE_ERRORS = (
    "Max operation count of pool",
    "Max running operation count of pool",
    "Cannot create new ephemeral",
)


class TreeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.document = copy.deepcopy(BASE)
        self.trees = PoolTrees(parse_pool_trees(self.document))
        self.tree = self.trees.trees["physical"]
        self.counter = 0
        self.now = 0.0
        self.before = self._snapshot()
        self.moved: set[str] = set()
        self.check_gain = True

    # --------------------------------------------------------------------------------------------- helpers

    def _pool_options(self, pool: str) -> dict[str, Any]:
        node = self.document["physical"]["pools"]
        path = POOL_CONFIG_PATH[pool]
        options = node[path[0]]
        for name in path[1:]:
            options = options["pools"][name]
        return options

    def _snapshot(self) -> dict[str, Any]:
        tree = self.tree
        return {
            "queues": {name: list(pool.pending) for name, pool in tree.pools.items()},
            "running": {op_id for op_id, op in tree.operations.items() if op.running},
            "subtree_running": {
                name: {
                    op.id
                    for op in tree.operations.values()
                    if op.running and not op.lightweight and pool in op.pool.path
                }
                for name, pool in tree.pools.items()
            },
        }

    def _step(self) -> None:
        self.now += 1.0
        self.before = self._snapshot()
        self.moved = set()
        self.check_gain = True

    def _active(self) -> list[str]:
        return sorted(self.tree.operations)

    # ----------------------------------------------------------------------------------------------- rules

    @rule(pool=st.sampled_from(POOLS), vanilla=st.booleans(), user=st.sampled_from(["u1", "u2"]))
    def start(self, pool: str, vanilla: bool, user: str) -> None:
        self._step()
        self.counter += 1
        op_id = f"op{self.counter}"
        target = self.tree.pools.get(pool)
        start_pool = target if target is not None else self.tree.root
        full = [e.name for e in start_pool.path if e.operation_count >= e.max_operation_count]
        try:
            op = self.trees.register_operation(
                op_id, {"pool": pool}, user=user, operation_type="vanilla" if vanilla else "map", now=self.now
            )
        except TooManyOperationsError as error:
            assert error.attributes["pool"] == full[0]
            return
        except PooltreeError as error:
            assert "ephemeral" in error.message
            return
        assert not full
        assert op.state in (OperationState.RUNNING, OperationState.PENDING)

    @rule(pool=st.sampled_from(LIMITED), count=st.integers(2, 4))
    def start_burst(self, pool: str, count: int) -> None:
        """Several starts in a row (fills pending queues so FIFO activation gets exercised)."""
        for _ in range(count):
            self.start(pool, False, "u1")

    @precondition(lambda self: bool(self.tree.operations))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        self._step()
        op_id = data.draw(st.sampled_from(self._active()))
        final = data.draw(
            st.sampled_from([OperationState.COMPLETED, OperationState.ABORTED, OperationState.FAILED])
        )
        self.trees.finish_operation(op_id, final, now=self.now)
        assert self.trees.operation_info(op_id)["state"] == final.value

    @precondition(lambda self: bool(self.tree.operations))
    @rule(data=st.data(), pool=st.sampled_from(POOLS))
    def move(self, data: st.DataObject, pool: str) -> None:
        self._step()
        op_id = data.draw(st.sampled_from(self._active()))
        self.moved = {op_id}
        try:
            self.trees.update_operation_parameters(op_id, {"pool": pool}, now=self.now)
        except PooltreeError as error:
            assert error.message.startswith(ALLOWED_MOVE_ERRORS), error.message

    @rule(pool=st.sampled_from([*LIMITED, "<Root>"]), running=st.integers(0, 4), extra=st.integers(0, 6))
    def edit_limits(self, pool: str, running: int, extra: int) -> None:
        self._step()
        if pool == "<Root>":
            options = self.document["physical"]["config"]
        else:
            options = self._pool_options(pool)
        options["max_running_operation_count"] = running
        options["max_operation_count"] = running + extra
        self.trees.apply_config(parse_pool_trees(self.document), now=self.now)

    @rule(enabled=st.booleans())
    def toggle_lightweight(self, enabled: bool) -> None:
        self._step()
        self._pool_options("B")["enable_lightweight_operations"] = enabled
        self.check_gain = (
            False  # turning the flag off re-counts running lightweight operations (allowed overcommit)
        )
        self.trees.apply_config(parse_pool_trees(self.document), now=self.now)

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def counters_match_a_recount(self) -> None:
        tree = self.tree
        expected = {name: [0, 0, 0] for name in tree.pools}
        for op in tree.operations.values():
            for element in op.pool.path:
                counts = expected[element.name]
                counts[0] += 1
                if op.running:
                    counts[2 if op.lightweight else 1] += 1
        for name, pool in tree.pools.items():
            actual = [
                pool.operation_count,
                pool.running_operation_count,
                pool.lightweight_running_operation_count,
            ]
            assert actual == expected[name], (name, actual, expected[name])
            if pool.is_ephemeral:
                assert pool.operation_count > 0 or pool.children, f"empty ephemeral pool {name} kept"

    @invariant()
    def pending_operations_wait_in_a_full_pool(self) -> None:
        tree = self.tree
        queued = {op_id: pool for pool in tree.pools.values() for op_id in pool.pending}
        for op in tree.operations.values():
            state = self.trees.operation(op.id).state
            if op.running:
                assert op.id not in queued and state is OperationState.RUNNING
                assert not op.lightweight or (
                    op.operation_type == "vanilla" and op.pool.effective_lightweight_operations_enabled
                )
            else:
                holder = queued[op.id]
                assert holder is op.pending_pool and holder in op.pool.path
                assert holder.running_operation_count >= holder.max_running_operation_count
                assert not op.lightweight and state is OperationState.PENDING

    @invariant()
    def no_pool_gains_running_operations_beyond_its_limit(self) -> None:
        if not self.check_gain:
            return
        before = self.before["subtree_running"]
        for name, pool in self.tree.pools.items():
            now_running = {
                op.id
                for op in self.tree.operations.values()
                if op.running and not op.lightweight and pool in op.pool.path
            }
            gained = now_running - before.get(name, set())
            if gained:
                assert pool.running_operation_count <= pool.max_running_operation_count, (name, gained)

    @invariant()
    def pending_queues_release_in_fifo_order(self) -> None:
        tree = self.tree
        was_running = self.before["running"]
        activated = {
            op_id
            for op_id, op in tree.operations.items()
            if op.running and not op.lightweight and op_id not in was_running and op_id not in self.moved
        }
        for name, queue in self.before["queues"].items():
            current = tree.pools.get(name)
            still_queued = set(current.pending) if current is not None else set()
            for index, op_id in enumerate(queue):
                if op_id in activated:
                    ahead = [other for other in queue[:index] if other in still_queued]
                    assert not ahead, (name, op_id, ahead)


TreeMachine.TestCase.settings = settings(
    max_examples=50, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_tree_runtime_state_machine = TreeMachine.TestCase
