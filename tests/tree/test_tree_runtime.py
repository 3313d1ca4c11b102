"""Live config changes, lifecycle, several trees, offloading, orchid and the fair-share input."""

from __future__ import annotations

import numpy as np
import pytest
from treekit import definitions, make_trees, seed_document, start

from pooltree.config import OperationSpec, PoolTreeDefinition
from pooltree.errors import PooltreeError
from pooltree.fairshare.model import Operation as FsOperation
from pooltree.resources import vector
from pooltree.tree import (
    InvalidOperationStateError,
    OperationLifecycle,
    OperationState,
    build_fair_share_input,
)


def test_raising_a_limit_activates_pending_operations_in_fifo_order():
    document = seed_document()
    trees = make_trees(document)
    for i in range(5):
        start(trees, f"b{i}", "project-backup", now=i)
    document["physical"]["pools"]["project-root"]["pools"]["project-backup"][
        "max_running_operation_count"
    ] = 4
    assert trees.apply_config(definitions(document), now=10) == ["b2", "b3"]
    tree = trees.trees["physical"]
    assert tree.pool_orchid("project-backup")["pending_operation_ids"] == ["b4"]
    assert tree.pool_orchid("project-backup")["max_running_operation_count"] == 4


def test_lowering_a_limit_keeps_running_operations():
    document = seed_document()
    trees = make_trees(document)
    for i in range(4):
        start(trees, f"a{i}", "project-adhoc")
    document["physical"]["pools"]["project-root"]["pools"]["project-adhoc"]["max_running_operation_count"] = 1
    trees.apply_config(definitions(document), now=1)
    info = trees.trees["physical"].pool_orchid("project-adhoc")
    assert info["running_operation_count"] == 4 and info["max_running_operation_count"] == 1
    assert start(trees, "a4", "project-adhoc").state is OperationState.PENDING
    trees.complete_operation("a0", now=2)
    assert trees.operation("a4").state is OperationState.PENDING  # 3 running ≥ 1


def test_removed_pool_with_operations_becomes_ephemeral_in_default_parent():
    document = seed_document(extra_pools={"old": {"max_running_operation_count": 1}})
    trees = make_trees(document)
    start(trees, "o1", "old", user="ivan")
    start(trees, "o2", "old", user="ivan")
    del document["physical"]["pools"]["old"]
    trees.apply_config(definitions(document), now=1)
    tree = trees.trees["physical"]
    info = tree.pool_orchid("old")
    assert info["is_ephemeral"] and info["parent"] == "<Root>" and info["operation_count"] == 2
    # Default config now: the running limit is the tree's per-pool default, so the pending one ran.
    assert trees.operation("o2").state is OperationState.RUNNING
    trees.complete_operation("o1", now=2)
    trees.complete_operation("o2", now=3)
    assert "old" not in tree.pools


def test_removed_hub_comes_back_ephemeral_and_keeps_its_subpool():
    """YTsaurus's test_ephemeral_pool_parent_is_removed_after_operation_complete: removing a pool that hosts
    ephemeral subpools keeps ``hub$user`` under the hub, which comes back as an ephemeral pool; both go with the
    last operation."""
    document = seed_document(extra_pools={"hub": {"create_ephemeral_subpools": True}})
    trees = make_trees(document)
    start(trees, "o1", "hub", user="jo")
    del document["physical"]["pools"]["hub"]
    trees.apply_config(definitions(document), now=1)
    tree = trees.trees["physical"]
    assert tree.pool_orchid("hub")["is_ephemeral"]
    assert tree.pool_orchid("hub$jo")["parent"] == "hub"
    assert tree.operation("o1").pool.name == "hub$jo"
    trees.complete_operation("o1", now=2)
    assert "hub$jo" not in tree.pools and "hub" not in tree.pools


def test_hub_that_stops_creating_subpools_takes_their_operations():
    document = seed_document(extra_pools={"hub": {"create_ephemeral_subpools": True}})
    trees = make_trees(document)
    start(trees, "o1", "hub", user="jo")
    document["physical"]["pools"]["hub"]["create_ephemeral_subpools"] = False
    trees.apply_config(definitions(document), now=1)
    tree = trees.trees["physical"]
    assert "hub$jo" not in tree.pools
    assert tree.operation("o1").pool.name == "hub"
    assert tree.pool_orchid("<Root>")["operation_count"] == 1


def test_failed_config_change_keeps_previous_state():
    document = seed_document()
    trees = make_trees(document)
    start(trees, "b0", "project-backup")
    start(trees, "b1", "project-backup")
    start(trees, "b2", "project-backup")
    before = trees.trees["physical"].orchid()
    good = definitions(document)["physical"]
    broken_pools = dict(good.pools)
    orphan = broken_pools.pop("project-root")
    broken = PoolTreeDefinition("physical", good.config, broken_pools)
    with pytest.raises(PooltreeError, match="parents that are not in the tree"):
        trees.apply_config({"physical": broken}, now=1)
    assert trees.trees["physical"].orchid() == before
    assert orphan.name == "project-root"
    with pytest.raises(PooltreeError, match='Default pool tree "nope" does not exist'):
        trees.apply_config(definitions(document), default_tree="nope", now=1)
    assert trees.trees["physical"].orchid() == before


def test_lifecycle_transitions_and_events():
    life = OperationLifecycle.start("op", 1.0)
    life.move(OperationState.RUNNING, 2.0)
    life.set_suspended(True)
    assert life.suspended
    with pytest.raises(InvalidOperationStateError, match="cannot move from state 'running' to 'completed'"):
        life.move(OperationState.COMPLETED, 3.0)
    life.finish(OperationState.COMPLETED, 4.0)
    assert [(e.state.value, e.time) for e in life.events] == [
        ("starting", 1.0),
        ("running", 2.0),
        ("completing", 4.0),
        ("completed", 4.0),
    ]
    assert life.finish_time == 4.0 and not life.suspended
    with pytest.raises(InvalidOperationStateError, match="none \\(the operation has finished\\)"):
        life.move(OperationState.RUNNING, 5.0)
    with pytest.raises(PooltreeError, match="cannot be resumed"):
        life.set_suspended(False)


def test_registry_lifecycle_suspend_and_unknown_operation():
    trees = make_trees(seed_document())
    start(trees, "a0", "project-adhoc", now=1)
    trees.suspend_operation("a0")
    assert trees.operation_info("a0")["suspended"] is True
    assert trees.trees["physical"].operation("a0").suspended
    trees.resume_operation("a0")
    trees.abort_operation("a0", now=2)
    info = trees.operation_info("a0")
    assert info["state"] == "aborted" and [e["state"] for e in info["events"]][-2:] == ["aborting", "aborted"]
    with pytest.raises(PooltreeError) as error:
        trees.operation("zzz")
    assert error.value.code == 1915
    with pytest.raises(PooltreeError, match="already exists"):
        start(trees, "a1", "project-adhoc")
        start(trees, "a1", "project-adhoc")


TWO_TREES = {
    "physical": {"config": {"node_tag_filter": "!gpu"}, "pools": {"a": {"max_running_operation_count": 1}}},
    "gpu": {
        "config": {"node_tag_filter": "gpu"},
        "pools": {"g": {"max_running_operation_count": 1}, "spill": {"max_running_operation_count": 5}},
    },
}


def test_operation_in_two_trees_is_running_only_when_both_run_it():
    trees = make_trees(TWO_TREES, default_tree="physical")
    spec = {
        "pool_trees": ["physical", "gpu"],
        "pool": "a",
        "scheduling_options_per_pool_tree": {"gpu": {"pool": "g", "weight": 2}},
    }
    op = trees.register_operation("o1", spec, user="kim", now=1)
    assert op.trees == ["physical", "gpu"] and op.state is OperationState.RUNNING
    assert trees.trees["gpu"].operation("o1").weight == 2.0
    trees.register_operation("o2", {"pool_trees": ["gpu"], "pool": "g"}, user="kim", now=2)
    # o3 waits behind o1 in physical/a (limit 1).
    trees.register_operation("o3", {"pool_trees": ["physical"], "pool": "a"}, user="kim", now=3)
    trees.complete_operation("o1", now=4)
    o4 = trees.register_operation(
        "o4",
        OperationSpec.parse(
            {
                "pool_trees": ["physical", "gpu"],
                "pool": "spill",
                "scheduling_options_per_pool_tree": {"physical": {"pool": "a"}},
            }
        ),
        user="kim",
        now=5,
    )
    assert o4.state is OperationState.PENDING  # a is full (o3) in physical
    assert trees.complete_operation("o3", now=6) == ["o4"]
    assert trees.operation("o4").state is OperationState.RUNNING
    assert trees.node_sets({"n1": ["ssd"], "n2": ["gpu"]}) == {"physical": ["n1"], "gpu": ["n2"]}


def test_registration_is_all_or_nothing_across_trees():
    document = {k: dict(v) for k, v in TWO_TREES.items()}
    document["gpu"] = {
        "config": {"node_tag_filter": "gpu"},
        "pools": {"g": {"max_operation_count": 0, "max_running_operation_count": 0}},
    }
    trees = make_trees(document, default_tree="physical")
    with pytest.raises(PooltreeError, match='for pool "g" in tree "gpu"'):
        trees.register_operation(
            "o1",
            {
                "pool_trees": ["physical", "gpu"],
                "pool": "a",
                "scheduling_options_per_pool_tree": {"gpu": {"pool": "g"}},
            },
            user="kim",
        )
    assert not trees.trees["physical"].operations and not trees.operations
    with pytest.raises(PooltreeError, match='Pool tree "nope" not found'):
        trees.register_operation("o2", {"pool_trees": ["nope"]}, user="kim")


def test_offloading_adds_a_registration_in_another_tree():
    document = {
        "physical": {"pools": {"a": {"offloading_settings": {"gpu": {"pool": "spill", "weight": 3}}}}},
        "gpu": {"config": {"node_tag_filter": "gpu"}, "pools": {"spill": {}}},
    }
    trees = make_trees(document, default_tree="physical")
    op = trees.register_operation("o1", {"pool": "a"}, user="lee", now=1)
    assert op.trees == ["physical", "gpu"]
    offloaded = trees.trees["gpu"].operation_orchid("o1")
    assert offloaded["pool"] == "spill" and offloaded["offloading"] and offloaded["weight"] == 3.0
    trees.complete_operation("o1", now=2)
    assert not trees.trees["gpu"].operations


def test_fair_share_input_mirrors_the_tree():
    trees = make_trees(seed_document())
    start(trees, "a0", "project-adhoc", now=1, weight=2, resource_limits={"cpu": 5})
    start(trees, "b0", "project-backup", now=2)
    start(trees, "b1", "project-backup", now=3)
    start(trees, "b2", "project-backup", now=4)  # pending
    trees.suspend_operation("b1")
    usage = {
        op: (vector(user_slots=1, cpu=1), vector(user_slots=3, cpu=3)) for op in ("a0", "b0", "b1", "b2")
    }
    root, settings = build_fair_share_input(trees.trees["physical"], usage)
    assert root.id == "<Root>" and settings.main_resource == "cpu"
    project_root = root.children[0]
    assert project_root.id == "project-root" and project_root.specified_guarantee_resources == frozenset(
        {"cpu"}
    )
    assert project_root.strong_guarantee_resources[1] == 100
    adhoc, batch, backup = project_root.children
    assert (adhoc.id, batch.id, backup.id) == ("project-adhoc", "project-batch", "project-backup")
    assert batch.weight == 10
    (a0,) = adhoc.children
    assert isinstance(a0, FsOperation) and a0.weight == 2.0 and a0.specified_resource_limits[1] == 5
    assert (
        a0.schedulable
        and np.allclose(a0.demand, vector(user_slots=4, cpu=4))
        and a0.pending_allocation_count == 3
    )
    by_id = {op.id: op for op in backup.children}
    assert by_id["b0"].schedulable and by_id["b0"].starvation_tolerance == 0.8
    assert not by_id["b1"].schedulable and np.allclose(by_id["b1"].demand, by_id["b1"].usage)  # suspended
    # pending (held by a running limit): not an element of the update, as in YTsaurus, so it costs nothing per period
    assert "b2" not in by_id and not trees.trees["physical"].operation("b2").running


def test_effective_parameters_inherit_top_down():
    document = seed_document(config={"fair_share_starvation_tolerance": 0.7})
    document["physical"]["pools"]["project-root"]["fair_share_starvation_tolerance"] = 0.5
    document["physical"]["pools"]["project-root"]["non_preemptible_resource_usage_threshold"] = {"cpu": 2}
    document["physical"]["pools"]["project-root"]["pools"]["project-batch"][
        "enable_aggressive_starvation"
    ] = True
    trees = make_trees(document)
    tree = trees.trees["physical"]
    assert tree.effective_parameters("<Root>").fair_share_starvation_tolerance == 0.7
    batch = tree.effective_parameters("project-batch")
    assert batch.fair_share_starvation_tolerance == 0.5 and batch.aggressive_starvation_enabled
    assert batch.non_preemptible_resource_usage_threshold[1] == 2 and np.isinf(
        batch.non_preemptible_resource_usage_threshold[0]
    )
    assert not tree.effective_parameters("project-adhoc").aggressive_starvation_enabled
    start(trees, "x0", "project-adhoc", max_unpreemptible_allocation_count=0)
    assert tree.operation_effective_parameters("x0").non_preemptible_resource_usage_threshold[0] == 0
