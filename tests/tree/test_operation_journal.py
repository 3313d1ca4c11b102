"""`PoolTree.operations_changed_since`: the operations whose changes the per-period caches must re-read, or None
when they must walk the whole tree (pools changed, the journal was trimmed, a bump it did not record)."""

from __future__ import annotations

from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.tree import PoolTree
from pooltree.tree.pool_tree import _JOURNAL_LIMIT


def definition(**extra: Any) -> Any:
    document = {
        "config": {"max_running_operation_count_per_pool": 1},
        "pools": {"a": {}, "b": {"max_running_operation_count": 1}, **extra},
    }
    return parse_pool_trees({"physical": document})["physical"]


def test_operation_changes_are_named_and_pool_changes_are_not():
    tree = PoolTree(definition())
    start = tree.revision
    assert tree.operations_changed_since(start) == set()
    tree.register_operation("op1", user="u", pool="b")
    tree.register_operation("op2", user="u", pool="b")  # pending: no element changed, nothing bumped
    assert tree.operations_changed_since(start) == {"op1"}
    middle = tree.revision
    tree.unregister_operation("op1")  # op2 is activated
    assert tree.operations_changed_since(middle) == {"op1", "op2"}
    assert tree.operations_changed_since(start) == {"op1", "op2"}
    tree.set_operation_suspended("op2", True)
    tree.commit_parameters_update(tree.prepare_parameters_update("op2", weight=2.0))
    assert tree.operations_changed_since(middle) == {"op1", "op2"}
    assert tree.operations_changed_since(tree.revision + 1) is None  # a revision from the future
    # an ephemeral pool is a change of the pools: nothing before it can be brought up to date
    before_pool = tree.revision
    tree.register_operation("op3", user="someone")
    assert tree.operations_changed_since(before_pool) is None
    after_pool = tree.revision
    assert tree.operations_changed_since(after_pool) == set()
    tree.unregister_operation("op2")
    assert tree.operations_changed_since(after_pool) == {"op2"}
    # so is a config swap
    tree.apply_config(definition(c={}))
    assert tree.operations_changed_since(after_pool) is None
    assert tree.structure_revision == tree.revision


def test_a_trimmed_journal_or_an_unrecorded_bump_answers_none():
    tree = PoolTree(definition())
    tree.register_operation("op", user="u", pool="a")
    start = tree.revision
    for index in range(_JOURNAL_LIMIT + 10):
        tree.set_operation_suspended("op", index % 2 == 0)
    assert tree.operations_changed_since(start) is None  # trimmed
    recent = tree.revision - 5
    assert tree.operations_changed_since(recent) == {"op"}
    tree.revision += 1  # a bump from elsewhere: not journaled
    assert tree.operations_changed_since(recent) is None
    assert tree.operations_changed_since(tree.revision) == set()
