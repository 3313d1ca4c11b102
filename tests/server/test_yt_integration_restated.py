"""YTsaurus's public scheduler integration tests that apply to pooltree, restated in our own code against a live
scheduler through ``yt.wrapper`` (the reference: yt/tests/integration/scheduler/test_scheduler_pools.py and
test_scheduler_runtime_parameters.py). Each test names the YTsaurus test it follows."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yt.wrapper as ytw

from pooltree.server import create_app, open_store

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import ROOT_TOKEN, Cluster
from live_cluster import client as live_client
from polling import wait_for
from test_live_service import vanilla

TREES = "//sys/pool_trees"
ORCHID_POOLS = "//sys/scheduler/orchid/scheduler/pool_trees/default/pools"


@pytest.fixture
def yt(tmp_path: Path, serve: Callable[[object], str]) -> ytw.YtClient:
    """Cypress only (no nodes): pool manipulations, as YTsaurus's TestSchedulerPoolManipulations runs them."""
    url = serve(create_app(open_store(f"sqlite:///{tmp_path / 'state.db'}"), token=ROOT_TOKEN))
    client = live_client(url)
    client.create("scheduler_pool_tree", attributes={"name": "my_tree"})
    return client


def pool(
    client: ytw.YtClient, name: str, tree: str = "my_tree", parent: str | None = None, **attributes: object
) -> None:
    attrs = {"name": name, "pool_tree": tree, **attributes}
    if parent is not None:
        attrs["parent_name"] = parent
    client.create("scheduler_pool", attributes=attrs)


def test_create_and_remove(yt: ytw.YtClient) -> None:  # test_create, test_remove, test_remove_subtree
    pool(yt, "nirvana")
    pool(yt, "prod", parent="nirvana")
    assert yt.get(TREES) == {"my_tree": {"nirvana": {"prod": {}}}}
    yt.remove(f"{TREES}/my_tree/nirvana/prod")
    assert yt.get(TREES) == {"my_tree": {"nirvana": {}}}
    pool(yt, "prod", parent="nirvana")
    yt.remove(f"{TREES}/my_tree/nirvana", recursive=True)
    assert yt.get(TREES) == {"my_tree": {}}


def test_names(yt: ytw.YtClient) -> None:
    # test_duplicate_names_forbidden_in_same_tree, test_root_name_is_forbidden, test_dollar_in_name_is_forbidden,
    # test_long_pool_name_is_forbidden, test_create_checks_tree_and_parent_pool_existence
    pool(yt, "nirvana")
    pool(yt, "prod", parent="nirvana")
    for name, parent in (("nirvana", None), ("prod", None), ("<Root>", "nirvana"), ("pool$name", None), ("abc" * 100, None), ("", None)):  # fmt: skip
        with pytest.raises(ytw.YtResponseError):
            pool(yt, name, parent=parent)
    with pytest.raises(ytw.YtResponseError):
        pool(yt, "x", tree="inexistent_tree")
    with pytest.raises(ytw.YtResponseError):
        pool(yt, "x", parent="missing_parent")


def test_duplicate_names_allowed_in_different_trees(yt: ytw.YtClient) -> None:
    yt.set(f"{TREES}/my_tree/@config/node_tag_filter", "!other")  # pooltree: trees must not share nodes
    yt.create(
        "scheduler_pool_tree", attributes={"name": "another_tree", "config": {"node_tag_filter": "other"}}
    )
    for tree in ("my_tree", "another_tree"):
        pool(yt, "nirvana", tree=tree)
        pool(yt, "prod", tree=tree, parent="nirvana")


def test_moves(yt: ytw.YtClient) -> None:
    # test_move_via_attribute_pool_to_subpool, test_standard_move_pool_to_subpool, ..._to_root, test_move_with_rename
    pool(yt, "nirvana")
    pool(yt, "logfeller")
    pool(yt, "logfeller_prod", parent="logfeller")
    yt.set(f"{TREES}/my_tree/logfeller/logfeller_prod/@parent_name", "nirvana")
    assert yt.get(f"{TREES}/my_tree") == {"logfeller": {}, "nirvana": {"logfeller_prod": {}}}
    yt.set(f"{TREES}/my_tree/nirvana/logfeller_prod/@parent_name", "<Root>")
    assert yt.get(f"{TREES}/my_tree") == {"logfeller": {}, "nirvana": {}, "logfeller_prod": {}}
    yt.move(f"{TREES}/my_tree/logfeller_prod", f"{TREES}/my_tree/nirvana/nirvana_prod")
    assert yt.get(f"{TREES}/my_tree") == {"logfeller": {}, "nirvana": {"nirvana_prod": {}}}
    # test_move_via_attribute_to_descendant_is_forbidden, test_standard_move_to_descendant_is_forbidden2
    with pytest.raises(ytw.YtResponseError):
        yt.set(f"{TREES}/my_tree/nirvana/@parent_name", "nirvana_prod")
    with pytest.raises(ytw.YtResponseError):
        yt.move(f"{TREES}/my_tree/nirvana", f"{TREES}/my_tree/nirvana/nirvana_prod/nirvana")
    # test_standard_move_of_pool_trees_is_forbidden
    with pytest.raises(ytw.YtResponseError):
        yt.move(f"{TREES}/my_tree", f"{TREES}/my_tree/nirvana/other")
    assert yt.get(f"{TREES}/my_tree") == {"logfeller": {}, "nirvana": {"nirvana_prod": {}}}


def test_moves_between_trees(yt: ytw.YtClient) -> None:
    # test_standard_move_to_another_pool_tree, test_standard_move_to_another_tree_respects_duplicate_name_validation,
    # test_move_via_attribute_to_another_pool_tree_is_forbidden
    yt.set(f"{TREES}/my_tree/@config/node_tag_filter", "!other")
    yt.create(
        "scheduler_pool_tree", attributes={"name": "another_tree", "config": {"node_tag_filter": "other"}}
    )
    pool(yt, "nirvana")
    pool(yt, "logfeller", tree="another_tree")
    with pytest.raises(ytw.YtResponseError):
        yt.set(f"{TREES}/my_tree/nirvana/@parent_name", "logfeller")
    pool(yt, "twin", tree="another_tree")
    pool(yt, "twin", parent="nirvana")
    with pytest.raises(ytw.YtResponseError, match="already exists"):
        yt.move(
            f"{TREES}/my_tree/nirvana", f"{TREES}/another_tree/logfeller/nirvana"
        )  # its child "twin" clashes
    yt.remove(f"{TREES}/another_tree/twin")
    yt.move(f"{TREES}/my_tree/nirvana", f"{TREES}/another_tree/logfeller/nirvana")
    assert yt.get(TREES) == {"my_tree": {}, "another_tree": {"logfeller": {"nirvana": {"twin": {}}}}}


def test_validation_on_move_rename_set_and_remove(yt: ytw.YtClient) -> None:
    pool(yt, "nirvana")
    pool(yt, "logfeller")
    # test_standard_move_respects_validation, test_move_via_attribute_respects_validation
    yt.set(f"{TREES}/my_tree/logfeller/@strong_guarantee_resources", {"cpu": 10})
    with pytest.raises(ytw.YtResponseError):
        yt.move(f"{TREES}/my_tree/logfeller", f"{TREES}/my_tree/nirvana/logfeller")
    with pytest.raises(ytw.YtResponseError):
        yt.set(f"{TREES}/my_tree/logfeller/@parent_name", "nirvana")
    assert yt.get(f"{TREES}/my_tree") == {"nirvana": {}, "logfeller": {}}
    # test_rename_pool, test_rename_via_attribute_respects_name_validation
    yt.set(f"{TREES}/my_tree/logfeller/@name", "logs")
    assert yt.get(f"{TREES}/my_tree") == {"nirvana": {}, "logs": {}}
    assert yt.get(f"{TREES}/my_tree/logs/@name") == "logs"
    for bad in ("logs$logs", "nirvana"):
        with pytest.raises(ytw.YtResponseError):
            yt.set(f"{TREES}/my_tree/logs/@name", bad)
    # test_invalid_type_pool_attribute_is_refused_on_set, test_pool_attribute_constraints_are_enforced_on_set
    yt.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)
    for bad in (True, -1):
        with pytest.raises(ytw.YtResponseError):
            yt.set(f"{TREES}/my_tree/nirvana/@max_operation_count", bad)
    assert yt.get(f"{TREES}/my_tree/nirvana/@max_operation_count") == 10
    # test_invalid_type_pooltree_config_attribute_is_refused_on_set, ..._constraints_are_enforced_on_set
    yt.set(f"{TREES}/my_tree/@config/max_ephemeral_pools_per_user", 10)
    for bad in (True, -1):
        with pytest.raises(ytw.YtResponseError):
            yt.set(f"{TREES}/my_tree/@config/max_ephemeral_pools_per_user", bad)
    assert yt.get(f"{TREES}/my_tree/@config/max_ephemeral_pools_per_user") == 10
    # test_max_running_operation_count_validation
    with pytest.raises(ytw.YtResponseError):
        yt.set(f"{TREES}/my_tree/nirvana/@max_running_operation_count", 11)
    yt.set(f"{TREES}/my_tree/nirvana/@max_running_operation_count", 9)
    with pytest.raises(ytw.YtResponseError):
        yt.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 8)
    # test_set_and_get_unknown_pool_attribute, test_get_pooltree_with_config_attribute
    yt.set(f"{TREES}/my_tree/nirvana/@some_unknown_attribute", 10)
    assert yt.get(f"{TREES}/my_tree/nirvana/@some_unknown_attribute") == 10
    tree = yt.get(f"{TREES}/my_tree", attributes=["config"])
    assert tree.attributes["config"]["max_ephemeral_pools_per_user"] == 10
    assert "max_running_operation_count" not in tree.attributes["config"]
    # test_if_remove_attribute_breaks_validation_value_is_preserved
    pool(yt, "prod", parent="nirvana")
    yt.set(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources", {"cpu": 10})
    yt.set(f"{TREES}/my_tree/nirvana/prod/@strong_guarantee_resources", {"cpu": 10})
    with pytest.raises(ytw.YtResponseError):
        yt.remove(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources")
    assert yt.get(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources") == {"cpu": 10}
    # test_subpools_of_fifo_pools_are_forbidden
    with pytest.raises(ytw.YtResponseError):
        yt.set(f"{TREES}/my_tree/nirvana/@mode", "fifo")


def _progress(client: ytw.YtClient, op_id: str, key: str) -> object:
    info = client.get_operation(op_id)["progress"]["scheduling_info_per_pool_tree"].get("default", {})
    return info.get(key)


def test_runtime_parameters(cluster: Cluster) -> None:
    # test_update_runtime_parameters (vanilla instead of map), test_running_operation_counts_on_change_pool
    client = cluster.client()
    for name in ("initial_pool", "changed_pool"):
        client.create("scheduler_pool", attributes={"name": name, "pool_tree": "default"})
    op = client.run_operation(
        vanilla("sleep 60", 1, pool="initial_pool", weight=5, annotations={"foo": "abc"}), sync=False
    )
    wait_for(lambda: _progress(client, op.id, "weight") == 5.0)
    assert client.get_operation(op.id)["runtime_parameters"]["annotations"] == {"foo": "abc"}
    wait_for(lambda: client.get(f"{ORCHID_POOLS}/initial_pool/running_operation_count") == 1)
    client.update_operation_parameters(
        op.id,
        {
            "pool": "changed_pool",
            "scheduling_options_per_pool_tree": {
                "default": {"weight": 3.0, "resource_limits": {"user_slots": 0}}
            },
            "annotations": {"foo": "bar"},
        },
    )
    wait_for(lambda: _progress(client, op.id, "weight") == 3.0)
    wait_for(lambda: (_progress(client, op.id, "resource_limits") or {}).get("user_slots") == 0)
    assert _progress(client, op.id, "pool") == "changed_pool"
    assert client.get_operation(op.id)["runtime_parameters"]["annotations"] == {"foo": "bar"}
    assert _progress(client, op.id, "effective_fair_share_starvation_tolerance") == 0.8
    wait_for(lambda: client.get(f"{ORCHID_POOLS}/initial_pool/running_operation_count") == 0)
    wait_for(lambda: client.get(f"{ORCHID_POOLS}/changed_pool/running_operation_count") == 1)
    client.abort_operation(op.id)


def test_pool_changes_and_limits(cluster: Cluster) -> None:
    # test_operation_count_validation_on_change_pool, test_pool_name_validation_on_change_pool_to_ephemeral,
    # test_change_pool_of_pending_operation_hang
    client = cluster.client()
    client.create("scheduler_pool", attributes={"name": "initial_pool", "pool_tree": "default"})
    client.create(
        "scheduler_pool",
        attributes={"name": "full_pool", "pool_tree": "default", "max_running_operation_count": 0},
    )
    op = client.run_operation(vanilla("sleep 60", 1, pool="initial_pool"), sync=False)
    wait_for(lambda: client.get_operation(op.id)["state"] == "running")
    with pytest.raises(ytw.YtResponseError):
        client.update_operation_parameters(op.id, {"pool": "full_pool"})
    with pytest.raises(ytw.YtResponseError):
        client.update_operation_parameters(
            op.id, {"scheduling_options_per_pool_tree": {"default": {"pool": "ephemeral$subpool"}}}
        )
    assert _progress(client, op.id, "pool") == "initial_pool"
    client.abort_operation(op.id)
    pending = client.run_operation(vanilla("true", 1, pool="full_pool"), sync=False)
    wait_for(lambda: client.get_operation(pending.id)["state"] == "pending")
    client.update_operation_parameters(pending.id, {"pool": "initial_pool"})
    wait_for(lambda: client.get_operation(pending.id)["state"] == "completed", timeout=30)


def test_ephemeral_pools(cluster: Cluster) -> None:
    # YTsaurus's ephemeral pool behaviour: an operation in a pool that does not exist gets an ephemeral pool in
    # the default parent, listed per user in the orchid's user_to_ephemeral_pools, and gone once it is empty
    # (the user stays listed)
    client = cluster.client()
    op = client.run_operation(vanilla("sleep 60", 1, pool="my_ephemeral"), sync=False)
    tree = "//sys/scheduler/orchid/scheduler/pool_trees/default"
    wait_for(lambda: client.exists(f"{tree}/pools/my_ephemeral"))
    assert bool(client.get(f"{tree}/pools/my_ephemeral/is_ephemeral"))
    wait_for(lambda: client.get(f"{tree}/user_to_ephemeral_pools") == {"root": ["my_ephemeral"]})
    client.abort_operation(op.id)
    wait_for(lambda: not client.exists(f"{tree}/pools/my_ephemeral"))
    # YTsaurus erases the pool from the user's set and keeps the user (its test_ephemeral_to_explicit_pool_...)
    wait_for(lambda: client.get(f"{tree}/user_to_ephemeral_pools") == {"root": []})
