"""Attribute rules of pools and pool trees in the virtual Cypress, as YTsaurus's master applies them: a part of
``@acl`` is settable when the ACL it leaves is valid, ``min_share_resources`` is ``strong_guarantee_resources``,
pool options are no attributes of a pool tree, ``@pool_tree`` is not a pool attribute."""

from __future__ import annotations

import pytest

from pooltree.config.tree import PoolTreeConfig
from pooltree.server.cypress import Cypress
from pooltree.server.protocol import RESOLVE_ERROR, YtError
from pooltree.server.store import open_store
from pooltree.server.tree_options import effective_tree_config

TREES = "//sys/pool_trees"
ACE = {"action": "allow", "subjects": ["u"], "permissions": ["use"]}


@pytest.fixture
def cypress(store_url: str) -> Cypress:
    c = Cypress(open_store(store_url))
    c.create("scheduler_pool_tree", attributes={"name": "t"})
    c.create("scheduler_pool", attributes={"name": "p", "pool_tree": "t", "acl": [ACE]})
    return c


def test_a_part_of_an_acl_is_set_when_the_acl_stays_valid(cypress: Cypress) -> None:
    cypress.set(f"{TREES}/t/p/@acl/0/action", "deny")
    assert cypress.get(f"{TREES}/t/p/@acl") == [{**ACE, "action": "deny"}]
    with pytest.raises(YtError, match="invalid ACL") as refused:
        cypress.set(f"{TREES}/t/p/@acl/0/action", "maybe")
    assert refused.value.attributes["path"] == f"{TREES}/t/p/@acl/0/action"
    assert cypress.get(f"{TREES}/t/p/@acl/0/action") == "deny"  # the last good ACL is kept
    with pytest.raises(YtError, match="invalid ACL"):
        cypress.remove(f"{TREES}/t/p/@acl/0/subjects")


def test_min_share_resources_is_strong_guarantee_resources(cypress: Cypress) -> None:
    cypress.set(f"{TREES}/t/p/@min_share_resources", {"cpu": 1})
    assert cypress.get(f"{TREES}/t/p/@strong_guarantee_resources") == {"cpu": 1}
    cypress.set(f"{TREES}/t/p/@strong_guarantee_resources", {"cpu": 2})
    assert cypress.get(f"{TREES}/t/p/@min_share_resources/cpu") == 2
    assert "min_share_resources" not in cypress.get(f"{TREES}/t/p/@")
    cypress.create(
        "scheduler_pool", attributes={"name": "q", "pool_tree": "t", "min_share_resources": {"cpu": 3}}
    )
    assert cypress.get(f"{TREES}/t/q/@strong_guarantee_resources") == {"cpu": 3}


def test_pool_options_are_not_attributes_of_a_pool_tree(cypress: Cypress) -> None:
    with pytest.raises(YtError, match="pool option"):
        cypress.set(f"{TREES}/t/@weight", 1)
    with pytest.raises(YtError) as missing:
        cypress.get(f"{TREES}/t/@weight")
    assert missing.value.code == RESOLVE_ERROR
    assert not cypress.exists(f"{TREES}/t/@max_operation_count")
    with pytest.raises(YtError, match="pool option"):
        cypress.create("scheduler_pool_tree", attributes={"name": "u", "weight": 2})
    cypress.set(f"{TREES}/t/@custom", 1)  # a user's own attribute stays settable
    assert cypress.get(f"{TREES}/t/@custom") == 1


def test_a_pool_has_no_pool_tree_attribute(cypress: Cypress) -> None:
    assert not cypress.exists(f"{TREES}/t/p/@pool_tree")
    assert cypress.get(f"{TREES}/t/p/@parent_name") == "<Root>"


def test_the_orchid_tree_config_fills_the_threshold_from_the_count() -> None:
    """YTsaurus's postprocessor: ``max_unpreemptible_running_job_count`` fills the threshold's ``user_slots``."""

    def shown(options: dict[str, object]) -> object:
        config = PoolTreeConfig.parse(options, "config")
        return effective_tree_config(config).get("non_preemptible_resource_usage_threshold")

    assert shown({"non_preemptible_resource_usage_threshold": {}}) == {}
    assert shown(
        {"non_preemptible_resource_usage_threshold": {}, "max_unpreemptible_running_job_count": 0}
    ) == {"user_slots": 0}
    both = {"non_preemptible_resource_usage_threshold": {"cpu": 1.0, "user_slots": 5}}
    assert shown({**both, "max_unpreemptible_running_job_count": 7}) == {"cpu": 1.0, "user_slots": 5}
    assert shown(
        {"non_preemptible_resource_usage_threshold": {"cpu": 1.0}, "max_unpreemptible_running_job_count": 7}
    ) == {
        "cpu": 1.0,
        "user_slots": 7,
    }
