"""The virtual Cypress on real stores: pool trees and pools, whole-tree validation, persistence, listeners."""

from __future__ import annotations

import pytest

from pooltree.server.cypress import Cypress, PoolTreesChange, cypress_path_of_field
from pooltree.server.protocol import ALREADY_EXISTS, RESOLVE_ERROR, YtError
from pooltree.server.store import open_store

TREES = "//sys/pool_trees"


@pytest.fixture
def cypress(store_url: str) -> Cypress:
    store = open_store(store_url)
    c = Cypress(store)
    c.create("scheduler_pool_tree", attributes={"name": "physical", "config": {"main_resource": "cpu"}})
    c.create(
        "scheduler_pool",
        attributes={
            "name": "project-root",
            "pool_tree": "physical",
            "strong_guarantee_resources": {"cpu": 100},
        },
    )
    c.create(
        "scheduler_pool", attributes={"name": "adhoc", "pool_tree": "physical", "parent_name": "project-root"}
    )
    return c


def test_tree_get_list_exists_and_attributes(cypress: Cypress) -> None:
    assert cypress.get(TREES) == {"physical": {"project-root": {"adhoc": {}}}}
    assert cypress.list(f"{TREES}/physical") == ["project-root"]
    assert cypress.get(f"{TREES}/physical/@config") == {"main_resource": "cpu"}
    assert cypress.get(f"{TREES}/physical/@config/main_resource") == "cpu"
    assert cypress.get(f"{TREES}/physical/project-root/@strong_guarantee_resources/cpu") == 100
    attrs = cypress.get(f"{TREES}/physical/project-root/adhoc/@")
    assert attrs["type"] == "scheduler_pool" and attrs["name"] == "adhoc"
    assert attrs["path"] == f"{TREES}/physical/project-root/adhoc"
    assert cypress.exists(f"{TREES}/physical/project-root/adhoc") is True
    assert cypress.exists(f"{TREES}/physical/nope") is False
    assert cypress.exists(f"{TREES}/physical/project-root/@weight") is False
    decorated = cypress.get(f"{TREES}/physical", attributes=["type"])
    assert decorated["$attributes"] == {"type": "scheduler_pool_tree"}
    assert decorated["$value"]["project-root"]["$attributes"] == {"type": "scheduler_pool"}
    assert cypress.get(f"#{attrs['id']}/@name") == "adhoc"
    assert cypress.list(f"{TREES}/physical/project-root", max_size=0) == {
        "$attributes": {"incomplete": True},
        "$value": [],
    }


def test_default_tree_and_orchid(cypress: Cypress) -> None:
    assert cypress.get("//sys/scheduler/orchid/scheduler/default_pool_tree") == "physical"  # the only tree
    assert cypress.get(f"{TREES}/@default_tree") == "physical"  # set when the first tree was created
    cypress.set(f"{TREES}/physical/@config/node_tag_filter", "!gpu")
    cypress.create("scheduler_pool_tree", f"{TREES}/gpu", attributes={"config": {"node_tag_filter": "gpu"}})
    assert cypress.get(f"{TREES}/gpu/@config") == {"node_tag_filter": "gpu"}
    assert cypress.get("//sys/scheduler/orchid/scheduler/default_pool_tree") == "physical"
    cypress.remove(f"{TREES}/@default_tree")
    with pytest.raises(YtError) as info:
        cypress.get("//sys/scheduler/orchid/scheduler/default_pool_tree")
    assert info.value.code == RESOLVE_ERROR
    cypress.set(f"{TREES}/@default_tree", "gpu")
    assert cypress.get("//sys/scheduler/orchid/scheduler/default_pool_tree") == "gpu"
    # as on YTsaurus's master, @default_tree may name a tree that does not exist, and the default tree may be
    # removed: there is no default tree then (the scheduler raises its update_pools alert)
    cypress.set(f"{TREES}/@default_tree", "missing")
    with pytest.raises(YtError) as info:
        cypress.get("//sys/scheduler/orchid/scheduler/default_pool_tree")
    assert 'names pool tree "missing", which does not exist' in str(info.value.inner_errors)
    cypress.set(f"{TREES}/@default_tree", "gpu")
    cypress.remove(f"{TREES}/gpu")
    assert list(cypress.get(TREES)) == ["physical"] and cypress.get(f"{TREES}/@default_tree") == "gpu"
    with pytest.raises(YtError, match="must be a pool tree name"):
        cypress.set(f"{TREES}/@default_tree", 7)
    for path in ("//sys/client_config", "//sys/@local_mode_fqdn", "//sys/@local_mode_proxy_address",
                 "//sys/scheduler/orchid/scheduler/pool_trees"):  # fmt: skip
        with pytest.raises(YtError) as info:
            cypress.get(path)
        assert info.value.code == RESOLVE_ERROR, path

    class Orchid:
        def get(self, tokens: list[str]) -> object:
            if tokens[:3] == ["scheduler", "pool_trees", "gpu"]:
                return {"pools": {"<Root>": {"weight": 1.0}}}
            raise KeyError("/".join(tokens))

    cypress.orchid = Orchid()
    assert cypress.get("//sys/scheduler/orchid/scheduler/pool_trees/gpu") == {
        "pools": {"<Root>": {"weight": 1.0}}
    }
    assert cypress.list("//sys/scheduler/orchid/scheduler/pool_trees/gpu") == ["pools"]
    assert cypress.exists("//sys/scheduler/orchid/scheduler/pool_trees/cpu") is False
    with pytest.raises(YtError, match="read-only"):
        cypress.set("//sys/scheduler/orchid/scheduler/x", 1)


def test_invalid_change_is_rejected_and_state_kept(cypress: Cypress, store_url: str) -> None:
    path = f"{TREES}/physical/project-root/adhoc/@strong_guarantee_resources"
    cypress.set(path, {"cpu": 80})
    with pytest.raises(YtError) as info:
        cypress.set(path, {"cpu": 150})
    error = info.value
    assert "Invalid pool trees configuration" in error.message
    assert error.attributes["field"].startswith("pool_trees.physical.pools.project-root")
    assert error.attributes["path"].startswith(f"{TREES}/physical/project-root")
    assert cypress.get(path) == {"cpu": 80}
    with pytest.raises(YtError, match="weight"):
        cypress.set(f"{TREES}/physical/project-root/@weight", -1)
    with pytest.raises(YtError, match="mode"):
        cypress.create("scheduler_pool", attributes={"name": "x", "pool_tree": "physical", "mode": "lifo"})
    assert cypress.exists(f"{TREES}/physical/x") is False
    reopened = Cypress(open_store(store_url))  # the store holds the last good state only
    assert reopened.get(path) == {"cpu": 80}
    assert reopened.get(TREES) == {"physical": {"project-root": {"adhoc": {}}}}


def test_pool_creation_rules(cypress: Cypress) -> None:
    with pytest.raises(YtError) as info:
        cypress.create("scheduler_pool", attributes={"name": "adhoc", "pool_tree": "physical"})
    assert info.value.code == ALREADY_EXISTS
    with pytest.raises(YtError) as info:
        cypress.create("scheduler_pool", attributes={"name": "y", "pool_tree": "nope"})
    assert info.value.code == RESOLVE_ERROR
    with pytest.raises(YtError, match='Parent pool "ghost" does not exist'):
        cypress.create(
            "scheduler_pool", attributes={"name": "y", "pool_tree": "physical", "parent_name": "ghost"}
        )
    with pytest.raises(YtError, match='Attribute "pool_tree" is required'):
        cypress.create("scheduler_pool", attributes={"name": "y"})
    for bad in ("a$b", "<Root>", "", "a b"):
        with pytest.raises(YtError, match="name"):
            cypress.create("scheduler_pool", attributes={"name": bad, "pool_tree": "physical"})
    with pytest.raises(YtError, match="Only scheduler_pool nodes"):
        cypress.create("map_node", f"{TREES}/physical/m")
    with pytest.raises(YtError, match="Only scheduler_pool_tree nodes"):
        cypress.create("map_node", f"{TREES}/m")
    with pytest.raises(YtError, match="Cannot set the value"):
        cypress.set(f"{TREES}/physical/project-root", {})
    top = cypress.create(
        "scheduler_pool", attributes={"name": "top", "pool_tree": "physical", "parent_name": "<Root>"}
    )
    assert cypress.get(f"{TREES}/physical/top/@id") == top
    assert cypress.create("scheduler_pool", f"{TREES}/physical/top", ignore_existing=True) == top
    nested = cypress.create("scheduler_pool", f"{TREES}/physical/top/child", attributes={"weight": 3})
    assert cypress.get(f"{TREES}/physical/top/child/@weight") == 3 and nested != top


def test_remove_rules(cypress: Cypress) -> None:
    with pytest.raises(YtError, match="non-empty"):
        cypress.remove(f"{TREES}/physical/project-root")
    cypress.remove(f"{TREES}/physical/project-root", recursive=True)
    assert cypress.get(f"{TREES}/physical") == {}
    with pytest.raises(YtError) as info:
        cypress.remove(f"{TREES}/physical/project-root")
    assert info.value.code == RESOLVE_ERROR
    cypress.remove(f"{TREES}/physical/project-root", force=True)
    for protected in ("//sys", TREES, "//sys/scheduler/orchid"):
        with pytest.raises(YtError):
            cypress.remove(protected, recursive=True)
    cypress.set(f"{TREES}/physical/@config/max_operation_count", 10)
    cypress.remove(f"{TREES}/physical/@config/max_operation_count")
    assert cypress.get(f"{TREES}/physical/@config") == {"main_resource": "cpu"}
    with pytest.raises(YtError, match="cannot be set"):
        cypress.set(f"{TREES}/physical/@type", "map_node")


def test_generic_nodes(cypress: Cypress) -> None:
    cypress.set("//tmp/a/b", {"x": 1, "s": "значение"}, recursive=True)
    assert cypress.get("//tmp/a") == {"b": {"s": "значение", "x": 1}}
    assert cypress.get("//tmp/a/b/x/@type") == "int64_node"
    cypress.create("map_node", "//tmp/cache/new", recursive=True)
    assert cypress.create("map_node", "//tmp/cache/new", ignore_existing=True)
    with pytest.raises(YtError) as info:
        cypress.create("map_node", "//tmp/cache/new")
    assert info.value.code == ALREADY_EXISTS
    with pytest.raises(YtError, match='Cannot create a "table": pooltree is a scheduler'):
        cypress.create("table", "//tmp/t")
    with pytest.raises(YtError) as info:
        cypress.set("//tmp/missing/x", 1)
    assert info.value.code == RESOLVE_ERROR


def test_listener_sees_committed_changes_only(cypress: Cypress) -> None:
    events: list[PoolTreesChange] = []
    cypress.subscribe(events.append)
    cypress.set(f"{TREES}/physical/project-root/@weight", 2.0)
    with pytest.raises(YtError):
        cypress.set(f"{TREES}/physical/project-root/@weight", "heavy")
    cypress.set("//tmp/unrelated", 1)
    assert len(events) == 1
    event = events[0]
    assert event.changed == frozenset({"physical"}) and not event.removed
    assert event.trees["physical"]["pools"]["project-root"]["weight"] == 2.0
    assert "physical" in event.parsed  # what parse_pool_trees returned
    cypress.set(f"{TREES}/physical/@config/node_tag_filter", "!other")
    cypress.create(
        "scheduler_pool_tree", attributes={"name": "other", "config": {"node_tag_filter": "other"}}
    )
    cypress.remove(f"{TREES}/other")
    assert events[-1].removed == frozenset({"other"})


def test_cypress_path_of_field() -> None:
    assert (
        cypress_path_of_field("pool_trees.physical.pools.a.pools.b.weight") == f"{TREES}/physical/a/b/@weight"
    )
    assert (
        cypress_path_of_field("pool_trees.physical.config.main_resource")
        == f"{TREES}/physical/@config/main_resource"
    )
    assert cypress_path_of_field("pool_trees.physical") == f"{TREES}/physical"
    assert cypress_path_of_field("") is None


def test_watched_document_is_parsed_before_commit_and_announced_after(store_url: str) -> None:
    from pooltree.server.cypress_watch import USER_TO_DEFAULT_POOL_PATH, parse_user_to_default_pool

    store = open_store(store_url)
    c = Cypress(store)
    seen: list[dict[str, str]] = []
    assert c.watch(USER_TO_DEFAULT_POOL_PATH, parse_user_to_default_pool, seen.append) == {}
    c.create("document", USER_TO_DEFAULT_POOL_PATH, attributes={"value": {}})
    c.set(USER_TO_DEFAULT_POOL_PATH, {"alice": "research"})
    assert c.get(f"{USER_TO_DEFAULT_POOL_PATH}/@type") == "document"  # a set keeps a document a document
    with pytest.raises(YtError) as refused:
        c.set(USER_TO_DEFAULT_POOL_PATH, {"bob": 7})
    assert refused.value.attributes["field"] == "bob"
    assert "user_to_default_pool" in refused.value.message
    assert c.get(USER_TO_DEFAULT_POOL_PATH) == {"alice": "research"}  # the last good value stays
    c.remove(USER_TO_DEFAULT_POOL_PATH)
    assert seen == [{}, {"alice": "research"}, {}]
    assert Cypress(open_store(store_url)).get("//sys/scheduler").get("user_to_default_pool") is None
