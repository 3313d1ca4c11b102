"""YTsaurus's ``TestSchedulerPoolManipulations`` (yt/yt/tests/integration/scheduler/test_scheduler_pools.py),
restated through ``yt.wrapper`` against a real ``pooltree scheduler`` process (issue 27).

Its environment has no nodes; its setup removes the ``default`` pool tree, so every test starts from
``get("//sys/pool_trees") == {}``. YTsaurus's ``remove`` is recursive unless told otherwise (the driver's default;
``yt.wrapper``'s is not), so ``remove`` here passes ``recursive=True`` as the tests' helper does. Master restarts
from a snapshot are scheduler restarts here (the scheduler holds Cypress in its store).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yt.wrapper as ytw
from yt_env import ORCHID, TREES, YtEnv, create_pool, create_pool_tree, get_or, remove_pool_tree, wait

YtError = ytw.YtError
ResolveErrorCode = 500
ORCHID_POOLS = f"{ORCHID}/scheduling_info_per_pool_tree/default/fair_share_info/pools"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YtEnv]:
    made = YtEnv(Path(tmp_path_factory.mktemp("pools")), num_nodes=0)
    try:
        yield made
    finally:
        made.close()


class TestSchedulerPoolManipulations:
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.env = env
        self.yt = env.yt
        if self.yt.exists("//sys/pool_trees/default"):
            remove_pool_tree(self.yt, "default")

    # helpers named as YTsaurus's tests call them
    def get(self, path: str, **kwargs: Any) -> Any:
        return self.yt.get(path, **kwargs)

    def set(self, path: str, value: Any) -> None:
        self.yt.set(path, value)

    def exists(self, path: str) -> bool:
        return self.yt.exists(path)

    def remove(self, path: str, **kwargs: Any) -> None:
        kwargs.setdefault("recursive", True)
        self.yt.remove(path, **kwargs)

    def move(self, source: str, destination: str) -> None:
        self.yt.move(source, destination)

    def pool(self, name: str, **kwargs: Any) -> None:
        kwargs.setdefault("pool_tree", "my_tree")
        create_pool(self.yt, name, **kwargs)

    def tree(self, name: str = "my_tree", **kwargs: Any) -> None:
        create_pool_tree(self.yt, name, **kwargs)

    def restart_master(self) -> None:
        self.env.restart_scheduler()

    # ------------------------------------------------------------------ create and remove

    def test_create(self) -> None:
        assert self.get(TREES) == {}
        self.tree()
        assert self.get(TREES) == {"my_tree": {}}
        self.pool("nirvana")
        assert self.get(TREES) == {"my_tree": {"nirvana": {}}}
        self.pool("prod", parent_name="nirvana")
        assert self.get(TREES) == {"my_tree": {"nirvana": {"prod": {}}}}

    def test_create_ignore_existing(self) -> None:
        self.tree()
        self.tree(ignore_existing=True)
        self.pool("nirvana")
        self.pool("nirvana", ignore_existing=True)

    def test_remove(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        self.remove(f"{TREES}/my_tree/nirvana/prod")
        assert self.get(TREES) == {"my_tree": {"nirvana": {}}}
        self.remove(f"{TREES}/my_tree/nirvana")
        assert self.get(TREES) == {"my_tree": {}}
        remove_pool_tree(self.yt, "my_tree")
        assert self.get(TREES) == {}

    def test_remove_with_force(self) -> None:
        with pytest.raises(YtError):
            remove_pool_tree(self.yt, "my_tree")
        with pytest.raises(YtError):
            self.remove(f"{TREES}/my_tree/nirvana")
        remove_pool_tree(self.yt, "my_tree", force=True)
        self.remove(f"{TREES}/my_tree/nirvana", force=True)

    def test_remove_subtree(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        self.remove(f"{TREES}/my_tree/nirvana")
        assert self.get(TREES) == {"my_tree": {}}

    def test_remove_non_empty_tree(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        remove_pool_tree(self.yt, "my_tree")
        assert self.get(TREES) == {}

    # ------------------------------------------------------------------ names

    def test_create_empty_names_validation(self) -> None:
        with pytest.raises(YtError):
            self.tree("")
        self.tree()
        with pytest.raises(YtError):
            self.pool("")
        self.pool("nirvana")
        with pytest.raises(YtError):
            self.pool("", parent_name="nirvana")

    def test_duplicate_tree_names_forbidden(self) -> None:
        self.tree()
        with pytest.raises(YtError):
            self.tree()

    def test_duplicate_names_forbidden_in_same_tree(self) -> None:
        self.tree()
        self.pool("nirvana")
        with pytest.raises(YtError):
            self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        with pytest.raises(YtError):
            self.pool("prod", parent_name="nirvana")
        with pytest.raises(YtError):
            self.pool("prod")

    def test_duplicate_names_allowed_in_different_trees(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        self.tree("another_tree")
        self.pool("nirvana", pool_tree="another_tree")
        self.pool("prod", pool_tree="another_tree", parent_name="nirvana")

    def test_same_pool_and_tree_names_allowed(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.tree("nirvana")
        self.tree("prod")
        self.pool("prod", parent_name="nirvana")

    def test_root_name_is_forbidden(self) -> None:
        self.tree()
        self.pool("nirvana")
        with pytest.raises(YtError):
            self.pool("<Root>", parent_name="nirvana")

    def test_dollar_in_name_is_forbidden(self) -> None:
        self.tree()
        with pytest.raises(YtError):
            self.pool("pool$name")

    def test_long_pool_name_is_forbidden(self) -> None:
        self.tree()
        with pytest.raises(YtError):
            self.pool("abc" * 100)

    def test_create_checks_tree_and_parent_pool_existence(self) -> None:
        with pytest.raises(YtError):
            self.pool("nirvana", pool_tree="inexistent_tree")
        self.tree()
        with pytest.raises(YtError):
            self.pool("prod", parent_name="nirvana")

    def test_validate_tree_depth(self) -> None:
        self.tree()
        self.pool("pool0")
        for i in range(29):
            self.pool(f"pool{i + 1}", parent_name=f"pool{i}")
        with pytest.raises(YtError):
            self.pool("pool31", parent_name="pool30")

    # ------------------------------------------------------------------ moves and renames

    def test_move_via_attribute_pool_to_subpool(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("logfeller")
        self.pool("logfeller_prod", parent_name="logfeller")
        self.set(f"{TREES}/my_tree/logfeller/logfeller_prod/@parent_name", "nirvana")
        assert self.get(TREES) == {"my_tree": {"logfeller": {}, "nirvana": {"logfeller_prod": {}}}}

    def test_standard_move_pool_to_subpool(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("logfeller")
        self.pool("logfeller_prod", parent_name="logfeller")
        self.move(f"{TREES}/my_tree/logfeller/logfeller_prod", f"{TREES}/my_tree/nirvana/logfeller_prod")
        assert self.get(TREES) == {"my_tree": {"logfeller": {}, "nirvana": {"logfeller_prod": {}}}}

    def test_move_via_attribute_pool_to_root(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("logfeller", parent_name="nirvana")
        self.set(f"{TREES}/my_tree/nirvana/logfeller/@parent_name", "<Root>")
        assert self.get(TREES) == {"my_tree": {"logfeller": {}, "nirvana": {}}}

    def test_standard_move_pool_to_root(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("logfeller", parent_name="nirvana")
        self.move(f"{TREES}/my_tree/nirvana/logfeller", f"{TREES}/my_tree/logfeller")
        assert self.get(TREES) == {"my_tree": {"logfeller": {}, "nirvana": {}}}

    def test_move_via_attribute_to_descendant_is_forbidden(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/nirvana/@parent_name", "prod")

    def test_standard_move_to_descendant_is_forbidden2(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        with pytest.raises(YtError):
            self.move(f"{TREES}/my_tree/nirvana", f"{TREES}/my_tree/nirvana/prod/nirvana")

    def test_move_via_attribute_of_pool_trees_is_forbidden(self) -> None:
        self.tree()
        self.tree("another_tree")
        self.pool("nirvana", pool_tree="another_tree")
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/@parent_name", "nirvana")

    def test_standard_move_of_pool_trees_is_forbidden(self) -> None:
        self.tree()
        self.tree("another_tree")
        with pytest.raises(YtError):
            self.move(f"{TREES}/my_tree", f"{TREES}/another_tree/nirvana")

    def test_move_via_attribute_to_another_pool_tree_is_forbidden(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.tree("another_tree")
        self.pool("logfeller", pool_tree="another_tree")
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/nirvana/@parent_name", "logfeller")

    def test_standard_move_to_another_pool_tree(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.tree("another_tree")
        self.pool("logfeller", pool_tree="another_tree")
        self.move(f"{TREES}/my_tree/nirvana", f"{TREES}/another_tree/logfeller/nirvana")
        assert self.get(TREES) == {"my_tree": {}, "another_tree": {"logfeller": {"nirvana": {}}}}

    def test_standard_move_to_another_tree_respects_duplicate_name_validation(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.tree("another_tree")
        self.pool("nirvana", pool_tree="another_tree")
        self.pool("logfeller", pool_tree="another_tree")
        for destination in (
            "another_tree/nirvana",
            "another_tree/logfeller/nirvana",
            "another_tree/nirvana/logfeller",
        ):
            with pytest.raises(YtError):
                self.move(f"{TREES}/my_tree/nirvana", f"{TREES}/{destination}")
        assert self.get(TREES) == {
            "my_tree": {"nirvana": {}},
            "another_tree": {"nirvana": {}, "logfeller": {}},
        }

    def test_move_via_attribute_respects_validation(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("logfeller")
        self.set(f"{TREES}/my_tree/logfeller/@strong_guarantee_resources", {"cpu": 10})
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/logfeller/@parent_name", "nirvana")
        assert self.get(TREES) == {"my_tree": {"nirvana": {}, "logfeller": {}}}

    def test_standard_move_respects_validation(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("logfeller")
        self.set(f"{TREES}/my_tree/logfeller/@strong_guarantee_resources", {"cpu": 10})
        with pytest.raises(YtError):
            self.move(f"{TREES}/my_tree/logfeller", f"{TREES}/my_tree/nirvana/logfeller")
        assert self.get(TREES) == {"my_tree": {"nirvana": {}, "logfeller": {}}}

    def test_rename_pool(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@name", "logfeller")
        assert self.get(f"{TREES}/my_tree") == {"logfeller": {}}
        assert self.get(f"{TREES}/my_tree/logfeller/@name") == "logfeller"

    def test_rename_via_attribute_respects_name_validation(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        self.pool("logfeller")
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/logfeller/@name", "logfeller$logfeller")
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/logfeller/@name", "prod")

    def test_move_with_rename(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("logfeller")
        self.pool("logfeller_prod", parent_name="logfeller")
        self.move(f"{TREES}/my_tree/logfeller/logfeller_prod", f"{TREES}/my_tree/nirvana/nirvana_prod")
        assert self.get(TREES) == {"my_tree": {"logfeller": {}, "nirvana": {"nirvana_prod": {}}}}

    # ------------------------------------------------------------------ restarts (a master snapshot here: the store)

    def test_structure_loads_from_snapshot(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        self.restart_master()
        assert self.get(TREES) == {"my_tree": {"nirvana": {"prod": {}}}}

    def test_max_depth_structure_loads_from_snapshot(self) -> None:
        self.tree()
        self.pool("pool0")
        i = 0
        while True:
            try:
                self.pool(f"pool{i + 1}", parent_name=f"pool{i}")
            except YtError:
                break
            i += 1
        self.restart_master()
        assert self.exists(f"{TREES}/my_tree/pool0")

    def test_validation_works_after_load_from_snapshot(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        self.restart_master()
        with pytest.raises(YtError):
            self.tree()
        with pytest.raises(YtError):
            self.pool("prod")

    def test_creation_works_after_load_from_snapshot(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.restart_master()
        self.pool("prod", parent_name="nirvana")
        assert self.get(TREES) == {"my_tree": {"nirvana": {"prod": {}}}}

    # ------------------------------------------------------------------ attributes

    def test_set_and_get_pool_attribute(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)
        assert self.get(f"{TREES}/my_tree/nirvana/@max_operation_count") == 10

    def test_set_and_get_pooltree_config_attribute(self) -> None:
        self.tree()
        self.set(f"{TREES}/my_tree/@config/default_parent_pool", "research")
        assert self.get(f"{TREES}/my_tree/@config/default_parent_pool") == "research"

    def test_set_and_get_unknown_pool_attribute(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@some_unknown_attribute", 10)
        assert self.get(f"{TREES}/my_tree/nirvana/@some_unknown_attribute") == 10

    def test_set_and_get_unknown_pooltree_config_attribute(self) -> None:
        self.tree()
        self.set(f"{TREES}/my_tree/@config/some_unknown_attribute", 10)
        assert self.get(f"{TREES}/my_tree/@config/some_unknown_attribute") == 10

    def test_get_pool_with_attributes_returns_only_specified_attributes(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 2)
        result = self.get(
            f"{TREES}/my_tree/nirvana", attributes=["max_operation_count", "max_running_operation_count"]
        )
        assert result.attributes["max_operation_count"] == 2
        assert "max_running_operation_count" not in result.attributes

    def test_get_pooltree_with_config_attribute(self) -> None:
        self.tree()
        self.set(f"{TREES}/my_tree/@config/max_operation_count", 2)
        result = self.get(f"{TREES}/my_tree", attributes=["config"])
        assert result.attributes["config"]["max_operation_count"] == 2
        assert "max_running_operation_count" not in result.attributes["config"]

    def test_invalid_type_pool_attribute_is_refused_on_set(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", True)
        assert self.get(f"{TREES}/my_tree/nirvana/@max_operation_count") == 10

    def test_invalid_type_pooltree_config_attribute_is_refused_on_set(self) -> None:
        self.tree()
        self.set(f"{TREES}/my_tree/@config/default_parent_pool", "research")
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/@config/default_parent_pool", True)
        assert self.get(f"{TREES}/my_tree/@config/default_parent_pool") == "research"

    def test_pool_attribute_constraints_are_enforced_on_set(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", -1)
        assert self.get(f"{TREES}/my_tree/nirvana/@max_operation_count") == 10

    def test_pooltree_config_attribute_constraints_are_enforced_on_set(self) -> None:
        self.tree()
        self.set(f"{TREES}/my_tree/@config/max_ephemeral_pools_per_user", 10)
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/@config/max_ephemeral_pools_per_user", -1)
        assert self.get(f"{TREES}/my_tree/@config/max_ephemeral_pools_per_user") == 10

    def test_remove_builtin_pool_attribute(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)
        self.remove(f"{TREES}/my_tree/nirvana/@max_operation_count")
        with pytest.raises(YtError):
            self.get(f"{TREES}/my_tree/nirvana/@max_operation_count")

    def test_remove_known_pooltree_attribute(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/@config/default_parent_pool", "research")
        self.remove(f"{TREES}/my_tree/@config/default_parent_pool")
        with pytest.raises(YtError):
            self.get(f"{TREES}/my_tree/@config/default_parent_pool")

    def test_remove_composite_builtin_pool_attribute(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources", {"cpu": 10})
        self.remove(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources")
        with pytest.raises(YtError):
            self.get(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources")

    def test_remove_nested_pool_attribute(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources", {"cpu": 10})
        self.remove(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources/cpu")
        assert self.get(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources") == {}

    def test_if_remove_attribute_breaks_validation_value_is_preserved(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources", {"cpu": 10})
        self.set(f"{TREES}/my_tree/nirvana/prod/@strong_guarantee_resources", {"cpu": 10})
        with pytest.raises(YtError):
            self.remove(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources")
        assert self.get(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources") == {"cpu": 10}

    def test_max_running_operation_count_validation(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/nirvana/@max_running_operation_count", 11)
        self.set(f"{TREES}/my_tree/nirvana/@max_running_operation_count", 9)
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 8)

    def test_subpools_of_fifo_pools_are_forbidden(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/nirvana/@mode", "fifo")
        self.remove(f"{TREES}/my_tree/nirvana/prod")
        self.set(f"{TREES}/my_tree/nirvana/@mode", "fifo")
        with pytest.raises(YtError):
            self.pool("prod", parent_name="nirvana")

    def test_cant_give_child_strong_guarantee_without_parent_guarantee(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/nirvana/prod/@strong_guarantee_resources", {"cpu": 100.0})
        self.set(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources", {"cpu": 10.0})
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/nirvana/prod/@strong_guarantee_resources", {"cpu": 100.0})
        self.set(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources/cpu", 100.0)
        self.set(f"{TREES}/my_tree/nirvana/prod/@strong_guarantee_resources", {"cpu": 100.0})

    def _integral(self, pool_path: str, value: dict[str, Any]) -> None:
        self.set(f"{TREES}/my_tree/{pool_path}/@integral_guarantees", value)

    def test_cant_give_child_burst_guarantee_without_parent_guarantee(self) -> None:
        self.tree()
        self.pool("nirvana", attributes={"integral_guarantees": {"guarantee_type": "none"}})
        self.pool(
            "prod", parent_name="nirvana", attributes={"integral_guarantees": {"guarantee_type": "burst"}}
        )
        with pytest.raises(YtError):
            self._integral("nirvana/prod", {"burst_guarantee_resources": {"cpu": 100.0}})
        self._integral("nirvana", {"burst_guarantee_resources": {"cpu": 10.0}})
        with pytest.raises(YtError):
            self._integral("nirvana/prod", {"burst_guarantee_resources": {"cpu": 100.0}})
        self._integral("nirvana", {"burst_guarantee_resources": {"cpu": 100.0}})
        self._integral("nirvana/prod", {"burst_guarantee_resources": {"cpu": 100.0}})

    def test_cant_give_child_resource_flow_without_parent_flow(self) -> None:
        self.tree()
        self.pool("nirvana", attributes={"integral_guarantees": {"guarantee_type": "none"}})
        self.pool(
            "prod", parent_name="nirvana", attributes={"integral_guarantees": {"guarantee_type": "relaxed"}}
        )
        with pytest.raises(YtError):
            self._integral("nirvana/prod", {"resource_flow": {"cpu": 100.0}})
        self._integral("nirvana", {"resource_flow": {"cpu": 10.0}})
        with pytest.raises(YtError):
            self._integral("nirvana/prod", {"resource_flow": {"cpu": 100.0}})
        self._integral("nirvana", {"resource_flow": {"cpu": 100.0}})
        self._integral("nirvana/prod", {"resource_flow": {"cpu": 100.0}})

    def test_cant_give_resource_flow_to_child_of_integral_pool(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.pool("prod", parent_name="nirvana")
        self._integral(
            "nirvana",
            {
                "guarantee_type": "burst",
                "resource_flow": {"cpu": 50},
                "burst_guarantee_resources": {"cpu": 100},
            },
        )
        with pytest.raises(YtError):
            self._integral("nirvana/prod", {"resource_flow": {"cpu": 10}})
        self._integral("nirvana", {"guarantee_type": "relaxed", "resource_flow": {"cpu": 50}})
        with pytest.raises(YtError):
            self._integral("nirvana/prod", {"resource_flow": {"cpu": 10}})

    def test_cant_make_parent_burst_or_relaxed_if_child_has_integral_resources(self) -> None:
        self.tree()
        self.pool(
            "nirvana",
            attributes={
                "integral_guarantees": {
                    "guarantee_type": "none",
                    "resource_flow": {"cpu": 50},
                    "burst_guarantee_resources": {"cpu": 50},
                }
            },
        )
        self.pool("prod", parent_name="nirvana")
        self._integral("nirvana/prod", {"resource_flow": {"cpu": 50}})
        for kind in ("burst", "relaxed"):
            with pytest.raises(YtError):
                self._integral("nirvana", {"guarantee_type": kind})
        self._integral("nirvana/prod", {"burst_guarantee_resources": {"cpu": 50}})
        for kind in ("burst", "relaxed"):
            with pytest.raises(YtError):
                self._integral("nirvana", {"guarantee_type": kind})

    def test_set_and_get_composite_attribute(self) -> None:
        self.tree()
        self.pool("nirvana")
        with pytest.raises(YtError):
            self.get(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources")
        self.set(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources", {"cpu": 100})
        assert self.get(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources") == {"cpu": 100}
        self.set(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources", {})
        assert self.get(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources") == {}

    def test_set_and_get_nested_attribute(self) -> None:
        self.tree()
        self.pool("nirvana")
        path = f"{TREES}/my_tree/nirvana/@ephemeral_subpool_config"
        with pytest.raises(YtError):
            self.set(f"{path}/max_operation_count", 10)
        self.set(path, {"max_operation_count": 10})
        assert self.get(f"{path}/max_operation_count") == 10
        self.set(f"{path}/max_operation_count", 5)
        assert self.get(f"{path}/max_operation_count") == 5

    def test_exist_pool_attribute(self) -> None:
        self.tree()
        self.pool("nirvana")
        assert not self.exists(f"{TREES}/my_tree/nirvana/@max_operation_count")
        self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)
        assert self.exists(f"{TREES}/my_tree/nirvana/@max_operation_count")
        assert not self.exists(f"{TREES}/my_tree/nirvana/@custom_attr")
        self.set(f"{TREES}/my_tree/nirvana/@custom_attr", 10)
        assert self.exists(f"{TREES}/my_tree/nirvana/@custom_attr")

    def test_exist_pool_tree_config_attribute(self) -> None:
        self.tree()
        assert not self.exists(f"{TREES}/my_tree/@config/node_tag_filter")
        self.set(f"{TREES}/my_tree/@config/node_tag_filter", "filter")
        assert self.exists(f"{TREES}/my_tree/@config/node_tag_filter")
        assert not self.exists(f"{TREES}/my_tree/@config/custom_attr")
        self.set(f"{TREES}/my_tree/@config/custom_attr", 10)
        assert self.exists(f"{TREES}/my_tree/@config/custom_attr")

    def test_set_using_different_attribute_aliases_is_forbidden(self) -> None:
        self.tree()
        self.pool("nirvana")
        key = f"{TREES}/my_tree/nirvana/@fair_share_starvation_timeout"
        alias = f"{TREES}/my_tree/nirvana/@fair_share_preemption_timeout"
        self.set(key, 5000)
        with pytest.raises(YtError):
            self.set(alias, 10000)
        self.remove(key)
        self.set(alias, 10000)
        with pytest.raises(YtError):
            self.set(key, 5000)

    def test_set_inexistent_path_fails_with_correct_error(self) -> None:
        self.tree()
        with pytest.raises(ytw.YtResponseError) as error:
            self.set(f"{TREES}/my_tree/nirvana/@mode", "fifo")
        assert error.value.contains_code(ResolveErrorCode)

    def test_pool_tree_and_pool_common_attributes(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/@config/fair_share_starvation_timeout", 1)
        assert self.get(f"{TREES}/my_tree/@config/fair_share_starvation_timeout") == 1
        self.set(f"{TREES}/my_tree/nirvana/@fair_share_starvation_timeout", 2)
        assert self.get(f"{TREES}/my_tree/nirvana/@fair_share_starvation_timeout") == 2

    def test_access_to_pool_attribute_on_pooltree_is_forbidden(self) -> None:
        self.tree()
        with pytest.raises(YtError):
            self.set(f"{TREES}/my_tree/@weight", 1)
        with pytest.raises(YtError):
            self.get(f"{TREES}/my_tree/@weight")

    def test_get_root_returns_descendant_attributes(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/@some_attr", "attr_value")
        self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)
        root_get = self.get(TREES, attributes=["max_operation_count", "some_attr"])
        assert root_get["my_tree"].attributes["some_attr"] == "attr_value"
        assert root_get["my_tree"]["nirvana"].attributes["max_operation_count"] == 10

    def test_create_doesnt_set_unwanted_attributes(self) -> None:
        self.tree()
        self.pool("nirvana")
        assert not self.exists(f"{TREES}/my_tree/nirvana/@pool_tree")

    def test_create_pool_with_attributes(self) -> None:
        self.tree()
        self.pool("nirvana", attributes={"mode": "fifo"})
        assert self.get(f"{TREES}/my_tree/nirvana/@mode") == "fifo"

    def test_create_pool_tree_with_config_attributes(self) -> None:
        self.tree(config={"default_parent_pool": "research"})
        assert self.get(f"{TREES}/my_tree/@config/default_parent_pool") == "research"

    def test_fail_on_create_pool_with_attributes(self) -> None:
        self.tree()
        with pytest.raises(YtError):
            self.pool("nirvana", attributes={"mode": "trash"})
        assert not self.exists(f"{TREES}/my_tree/nirvana")

    def test_fail_on_create_pool_tree_with_attributes(self) -> None:
        with pytest.raises(YtError):
            self.tree(config={"max_operation_count": "trash"})
        assert not self.exists(f"{TREES}/my_tree")

    def test_get_set_remove_empty_pooltree_config(self) -> None:
        self.tree()
        assert self.exists(f"{TREES}/my_tree/@config")
        assert self.get(f"{TREES}/my_tree/@config") == {}
        self.remove(f"{TREES}/my_tree/@config")
        assert self.exists(f"{TREES}/my_tree/@config")
        assert self.get(f"{TREES}/my_tree/@config") == {}

    def test_set_pooltree_config_overwriting(self) -> None:
        self.tree()
        for config in ({"node_tag_filter": "filter"}, {"inexistent": "value"}, {"max_operation_count": 1}):
            self.set(f"{TREES}/my_tree/@config", config)
            assert self.get(f"{TREES}/my_tree/@config") == config

    def test_remove_pooltree_config(self) -> None:
        self.tree(config={"node_tag_filter": "filter", "inexistent": "value"})
        self.remove(f"{TREES}/my_tree/@config")
        assert self.get(f"{TREES}/my_tree/@config") == {}

    def test_attributes_load_from_snapshot(self) -> None:
        self.tree()
        self.set(f"{TREES}/my_tree/@config/default_parent_pool", "research")
        self.set(f"{TREES}/my_tree/@config/unknown_config_attribute", 1)
        self.set(f"{TREES}/my_tree/@unknown_object_attribute", 2)
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)
        self.set(f"{TREES}/my_tree/nirvana/@some_unknown_attribute", "xxx")
        self.restart_master()
        assert self.get(f"{TREES}/my_tree/@config/default_parent_pool") == "research"
        assert self.get(f"{TREES}/my_tree/@config/unknown_config_attribute") == 1
        assert self.get(f"{TREES}/my_tree/@unknown_object_attribute") == 2
        assert self.get(f"{TREES}/my_tree/nirvana/@max_operation_count") == 10
        assert self.get(f"{TREES}/my_tree/nirvana/@some_unknown_attribute") == "xxx"

    # ------------------------------------------------------------------ guarantees' main resource

    def _grandchild_guarantee_is_refused(self, user_slots: int) -> None:
        """A pool's guarantee of cpu only refuses a child guaranteeing user_slots too (``user_slots``, even 0)."""
        self.tree("default")
        self.pool(
            "pool",
            pool_tree="default",
            attributes={"strong_guarantee_resources": {"cpu": 30, "user_slots": 30}},
        )
        self.pool(
            "subpool",
            pool_tree="default",
            parent_name="pool",
            attributes={"strong_guarantee_resources": {"cpu": 10}},
        )
        with pytest.raises(YtError):
            self.pool(
                "pubsubpool",
                pool_tree="default",
                parent_name="subpool",
                attributes={"strong_guarantee_resources": {"cpu": 10, "user_slots": user_slots}},
            )

    def test_strong_guarantee_children_compatibility_validation(self) -> None:
        self._grandchild_guarantee_is_refused(user_slots=5)

    def test_strong_guarantee_children_compatibility_validation_with_zeros(self) -> None:
        self._grandchild_guarantee_is_refused(user_slots=0)

    def test_main_resource_validation_on_pool_config_update(self) -> None:
        self.tree("default")
        self.pool(
            "pool",
            pool_tree="default",
            attributes={"strong_guarantee_resources": {"cpu": 30, "user_slots": 30}},
        )
        self.pool(
            "subpool1",
            pool_tree="default",
            parent_name="pool",
            attributes={"strong_guarantee_resources": {"cpu": 10, "user_slots": 25}},
        )
        with pytest.raises(YtError):
            self.set(f"{TREES}/default/pool/subpool1/@strong_guarantee_resources", {"user_slots": 5})
        self.set(f"{TREES}/default/pool/subpool1/@strong_guarantee_resources", {"cpu": 0, "user_slots": 5})
        with pytest.raises(YtError):
            self.pool(
                "subpool2",
                pool_tree="default",
                parent_name="pool",
                attributes={"strong_guarantee_resources": {"user_slots": 5}},
            )

    def test_main_resource_validation_on_tree_config_update(self) -> None:
        self.tree("default")
        self.pool(
            "pool",
            pool_tree="default",
            attributes={"strong_guarantee_resources": {"cpu": 30, "user_slots": 30}},
        )
        self.pool(
            "subpool1",
            pool_tree="default",
            parent_name="pool",
            attributes={"strong_guarantee_resources": {"cpu": 1}},
        )
        with pytest.raises(YtError):
            self.set(f"{TREES}/default/@config/main_resource", "user_slots")
        self.remove(f"{TREES}/default/pool/subpool1")
        self.set(f"{TREES}/default/@config/main_resource", "user_slots")

    @pytest.mark.skip(
        reason="//sys/@config/scheduler_pool_manager/max_scheduler_pool_subtree_size (the master's bound on a pool's "
        "subtree) is not modelled: pooltree refuses the key (it models the pool name regexes only)"
    )
    def test_subtree_size_limits(self) -> None:
        pass

    def test_min_share_and_strong_guarantee_resources_aliasing(self) -> None:
        self.tree()
        self.pool("nirvana")
        self.set(f"{TREES}/my_tree/nirvana/@min_share_resources", {"cpu": 1})
        assert self.get(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources/cpu") == 1
        self.set(f"{TREES}/my_tree/nirvana/@strong_guarantee_resources", {"cpu": 2})
        assert self.get(f"{TREES}/my_tree/nirvana/@min_share_resources/cpu") == 2

    def test_children_guarantees_require_allow_children_guarantees_flag(self) -> None:
        self.tree()
        self.pool("parent")
        self.pool("child", parent_name="parent")
        self.set(f"{TREES}/my_tree/parent/@strong_guarantee_resources", {"cpu": 100.0})
        self.set(f"{TREES}/my_tree/parent/@allow_children_guarantees", False)
        with pytest.raises(YtError, match="does not allow children guarantees"):
            self.set(f"{TREES}/my_tree/parent/child/@strong_guarantee_resources", {"cpu": 10.0})
        self.set(f"{TREES}/my_tree/parent/@allow_children_guarantees", True)
        self.set(f"{TREES}/my_tree/parent/child/@strong_guarantee_resources", {"cpu": 10.0})
        assert self.get(f"{TREES}/my_tree/parent/child/@strong_guarantee_resources") == {"cpu": 10.0}
        with pytest.raises(YtError, match="does not allow children guarantees"):
            self.set(f"{TREES}/my_tree/parent/@allow_children_guarantees", False)
        self.remove(f"{TREES}/my_tree/parent/child/@strong_guarantee_resources")
        self.set(f"{TREES}/my_tree/parent/@allow_children_guarantees", False)
        assert not self.get(f"{TREES}/my_tree/parent/@allow_children_guarantees")

    def test_grandchildren_guarantees_require_allow_children_guarantees_flag(self) -> None:
        self.tree()
        self.pool("grandparent")
        self.pool("parent", parent_name="grandparent")
        self.pool("grandchild", parent_name="parent")
        self.set(f"{TREES}/my_tree/grandparent/@strong_guarantee_resources", {"cpu": 100.0})
        self.set(f"{TREES}/my_tree/grandparent/@allow_children_guarantees", False)
        with pytest.raises(YtError, match="is not configured at parent"):
            self.set(
                f"{TREES}/my_tree/grandparent/parent/grandchild/@strong_guarantee_resources", {"cpu": 10.0}
            )


def make_ace(action: str, subject: str, permissions: str | list[str]) -> dict[str, Any]:
    """YTsaurus's ``make_ace``."""
    listed = [permissions] if isinstance(permissions, str) else list(permissions)
    return {
        "action": action,
        "subjects": [subject],
        "permissions": listed,
        "inheritance_mode": "object_and_descendants",
    }


class TestSchedulerPoolAcls:
    """YTsaurus's ``TestSchedulerPoolAcls``: who may use, create, change and remove pools and pool trees."""

    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.env = env
        self.yt = env.yt
        if self.yt.exists(f"{TREES}/default"):
            remove_pool_tree(self.yt, "default")
        # a fresh environment's: the tests below change them
        self.yt.set(f"{TREES}/@acl", [])
        self.yt.set("//sys/schemas/scheduler_pool/@acl", [])
        self.yt.set("//sys/@config/scheduler_pool_manager", {})

    def user(self, name: str = "u") -> ytw.YtClient:
        """``create_user(name)``; the returned client is ``authenticated_user=name``."""
        if not self.yt.exists(f"//sys/users/{name}"):
            self.yt.create("user", attributes={"name": name})
        token = self.yt.issue_token(name)
        return self.env.client(token.decode() if isinstance(token, bytes) else token)

    def check_permission(self, user: str, permission: str, path: str) -> str:
        return self.yt.check_permission(user, permission, path)["action"]

    def test_nested_pool_use_permission(self) -> None:
        yt = self.yt
        create_pool_tree(yt, "my_tree")
        create_pool(yt, "nirvana", pool_tree="my_tree")
        create_pool(yt, "prod", pool_tree="my_tree", parent_name="nirvana")
        self.user()
        prod = f"{TREES}/my_tree/nirvana/prod"
        assert self.check_permission("u", "use", prod) == "allow"
        yt.set(f"{TREES}/my_tree/nirvana/@inherit_acl", False)
        assert self.check_permission("u", "use", prod) == "deny"
        yt.set(f"{TREES}/my_tree/nirvana/@acl", [make_ace("allow", "u", "use")])
        assert self.check_permission("u", "use", prod) == "allow"
        yt.set(f"{TREES}/my_tree/nirvana/@acl", [make_ace("deny", "u", "use")])
        assert self.check_permission("u", "use", prod) == "deny"

    def test_modify_children_allows_to_create_child(self) -> None:
        yt = self.yt
        create_pool_tree(yt, "my_tree")
        create_pool(yt, "nirvana", pool_tree="my_tree")
        u = self.user()
        with pytest.raises(YtError):
            create_pool(u, "prod", pool_tree="my_tree", parent_name="nirvana")
        yt.set(f"{TREES}/my_tree/nirvana/@acl", [make_ace("allow", "u", "modify_children")])
        create_pool(u, "prod", pool_tree="my_tree", parent_name="nirvana")

    def test_modify_children_allows_to_remove_child(self) -> None:
        yt = self.yt
        create_pool_tree(yt, "my_tree")
        create_pool(yt, "nirvana", pool_tree="my_tree")
        create_pool(yt, "prod", pool_tree="my_tree", parent_name="nirvana")
        u = self.user()
        with pytest.raises(YtError):
            u.remove(f"{TREES}/my_tree/nirvana/prod", recursive=True)
        yt.set(f"{TREES}/my_tree/nirvana/@acl", [make_ace("allow", "u", "modify_children")])
        yt.set(f"{TREES}/my_tree/nirvana/prod/@acl", [make_ace("allow", "u", "remove")])
        u.remove(f"{TREES}/my_tree/nirvana/prod", recursive=True)

    def test_write_allows_to_set_user_managed_attribute(self) -> None:
        yt = self.yt
        create_pool_tree(yt, "my_tree")
        create_pool(yt, "nirvana", pool_tree="my_tree")
        u = self.user()
        with pytest.raises(YtError):
            u.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)
        yt.set(f"{TREES}/my_tree/nirvana/@acl", [make_ace("allow", "u", "write")])
        u.set(f"{TREES}/my_tree/nirvana/@max_operation_count", 10)

    def write_then_administer(self, act: Any, custom_attribute: bool = False) -> None:
        """``act(u)`` on pool ``nirvana`` is refused with ``write`` only and passes with ``administer`` too."""
        yt = self.yt
        create_pool_tree(yt, "my_tree")
        create_pool(yt, "nirvana", pool_tree="my_tree")
        if custom_attribute:
            yt.set(f"{TREES}/my_tree/nirvana/@non_system_attribute", True)
        u = self.user()
        yt.set(f"{TREES}/my_tree/nirvana/@acl", [make_ace("allow", "u", "write")])
        with pytest.raises(YtError):
            act(u)
        yt.set(f"{TREES}/my_tree/nirvana/@acl", [make_ace("allow", "u", ["administer", "write"])])
        act(u)

    def test_administer_allows_to_set_non_user_managed_attribute(self) -> None:
        self.write_then_administer(
            lambda u: u.set(f"{TREES}/my_tree/nirvana/@enable_aggressive_starvation", True)
        )

    def test_administer_allows_to_set_non_system_attribute(self) -> None:
        self.write_then_administer(lambda u: u.set(f"{TREES}/my_tree/nirvana/@non_system_attribute", True))

    def test_administer_allows_to_remove_non_system_attribute(self) -> None:
        self.write_then_administer(
            lambda u: u.remove(f"{TREES}/my_tree/nirvana/@non_system_attribute"), custom_attribute=True
        )

    def test_administer_allows_some_forbidden_symbols_in_pool_name(self) -> None:
        yt = self.yt
        create_pool_tree(yt, "my_tree")
        u = self.user()
        yt.set(f"{TREES}/my_tree/@acl", [make_ace("allow", "u", "write")])
        with pytest.raises(YtError):
            create_pool(u, "abc:nirvana", pool_tree="my_tree")
        yt.set("//sys/schemas/scheduler_pool/@acl/end", make_ace("allow", "u", "administer"))
        create_pool(u, "abc:nirvana", pool_tree="my_tree")

    def test_custom_pool_name_regex_validation(self) -> None:
        yt = self.yt
        u = self.user()
        create_pool_tree(yt, "my_tree")
        yt.set(f"{TREES}/my_tree/@acl", [make_ace("allow", "u", "write")])
        with pytest.raises(YtError, match="must match regular expression"):
            create_pool(u, "a+b", pool_tree="my_tree")
        yt.set("//sys/@config/scheduler_pool_manager", {"pool_name_regex_for_users": "[a-z\\+]+"})
        create_pool(u, "a+b", pool_tree="my_tree")

    def test_write_on_root_allows_to_create_remove_pool_trees(self) -> None:
        yt = self.yt
        create_pool_tree(yt, "my_tree")
        u = self.user()
        with pytest.raises(YtError):
            create_pool_tree(u, "new_tree")
        with pytest.raises(YtError):
            remove_pool_tree(u, "my_tree")
        yt.set(f"{TREES}/@acl", [make_ace("allow", "u", ["write", "remove"])])
        create_pool_tree(u, "new_tree")
        remove_pool_tree(u, "my_tree")


@pytest.fixture(scope="module")
def env1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YtEnv]:
    """``TestSchedulerPoolConfigPresets``'s environment: a scheduler and its node (pooltree alerts about a tree
    without nodes, which YTsaurus does not)."""
    made = YtEnv(Path(tmp_path_factory.mktemp("presets")), num_nodes=1)
    try:
        yield made
    finally:
        made.close()


class TestSchedulerPoolConfigPresets:
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env1: YtEnv) -> None:
        env1.reset()
        self.yt = env1.yt

    def pool_info(self, key: str) -> Any:
        return self.yt.get(f"{ORCHID_POOLS}/pool/{key}")

    def set_presets(self, presets: dict[str, Any]) -> None:
        self.yt.set(f"{TREES}/default/@config/pool_config_presets", presets)

    def alerts(self) -> list[Any]:
        return list(self.yt.get("//sys/scheduler/@alerts"))

    def test_presets(self) -> None:
        yt = self.yt
        create_pool(yt, "pool", attributes={"fair_share_starvation_timeout": 1000})
        wait(lambda: self.pool_info("fair_share_starvation_timeout") == 1000)
        self.set_presets(
            {
                "presetA": {"fair_share_starvation_tolerance": 0.6},
                "presetB": {"fair_share_starvation_tolerance": 0.5, "fair_share_starvation_timeout": 2000},
            }
        )
        config = f"{ORCHID}/scheduling_info_per_pool_tree/default/config"
        wait(lambda: sorted(yt.get(config)["pool_config_presets"]) == ["presetA", "presetB"])
        yt.set(f"{TREES}/default/pool/@config_preset", "presetA")
        wait(lambda: self.pool_info("fair_share_starvation_tolerance") == 0.6)
        yt.set(f"{TREES}/default/pool/@config_preset", "presetB")
        wait(lambda: self.pool_info("fair_share_starvation_tolerance") == 0.5)
        wait(lambda: self.pool_info("fair_share_starvation_timeout") == 1000)
        yt.remove(f"{TREES}/default/pool/@fair_share_starvation_timeout")
        wait(lambda: self.pool_info("fair_share_starvation_timeout") == 2000)

    def test_multiple_presets(self) -> None:
        yt = self.yt
        create_pool(yt, "pool")
        self.set_presets(
            {
                "presetA": {"fair_share_starvation_tolerance": 0.6},
                "presetB": {"fair_share_starvation_tolerance": 0.5, "fair_share_starvation_timeout": 2000},
            }
        )
        yt.set(f"{TREES}/default/pool/@config_presets", ["presetA", "presetB"])
        wait(lambda: self.pool_info("fair_share_starvation_tolerance") == 0.6)
        wait(lambda: self.pool_info("fair_share_starvation_timeout") == 2000)

    def preset_alert(self, preset: dict[str, Any], text: str) -> None:
        yt = self.yt
        create_pool(yt, "pool")
        wait(lambda: yt.exists(f"{ORCHID_POOLS}/pool"))
        assert self.alerts() == []
        self.set_presets({"preset": preset})
        yt.set(f"{TREES}/default/pool/@config_preset", "preset")
        wait(lambda: len(self.alerts()) == 1)
        assert text in json.dumps(self.alerts()[0])

    @pytest.mark.skip(
        reason="pooltree's presets take any pool option; YTsaurus's TPoolPresetConfig takes only some (mode is not "
        "one) and raises the 'contains unrecognized options' alert when a pool uses such a preset"
    )
    def test_preset_with_forbidden_option(self) -> None:
        self.preset_alert({"mode": "fifo"}, "contains unrecognized options")

    def test_preset_with_unrecognized_option(self) -> None:
        self.preset_alert({"ffair_share_starvation_timeout": "fifo"}, "contains unrecognized options")

    @pytest.mark.skip(
        reason="pooltree validates pool_config_presets when the tree config is set: a negative duration is refused "
        "then, the error naming the field, where YTsaurus accepts it and raises an alert when a pool uses the preset"
    )
    def test_preset_with_incorrect_option(self) -> None:
        self.preset_alert({"fair_share_starvation_timeout": -10}, "failed to load as TPoolPresetConfig")


FULL = {
    "strong_guarantee_resources": {"cpu": 5},
    "resource_flow": {"cpu": 10},
    "burst_guarantee_resources": {"cpu": 15},
    "max_operation_count": 25,
    "max_running_operation_count": 20,
}


def guarantees(strong: float, flow: float, burst: float, running: int, total: int) -> dict[str, Any]:
    """A pool's attributes with these guarantees and limits (the tests' pools)."""
    return {
        "strong_guarantee_resources": {"cpu": strong},
        "integral_guarantees": {"resource_flow": {"cpu": flow}, "burst_guarantee_resources": {"cpu": burst}},
        "max_running_operation_count": running,
        "max_operation_count": total,
    }


class TestTransferPoolResourcesCommand:
    """YTsaurus's ``TestTransferPoolResourcesCommand``: ``transfer_pool_resources`` in the default tree."""

    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.yt = env.yt

    def pool(self, name: str, parent_name: str | None = None, **attributes: Any) -> None:
        create_pool(self.yt, name, parent_name=parent_name, attributes=attributes)

    def transfer(self, source: str, destination: str, delta: dict[str, Any]) -> None:
        self.yt.transfer_pool_resources(source, destination, "default", delta)

    def assert_pool_resources(
        self, pool_path: str, strong: Any, flow: Any, burst: Any, running: Any, total: Any
    ) -> None:
        def value(path: str) -> Any:
            got = get_or(self.yt, f"{TREES}/default/{pool_path}/@{path}")
            return None if got is None else type(strong if "cpu" in path else total or 0)(got)

        assert value("strong_guarantee_resources/cpu") == strong
        assert value("integral_guarantees/resource_flow/cpu") == flow
        assert value("integral_guarantees/burst_guarantee_resources/cpu") == burst
        assert value("max_operation_count") == total
        assert value("max_running_operation_count") == running

    def test_transfer_to_empty_pool(self) -> None:
        self.pool("from", **guarantees(15, 5, 10, 20, 25))
        self.pool("to")
        self.transfer("from", "to", {**FULL, "strong_guarantee_resources": {"cpu": 15}, "resource_flow": {"cpu": 5}, "burst_guarantee_resources": {"cpu": 10}})  # fmt: skip
        self.assert_pool_resources("from", 0.0, 0.0, 0.0, 0, 0)
        self.assert_pool_resources("to", 15.0, 5.0, 10.0, 20, 25)

    def test_transfer_operation_count_from_empty_pool_fails(self) -> None:
        self.pool("from")
        self.pool("to")
        with pytest.raises(YtError):
            self.transfer("from", "to", {"max_running_operation_count": 10})
        self.assert_pool_resources("from", None, None, None, None, None)
        self.assert_pool_resources("to", None, None, None, None, None)

    def test_transfer_cpu_from_empty_pool_fails(self) -> None:
        self.pool("from")
        self.pool("to")
        with pytest.raises(YtError):
            self.transfer("from", "to", {"strong_guarantee_resources": {"cpu": 10}})
        self.assert_pool_resources("from", None, None, None, None, None)
        self.assert_pool_resources("to", None, None, None, None, None)

    def test_transfer_to_pool_with_resources(self) -> None:
        self.pool("from", **guarantees(30, 10, 20, 40, 50))
        self.pool("to", **guarantees(30, 10, 20, 40, 50))
        self.transfer("from", "to", {**FULL, "strong_guarantee_resources": {"cpu": 15}, "resource_flow": {"cpu": 5}, "burst_guarantee_resources": {"cpu": 10}})  # fmt: skip
        self.assert_pool_resources("from", 15.0, 5.0, 10.0, 20, 25)
        self.assert_pool_resources("to", 45.0, 15.0, 30.0, 60, 75)

    def test_transfer_in_non_trivial_hierarchy(self) -> None:
        self.pool("some_root", **guarantees(40, 80, 120, 160, 200))
        self.pool("from_ancestor", "some_root", **guarantees(20, 40, 60, 80, 100))
        self.pool("from", "from_ancestor", **guarantees(10, 20, 30, 40, 50))
        self.pool("sibling_of_from", "from_ancestor", **guarantees(10, 20, 30, 40, 50))
        self.pool("to_ancestor", "some_root", **guarantees(10, 20, 30, 40, 50))
        self.pool("sibling_of_to_ancestor", "some_root", **guarantees(10, 20, 30, 40, 50))
        self.pool("to", "to_ancestor", **guarantees(10, 20, 30, 40, 50))
        self.transfer("from", "to", FULL)
        self.assert_pool_resources("some_root", 40.0, 80.0, 120.0, 160, 200)
        self.assert_pool_resources("some_root/from_ancestor", 15.0, 30.0, 45.0, 60, 75)
        self.assert_pool_resources("some_root/from_ancestor/from", 5.0, 10.0, 15.0, 20, 25)
        self.assert_pool_resources("some_root/from_ancestor/sibling_of_from", 10.0, 20.0, 30.0, 40, 50)
        self.assert_pool_resources("some_root/to_ancestor", 15.0, 30.0, 45.0, 60, 75)
        self.assert_pool_resources("some_root/sibling_of_to_ancestor", 10.0, 20.0, 30.0, 40, 50)
        self.assert_pool_resources("some_root/to_ancestor/to", 15.0, 30.0, 45.0, 60, 75)

    def test_transfer_integral_guarantees_does_not_touch_guarantee_type(self) -> None:
        self.pool("from", integral_guarantees={"resource_flow": {"cpu": 5}})
        self.pool("to")
        self.transfer("from", "to", {"resource_flow": {"cpu": 5}})
        assert not self.yt.exists(f"{TREES}/default/from/@integral_guarantees/guarantee_type")
        assert not self.yt.exists(f"{TREES}/default/to/@integral_guarantees/guarantee_type")

    def test_transfer_from_parent_to_child_increases_guarantees_on_path(self) -> None:
        self.pool("from_ancestor", **guarantees(10, 20, 30, 40, 50))
        self.pool("intermediate", "from_ancestor")
        self.pool("to_child", "intermediate")
        self.transfer("from_ancestor", "to_child", FULL)
        self.assert_pool_resources("from_ancestor", 10.0, 20.0, 30.0, 40, 50)
        self.assert_pool_resources("from_ancestor/intermediate", 5.0, 10.0, 15.0, 20, 25)
        self.assert_pool_resources("from_ancestor/intermediate/to_child", 5.0, 10.0, 15.0, 20, 25)
        self.transfer("from_ancestor", "to_child", FULL)
        self.assert_pool_resources("from_ancestor", 10.0, 20.0, 30.0, 40, 50)
        self.assert_pool_resources("from_ancestor/intermediate", 10.0, 20.0, 30.0, 40, 50)
        self.assert_pool_resources("from_ancestor/intermediate/to_child", 10.0, 20.0, 30.0, 40, 50)

    def test_transfer_from_child_to_parent_decreases_guarantees_on_path(self) -> None:
        self.pool("to_ancestor", **guarantees(10, 20, 30, 40, 50))
        self.pool("intermediate", "to_ancestor", **guarantees(10, 20, 30, 40, 50))
        self.pool("from_child", "intermediate", **guarantees(10, 20, 30, 40, 50))
        self.transfer("from_child", "to_ancestor", FULL)
        self.assert_pool_resources("to_ancestor", 10.0, 20.0, 30.0, 40, 50)
        self.assert_pool_resources("to_ancestor/intermediate", 5.0, 10.0, 15.0, 20, 25)
        self.assert_pool_resources("to_ancestor/intermediate/from_child", 5.0, 10.0, 15.0, 20, 25)
        self.transfer("from_child", "to_ancestor", FULL)
        self.assert_pool_resources("to_ancestor", 10.0, 20.0, 30.0, 40, 50)
        self.assert_pool_resources("to_ancestor/intermediate", 0.0, 0.0, 0.0, 0, 0)
        self.assert_pool_resources("to_ancestor/intermediate/from_child", 0.0, 0.0, 0.0, 0, 0)

    def test_fail_on_negative_delta(self) -> None:
        self.pool("ancestor", **guarantees(10, 20, 30, 40, 50))
        self.pool("child", "ancestor", **guarantees(10, 20, 30, 40, 50))
        with pytest.raises(YtError):
            self.transfer("ancestor", "child", {"max_running_operation_count": -1})
        with pytest.raises(YtError):
            self.transfer("ancestor", "child", {"strong_guarantee_resources": {"cpu": -1}})
        self.assert_pool_resources("ancestor", 10.0, 20.0, 30.0, 40, 50)
        self.assert_pool_resources("ancestor/child", 10.0, 20.0, 30.0, 40, 50)

    def test_transfer_pool_resources_rolls_back_on_failed_validation(self) -> None:
        self.pool("ancestor_from", **guarantees(10, 20, 30, 5, 5))
        self.pool("from", "ancestor_from", **guarantees(10, 20, 30, 5, 5))
        self.pool("ancestor_to", max_operation_count=5)
        self.pool("to", "ancestor_to", max_operation_count=4)
        with pytest.raises(YtError):
            self.transfer(
                "from",
                "to",
                {
                    "strong_guarantee_resources": {"cpu": 10},
                    "integral_guarantees": {
                        "resource_flow": {"cpu": 20},
                        "burst_guarantee_resources": {"cpu": 30},
                    },
                    "max_running_operation_count": 5,
                },
            )
        self.assert_pool_resources("ancestor_from", 10, 20, 30, 5, 5)
        self.assert_pool_resources("ancestor_from/from", 10, 20, 30, 5, 5)
        self.assert_pool_resources("ancestor_to", None, None, None, None, 5)
        self.assert_pool_resources("ancestor_to/to", None, None, None, None, 4)

    def test_transfer_from_root_increases_guarantees_on_path(self) -> None:
        self.pool("ancestor")
        self.pool("target", "ancestor")
        self.transfer("<Root>", "target", FULL)
        self.assert_pool_resources("ancestor", 5.0, 10.0, 15.0, 20, 25)
        self.assert_pool_resources("ancestor/target", 5.0, 10.0, 15.0, 20, 25)

    def test_transfer_to_root_decreases_guarantees_on_path(self) -> None:
        self.pool("ancestor", **guarantees(5, 10, 15, 20, 25))
        self.pool("from", "ancestor", **guarantees(5, 10, 15, 20, 25))
        self.transfer("from", "<Root>", FULL)
        self.assert_pool_resources("ancestor", 0.0, 0.0, 0.0, 0, 0)
        self.assert_pool_resources("ancestor/from", 0.0, 0.0, 0.0, 0, 0)

    def test_src_and_dst_must_differ(self) -> None:
        self.pool("target", **guarantees(5, 10, 15, 20, 25))
        with pytest.raises(YtError):
            self.transfer("target", "target", FULL)

    def test_src_is_lca_and_cannot_overflow_it(self) -> None:
        self.pool("from_ancestor", strong_guarantee_resources={"cpu": 10})
        self.pool("intermediate", "from_ancestor")
        self.pool("to_child", "intermediate")
        with pytest.raises(YtError):
            self.transfer("from_ancestor", "to_child", {"strong_guarantee_resources": {"cpu": 20}})
        self.assert_pool_resources("from_ancestor", 10, None, None, None, None)
        self.assert_pool_resources("from_ancestor/intermediate", None, None, None, None, None)
        self.assert_pool_resources("from_ancestor/intermediate/to_child", None, None, None, None, None)
