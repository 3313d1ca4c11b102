"""Operation count limits, pending queues and activation on the seeds' project-root example (§f)."""

from __future__ import annotations

import pytest
from treekit import definitions, make_trees, seed_document, start

from pooltree.errors import PooltreeError
from pooltree.tree import OperationState, TooManyOperationsError


def counts(trees, pool):
    info = trees.trees["physical"].pool_orchid(pool)
    return info["running_operation_count"], info["operation_count"], info["pending_operation_ids"]


def test_backup_runs_two_and_queues_the_rest_in_fifo_order():
    trees = make_trees(seed_document())
    states = [start(trees, f"b{i}", "project-backup", now=i).state for i in range(5)]
    assert states == ["running", "running", "pending", "pending", "pending"]
    assert counts(trees, "project-backup") == (2, 5, ["b2", "b3", "b4"])
    # Counters propagate to every ancestor including the root.
    assert counts(trees, "project-root") == (2, 5, [])
    assert counts(trees, "<Root>") == (2, 5, [])
    alert = trees.operation("b3").alerts["operation_pending"]
    assert alert["message"] == "Max running operation count violated"
    assert alert["attributes"] == {"pool": "project-backup", "limit": 2, "pool_tree": "physical"}

    assert trees.complete_operation("b0", now=10) == ["b2"]
    assert trees.operation("b2").state is OperationState.RUNNING
    assert "operation_pending" not in trees.operation("b2").alerts
    assert trees.abort_operation("b1", now=11) == ["b3"]
    assert counts(trees, "project-backup") == (2, 3, ["b4"])
    events = trees.operation_info("b3")["events"]
    assert [(e["state"], e["time"]) for e in events] == [("starting", 3), ("pending", 3), ("running", 11)]


def test_lowest_violating_pool_holds_the_operation():
    trees = make_trees(seed_document())
    for i in range(8):
        start(trees, f"a{i}", "project-adhoc")
    for i in range(2):
        start(trees, f"x{i}", "project-batch")
    # project-root has 10 running = its limit; batch (2 of 4) is fine, so project-root holds the new operation.
    assert start(trees, "x2", "project-batch").state is OperationState.PENDING
    assert start(trees, "a8", "project-adhoc").state is OperationState.PENDING
    assert counts(trees, "project-root")[2] == ["x2", "a8"]
    assert counts(trees, "project-batch")[2] == []
    info = trees.trees["physical"].operation_orchid("a8")
    assert info["pending_pool"] == "project-root"
    assert info["pending_position"] == 1
    assert 'pool "project-root"' in info["pending_reason"]
    assert trees.operation("x2").alerts["operation_pending"]["attributes"]["pool"] == "project-root"
    # A finished adhoc operation frees a slot in project-root: the head of its queue (x2) runs first.
    assert trees.complete_operation("a0", now=5) == ["x2"]
    assert trees.complete_operation("a1", now=6) == ["a8"]


def test_activation_requeues_to_a_still_violating_pool():
    trees = make_trees(seed_document())
    for i in range(7):
        start(trees, f"a{i}", "project-adhoc")
    for i in range(3):
        start(trees, f"x{i}", "project-batch")
    assert start(trees, "x3", "project-batch").state is OperationState.PENDING  # held by project-root
    # Move a running adhoc operation into batch: batch gets 4 of 4, project-root stays at 10.
    assert trees.update_operation_parameters("a0", {"pool": "project-batch"}, now=1) == []
    assert counts(trees, "project-batch")[0] == 4
    # A slot frees in project-root, but x3's own pool is now full: x3 is re-queued to project-batch.
    assert trees.complete_operation("a1", now=2) == []
    assert counts(trees, "project-root")[2] == []
    assert counts(trees, "project-batch")[2] == ["x3"]
    assert trees.trees["physical"].operation("x3").alert["attributes"]["pool"] == "project-batch"
    assert trees.complete_operation("x0", now=3) == ["x3"]


def test_too_many_operations_error_walks_to_the_root():
    document = seed_document(config={"max_operation_count": 7})
    document["physical"]["pools"]["project-root"]["pools"]["project-backup"]["max_operation_count"] = 3
    document["physical"]["pools"]["project-root"]["pools"]["project-backup"][
        "max_running_operation_count"
    ] = 2
    trees = make_trees(document)
    for i in range(3):
        start(trees, f"b{i}", "project-backup")
    with pytest.raises(TooManyOperationsError) as error:
        start(trees, "b3", "project-backup")
    assert error.value.code == 202
    assert error.value.message == (
        'Limit for the number of concurrent operations 3 for pool "project-backup" in tree "physical" has been reached'
    )
    assert error.value.attributes == {"pool": "project-backup", "pool_tree": "physical", "limit": 3}
    assert "b3" not in trees.operations
    for i in range(4):
        start(trees, f"a{i}", "project-adhoc")
    with pytest.raises(TooManyOperationsError, match='operations 7 for pool "<Root>" in tree "physical"'):
        start(trees, "a4", "project-adhoc")
    # A pending operation counts too: finishing one frees room for a new start.
    trees.complete_operation("b2", now=1)
    start(trees, "a4", "project-adhoc")


def test_tree_defaults_apply_to_pools_without_own_limits():
    trees = make_trees(
        seed_document(
            config={"max_running_operation_count_per_pool": 1, "max_operation_count_per_pool": 2},
            extra_pools={"plain": {}},
        )
    )
    tree = trees.trees["physical"]
    assert tree.pool_orchid("plain")["max_running_operation_count"] == 1
    assert tree.pool_orchid("plain")["max_operation_count"] == 2
    assert tree.pool_orchid("<Root>")["max_running_operation_count"] == 2000
    assert tree.pool_orchid("<Root>")["max_operation_count"] == 50000
    assert start(trees, "p0", "plain").state is OperationState.RUNNING
    assert start(trees, "p1", "plain").state is OperationState.PENDING
    with pytest.raises(TooManyOperationsError):
        start(trees, "p2", "plain")


def test_seeds_pool_defaults_run_eight_and_admit_fifty():
    """The seeds' pool table: a pool without its own limits runs 8 operations and holds at most 50."""
    trees = make_trees(seed_document(extra_pools={"plain": {}}))
    states = [start(trees, f"p{i}", "plain", now=i).state for i in range(50)]
    assert states.count(OperationState.RUNNING) == 8
    assert counts(trees, "plain")[:2] == (8, 50)
    assert counts(trees, "plain")[2] == [f"p{i}" for i in range(8, 50)]
    alert = trees.operation("p8").alerts["operation_pending"]
    assert alert["attributes"] == {"pool": "plain", "limit": 8, "pool_tree": "physical"}
    with pytest.raises(TooManyOperationsError, match='operations 50 for pool "plain" in tree "physical"'):
        start(trees, "p50", "plain")
    assert trees.complete_operation("p0", now=60) == ["p8"]


def test_pending_operation_leaving_does_not_activate_others():
    trees = make_trees(seed_document())
    for i in range(4):
        start(trees, f"b{i}", "project-backup")
    assert trees.abort_operation("b3", now=1) == []
    assert counts(trees, "project-backup") == (2, 3, ["b2"])
    assert trees.operation_info("b3")["state"] == "aborted"


def test_pool_change_checks_and_messages():
    trees = make_trees(seed_document())
    start(trees, "b0", "project-backup")
    start(trees, "b1", "project-backup")
    start(trees, "a0", "project-adhoc")
    with pytest.raises(
        PooltreeError, match=r'^Max running operation count of pool "project-backup" violated$'
    ):
        trees.update_operation_parameters("a0", {"pool": "project-backup"}, now=1)
    assert trees.trees["physical"].operation("a0").pool.name == "project-adhoc"
    document = seed_document()
    document["physical"]["pools"]["project-root"]["pools"]["project-backup"]["max_operation_count"] = 2
    document["physical"]["pools"]["project-root"]["pools"]["project-backup"][
        "max_running_operation_count"
    ] = 2
    trees.apply_config(definitions(document))
    with pytest.raises(PooltreeError, match=r'^Max operation count of pool "project-backup" violated$'):
        trees.update_operation_parameters("a0", {"pool": "project-backup"}, now=2)
    # A running operation moving inside project-root is not re-checked against project-root itself.
    for i in range(1, 7):
        start(trees, f"a{i}", "project-adhoc")
    start(trees, "x0", "project-batch")
    assert trees.trees["physical"].pool("project-root").running_operation_count == 10
    trees.update_operation_parameters("a1", {"pool": "project-batch"}, now=3)
    assert trees.trees["physical"].operation("a1").pool.name == "project-batch"


def test_pending_operation_moved_to_a_free_pool_runs():
    trees = make_trees(seed_document())
    for i in range(3):
        start(trees, f"b{i}", "project-backup")
    assert trees.operation("b2").state is OperationState.PENDING
    assert trees.update_operation_parameters("b2", {"pool": "project-adhoc", "weight": 3}, now=4) == ["b2"]
    op = trees.trees["physical"].operation("b2")
    assert (op.pool.name, op.running, op.weight) == ("project-adhoc", True, 3.0)
    assert trees.operation("b2").state is OperationState.RUNNING


def test_runtime_parameter_validation_names_the_field():
    trees = make_trees(seed_document())
    start(trees, "a0", "project-adhoc")
    with pytest.raises(PooltreeError, match="weight must be a positive"):
        trees.update_operation_parameters("a0", {"weight": -1}, now=1)
    with pytest.raises(PooltreeError, match="unknown runtime parameter"):
        trees.update_operation_parameters("a0", {"wieght": 2}, now=1)
    with pytest.raises(PooltreeError, match="unknown resource"):
        trees.update_operation_parameters("a0", {"resource_limits": {"cpus": 2}}, now=1)
    trees.update_operation_parameters(
        "a0", {"scheduling_options_per_pool_tree": {"physical": {"resource_limits": {"cpu": 2}}}}, now=1
    )
    assert trees.trees["physical"].operation_orchid("a0")["resource_limits"] == {"cpu": 2.0}
