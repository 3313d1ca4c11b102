"""Lightweight operations, pool naming, ephemeral pools and forbidden pools (§f)."""

from __future__ import annotations

import pytest
from treekit import definitions, make_trees, seed_document, start

from pooltree.errors import PooltreeError
from pooltree.tree import OperationState

LIGHT = {"light": {"mode": "fifo", "enable_lightweight_operations": True, "max_running_operation_count": 1}}


def test_lightweight_vanilla_operations_never_wait():
    trees = make_trees(seed_document(extra_pools=LIGHT))
    tree = trees.trees["physical"]
    states = [start(trees, f"v{i}", "light", type="vanilla").state for i in range(3)]
    assert states == [OperationState.RUNNING] * 3
    info = tree.pool_orchid("light")
    assert (
        info["running_operation_count"],
        info["lightweight_running_operation_count"],
        info["operation_count"],
    ) == (
        0,
        3,
        3,
    )
    assert tree.pool_orchid("<Root>")["lightweight_running_operation_count"] == 3
    assert tree.operation_orchid("v0")["lightweight"] is True
    # A non-vanilla operation in the same pool is an ordinary one: it uses the running limit.
    assert start(trees, "m0", "light", type="map").state is OperationState.RUNNING
    assert start(trees, "m1", "light", type="map").state is OperationState.PENDING
    # Lightweight operations leaving do not free running slots.
    assert trees.complete_operation("v0", now=1) == []
    assert trees.complete_operation("m0", now=2) == ["m1"]


def test_lightweight_needs_fifo_and_the_flag():
    pools = {"fs": {"enable_lightweight_operations": True, "max_running_operation_count": 1}}
    trees = make_trees(seed_document(extra_pools=pools))
    assert trees.trees["physical"].pool_orchid("fs")["effective_lightweight_operations_enabled"] is False
    start(trees, "v0", "fs", type="vanilla")
    assert start(trees, "v1", "fs", type="vanilla").state is OperationState.PENDING


def test_toggling_lightweight_reaccounts_running_operations():
    document = seed_document(extra_pools={"light": {"mode": "fifo", "max_running_operation_count": 1}})
    trees = make_trees(document)
    tree = trees.trees["physical"]
    start(trees, "v0", "light", type="vanilla")
    start(trees, "v1", "light", type="vanilla")
    assert trees.operation("v1").state is OperationState.PENDING
    # Turning the flag on activates the pending vanilla operation and moves v0 to the lightweight counter.
    document["physical"]["pools"]["light"]["enable_lightweight_operations"] = True
    assert trees.apply_config(definitions(document), now=5) == ["v1"]
    info = tree.pool_orchid("light")
    assert (info["running_operation_count"], info["lightweight_running_operation_count"]) == (0, 2)
    assert trees.operation("v1").state is OperationState.RUNNING
    # Turning it off keeps both running and counts them again: the running limit is overcommitted.
    document["physical"]["pools"]["light"]["enable_lightweight_operations"] = False
    assert trees.apply_config(definitions(document), now=6) == []
    info = tree.pool_orchid("light")
    assert (info["running_operation_count"], info["lightweight_running_operation_count"]) == (2, 0)
    assert start(trees, "v2", "light", type="vanilla").state is OperationState.PENDING


def test_pool_defaults_to_user_name_as_ephemeral_pool_in_default_parent():
    trees = make_trees(
        seed_document(config={"default_parent_pool": "project-root", "max_ephemeral_pools_per_user": 2})
    )
    tree = trees.trees["physical"]
    start(trees, "o1", user="bob")
    info = tree.pool_orchid("bob")
    assert (
        info["is_ephemeral"] and info["parent"] == "project-root" and info["full_path"] == "/project-root/bob"
    )
    # The seeds' pool table: a pool without its own limits runs 8 and holds 50 operations.
    assert (info["max_running_operation_count"], info["max_operation_count"]) == (8, 50)
    start(trees, "o2", "scratch", user="bob")
    with pytest.raises(PooltreeError) as error:
        start(trees, "o3", "third", user="bob")
    assert error.value.message == (
        'Cannot create new ephemeral pool "third" as limit for number of ephemeral pools 2 for user "bob" '
        'in tree "physical" has been reached; previously created pools are [bob, scratch]'
    )
    # Empty ephemeral pools disappear, which frees the user's quota.
    trees.complete_operation("o2", now=1)
    assert "scratch" not in tree.pools
    start(trees, "o3", "third", user="bob")
    assert tree.pool_orchid("third")["parent"] == "project-root"


def test_ephemeral_subpools_of_a_hub_pool():
    hub = {
        "research": {
            "create_ephemeral_subpools": True,
            "ephemeral_subpool_config": {
                "mode": "fifo",
                "max_running_operation_count": 1,
                "max_operation_count": 3,
            },
            "forbid_immediate_operations": True,
        }
    }
    trees = make_trees(seed_document(extra_pools=hub))
    tree = trees.trees["physical"]
    start(trees, "r1", "research", user="carol")
    info = tree.pool_orchid("research$carol")
    assert info["parent"] == "research" and info["is_ephemeral"] and info["mode"] == "fifo"
    assert (info["max_running_operation_count"], info["max_operation_count"]) == (1, 3)
    assert start(trees, "r2", "research", user="carol").state is OperationState.PENDING
    assert tree.pool_orchid("research$carol")["pending_operation_ids"] == ["r2"]
    start(trees, "r3", "research", user="dave")
    assert tree.pool_orchid("research")["child_pool_count"] == 2
    trees.complete_operation("r3", now=1)
    assert "research$dave" not in tree.pools
    trees.complete_operation("r1", now=2)
    trees.complete_operation("r2", now=3)
    assert "research$carol" not in tree.pools and "research" in tree.pools


def test_nested_ephemeral_pools_are_removed_recursively():
    trees = make_trees(seed_document(config={"max_ephemeral_pools_per_user": 3}))
    tree = trees.trees["physical"]
    start(trees, "o1", "eph", user="erin")
    start(trees, "o2", "eph$inner", user="erin")
    assert tree.pool_orchid("eph$inner")["parent"] == "eph"
    trees.complete_operation("o1", now=1)
    assert "eph" in tree.pools  # still hosts eph$inner
    trees.complete_operation("o2", now=2)
    assert "eph" not in tree.pools and "eph$inner" not in tree.pools


def test_forbidden_pools_and_names():
    pools = {"closed": {"forbid_immediate_operations": True}, "queue": {"mode": "fifo"}}
    trees = make_trees(seed_document(extra_pools=pools))
    with pytest.raises(
        PooltreeError, match=r'^Starting operations immediately in pool "closed" is forbidden$'
    ):
        start(trees, "o1", "closed")
    with pytest.raises(
        PooltreeError, match=r'^Starting operations immediately in pool "<Root>" is forbidden$'
    ):
        start(trees, "o2", "<Root>")
    with pytest.raises(PooltreeError, match="must match regular expression"):
        start(trees, "o3", "bad name!")
    with pytest.raises(PooltreeError, match="FIFO mode and cannot host ephemeral subpools"):
        start(trees, "o4", "queue$frank")
    with pytest.raises(
        PooltreeError, match="Parent pool 'ghost' of ephemeral pool 'ghost\\$x' does not exist"
    ):
        start(trees, "o5", "ghost$x")
    assert not trees.operations


def test_root_allowed_when_not_forbidden():
    trees = make_trees(seed_document(config={"forbid_immediate_operations_in_root": False}))
    assert start(trees, "o1", "<Root>").state is OperationState.RUNNING


def test_user_default_parent_pool_map_and_invalid_default_parent():
    config = {"use_user_default_parent_pool_map": True, "default_parent_pool": "missing"}
    trees = make_trees(
        seed_document(config=config, extra_pools={"q": {"mode": "fifo"}}),
        user_default_parent_pools={"gina": "project-batch", "hank": "q"},
    )
    tree = trees.trees["physical"]
    start(trees, "g1", user="gina")
    assert tree.pool_orchid("gina")["parent"] == "project-batch"
    start(trees, "h1", user="hank")  # q is FIFO → falls back; the default parent does not exist → root
    assert tree.pool_orchid("hank")["parent"] == "<Root>"
    assert "invalid_default_parent_pool" in tree.alerts


def test_new_user_default_parent_pool_map_moves_existing_ephemeral_pools():
    """As YTsaurus's strategy on a new ``//sys/scheduler/user_to_default_pool``: a user's ephemeral pools in the
    default parent move under the user's new default parent pool; other users' and explicit pools stay."""
    trees = make_trees(seed_document(config={"use_user_default_parent_pool_map": True}))
    tree = trees.trees["physical"]
    start(trees, "g1", user="gina")
    start(trees, "i1", user="ivan")
    start(trees, "p1", "project-adhoc", user="gina")
    assert tree.pool_orchid("gina")["parent"] == "<Root>"
    trees.set_user_default_parent_pools({"gina": "project-batch"}, now=1)
    assert tree.pool_orchid("gina")["parent"] == "project-batch"
    assert tree.pool_orchid("ivan")["parent"] == "<Root>"
    assert tree.operation("g1").pool.name == "gina" and tree.operation("g1").running
    assert tree.operation("p1").pool.name == "project-adhoc"
    trees.set_user_default_parent_pools({}, now=2)
    assert tree.pool_orchid("gina")["parent"] == "<Root>"


def test_lightweight_operation_moving_to_a_regular_pool_is_checked_on_shared_ancestors():
    """A running lightweight operation starts counting toward the shared ancestors' running limits when it moves
    out of its lightweight pool, so a full ancestor refuses the move (found by the stateful test)."""
    trees = make_trees(seed_document({"max_running_operation_count": 1}, extra_pools=LIGHT))
    start(trees, "a0", "project-adhoc")
    start(trees, "v0", "light", type="vanilla")
    assert trees.trees["physical"].operation("v0").lightweight
    with pytest.raises(PooltreeError, match=r'^Max running operation count of pool "<Root>" violated$'):
        trees.update_operation_parameters("v0", {"pool": "project-batch"}, now=1)
    tree = trees.trees["physical"]
    assert tree.operation("v0").pool.name == "light" and tree.operation("v0").running
    assert tree.pool("<Root>").running_operation_count == 1
