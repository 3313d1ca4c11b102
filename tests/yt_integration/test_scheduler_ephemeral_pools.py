"""YTsaurus's ``TestEphemeralPools``, ``TestSchedulerPoolsReconfiguration`` and ``TestSchedulerPoolsCommon``
(yt/yt/tests/integration/scheduler/test_scheduler_strategy.py), restated through ``yt.wrapper`` against a real
``pooltree scheduler`` and three ``pooltree node`` processes (issue 27). Their pools under ``//sys/pools`` are the
default tree's here.

``run_sleeping_vanilla`` is a vanilla operation of one ``sleep 1000`` job; a job waiting on a breakpoint is such a
job, and ``release_breakpoint`` + ``track`` is ``complete_operation`` once it runs (a vanilla operation's way to
finish with running jobs). Orchid paths are YTsaurus's (``scheduling_info_per_pool_tree/<tree>/fair_share_info/pools``,
``.../operations``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yt.wrapper as ytw
from yt_env import (
    PER_TREE,
    TREES,
    YtEnv,
    create_pool,
    get_or,
    module_env,
    operation_path,
    pool_path,
    running_jobs,
    sleeping,
    state,
    update_tree_config,
    update_user_to_default_pool_map,
    vanilla,
    wait,
)

POOLS = f"{PER_TREE}/default/fair_share_info/pools"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YtEnv]:
    yield from module_env(
        tmp_path_factory, "ephemeral", num_nodes=3, node_resources="user_slots=1,cpu=1,memory=4Gi"
    )


class Base:
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.env = env
        self.yt = env.yt

    def sleeping(self, client: ytw.YtClient | None = None, **spec: Any) -> Any:
        """``run_sleeping_vanilla``."""
        return sleeping(client or self.yt, **spec)

    def release(self, *ops: Any) -> None:
        """``release_breakpoint`` + ``track``: each waiting operation finishes once its job runs."""
        for op in ops:
            wait(lambda op=op: len(running_jobs(self.yt, op.id)) == 1, timeout=60)
            self.yt.complete_operation(op.id)
            wait(lambda op=op: state(self.yt, op.id) == "completed")

    def parent(self, pool: str) -> Any:
        return self.yt.get(f"{pool_path(pool)}/parent")

    def update_tree_config(self, **options: Any) -> None:
        update_tree_config(self.yt, **options)


class TestEphemeralPools(Base):
    def test_default_parent_pool(self) -> None:
        yt = self.yt
        create_pool(yt, "default_pool")
        self.update_tree_config(default_parent_pool="default_pool", max_ephemeral_pools_per_user=2)
        op1 = self.sleeping()
        op2 = self.sleeping(pool="my_pool")
        wait(lambda: len(running_jobs(yt, op1.id)) + len(running_jobs(yt, op2.id)) == 2)  # wait_breakpoint(2)
        assert yt.get(f"{POOLS}/root")["parent"] == "default_pool"
        assert yt.get(f"{POOLS}/my_pool")["parent"] == "default_pool"
        assert {"root", "my_pool"} == set(yt.get(f"{PER_TREE}/default/user_to_ephemeral_pools/root"))
        yt.remove(f"{TREES}/default/default_pool", recursive=True)
        self.release(op1, op2)

    def test_ephemeral_pool_is_created_in_user_default_parent_pool(self) -> None:
        yt = self.yt
        user = self.user_client()
        create_pool(yt, "default_for_u")
        self.update_tree_config(use_user_default_parent_pool_map=True)
        update_user_to_default_pool_map(yt, {"u": "default_for_u"})
        op = self.sleeping(user)
        wait(lambda: get_or(yt, f"{operation_path(op.id)}/pool", "") == "u")
        wait(lambda: get_or(yt, f"{pool_path('u')}/parent", "") == "default_for_u")

    def test_change_in_user_default_parent_pool_map_changes_parent_of_existing_ephemeral_pool(self) -> None:
        yt = self.yt
        user = self.user_client()
        create_pool(yt, "default_for_u")
        self.update_tree_config(use_user_default_parent_pool_map=True)
        self.sleeping(user)
        wait(lambda: yt.exists(pool_path("u")))
        wait(lambda: get_or(yt, f"{pool_path('u')}/parent", "") == "<Root>")
        update_user_to_default_pool_map(yt, {"u": "default_for_u"})
        wait(lambda: get_or(yt, f"{pool_path('u')}/parent", "") == "default_for_u")

    def test_nonexistent_pools_are_created_in_default_user_pool(self) -> None:
        yt = self.yt
        self.update_tree_config(use_user_default_parent_pool_map=True)
        user = self.user_client()
        create_pool(yt, "default_for_u")
        update_user_to_default_pool_map(yt, {"u": "default_for_u"})
        op = self.sleeping(user, pool="nonexistent")
        wait(lambda: get_or(yt, f"{operation_path(op.id)}/pool", "") == "nonexistent")
        wait(lambda: get_or(yt, f"{pool_path('nonexistent')}/parent", "") == "default_for_u")

    def test_ephemeral_flag(self) -> None:
        yt = self.yt
        create_pool(yt, "real_pool")
        op = self.sleeping(pool="ephemeral_pool")
        wait(lambda: state(yt, op.id) == "running")
        wait(lambda: get_or(yt, f"{pool_path('ephemeral_pool')}/is_ephemeral", False))
        wait(lambda: not get_or(yt, f"{pool_path('real_pool')}/is_ephemeral", False))
        wait(lambda: not get_or(yt, f"{pool_path('<Root>')}/is_ephemeral", False))

    def test_ephemeral_pool_in_custom_pool_simple(self) -> None:
        yt = self.yt
        create_pool(yt, "custom_pool", attributes={"create_ephemeral_subpools": True})
        op = self.sleeping(pool="custom_pool")
        wait(lambda: len(running_jobs(yt, op.id)) == 1)
        wait(lambda: yt.exists(f"{POOLS}/custom_pool$root"))
        pool = yt.get(f"{POOLS}/custom_pool$root")
        assert pool["parent"] == "custom_pool"
        assert pool["mode"] == "fair_share"
        assert pool["is_ephemeral"]

    def test_crash_on_disabling_ephemeral_hub(self) -> None:
        yt = self.yt
        create_pool(
            yt,
            "ephemeral_hub",
            attributes={"create_ephemeral_subpools": True, "max_running_operation_count": 1},
        )
        op = self.sleeping(pool="ephemeral_hub")
        wait(lambda: len(running_jobs(yt, op.id)) == 1)
        wait(lambda: yt.exists(f"{POOLS}/ephemeral_hub$root"))
        op = self.sleeping(pool="ephemeral_hub")
        wait(lambda: state(yt, op.id) == "pending")
        yt.remove(f"{TREES}/default/ephemeral_hub/@create_ephemeral_subpools")
        wait(lambda: not yt.exists(f"{POOLS}/ephemeral_hub$root"))

    def test_custom_ephemeral_pool_persists_after_pool_update(self) -> None:
        yt = self.yt
        create_pool(yt, "custom_pool", attributes={"create_ephemeral_subpools": True})
        op = self.sleeping(pool="custom_pool")
        wait(lambda: len(running_jobs(yt, op.id)) == 1)
        wait(lambda: get_or(yt, f"{POOLS}/custom_pool$root/parent", "") == "custom_pool")
        create_pool(yt, "trigger_pool_update")
        wait(lambda: yt.exists(f"{POOLS}/trigger_pool_update"))  # the orchid shows the update
        assert yt.get(f"{POOLS}/custom_pool$root/parent") == "custom_pool"

    def test_ephemeral_pool_parent_is_removed_after_operation_complete(self) -> None:
        yt = self.yt
        create_pool(yt, "custom_pool", attributes={"create_ephemeral_subpools": True})
        op = self.sleeping(pool="custom_pool")
        wait(lambda: len(running_jobs(yt, op.id)) == 1)  # wait_breakpoint
        yt.remove(f"{TREES}/default/custom_pool", recursive=True)
        # is_ephemeral: the orchid shows the state after the removal (not a view published before it)
        wait(lambda: get_or(yt, f"{POOLS}/custom_pool/is_ephemeral", False))
        wait(lambda: yt.exists(f"{POOLS}/custom_pool$root"))
        self.release(op)
        wait(lambda: not yt.exists(f"{POOLS}/custom_pool"))
        wait(lambda: not yt.exists(f"{POOLS}/custom_pool$root"))

    def test_custom_ephemeral_pool_scheduling_mode(self) -> None:
        yt = self.yt
        create_pool(
            yt,
            "custom_pool_fifo",
            attributes={"create_ephemeral_subpools": True, "ephemeral_subpool_config": {"mode": "fifo"}},
        )
        op = self.sleeping(pool="custom_pool_fifo")
        wait(lambda: len(running_jobs(yt, op.id)) == 1)
        wait(lambda: yt.exists(f"{POOLS}/custom_pool_fifo$root"))
        pool_fifo = yt.get(f"{POOLS}/custom_pool_fifo$root")
        assert pool_fifo["parent"] == "custom_pool_fifo"
        assert pool_fifo["mode"] == "fifo"

    def test_custom_ephemeral_pool_max_operation_count(self) -> None:
        yt = self.yt
        create_pool(
            yt,
            "custom_pool",
            attributes={
                "create_ephemeral_subpools": True,
                "ephemeral_subpool_config": {"max_operation_count": 1},
            },
        )
        op = self.sleeping(pool="custom_pool")
        wait(lambda: len(running_jobs(yt, op.id)) == 1)
        no_retries = self.env.client(start_operation_retries={"enable": False})
        with pytest.raises(ytw.YtError):
            no_retries.run_operation(vanilla("true", pool="custom_pool"), sync=True)

    def test_custom_ephemeral_pool_resource_limits(self) -> None:
        yt = self.yt
        create_pool(
            yt,
            "custom_pool",
            attributes={
                "create_ephemeral_subpools": True,
                "ephemeral_subpool_config": {"resource_limits": {"cpu": 1}},
            },
        )
        self.sleeping(pool="custom_pool")
        wait(lambda: yt.exists(f"{POOLS}/custom_pool$root"))
        pool_info = yt.get(f"{POOLS}/custom_pool$root")
        assert pool_info["resource_limits"]["cpu"] == 1.0

    def test_ephemeral_to_explicit_pool_transformation(self) -> None:
        yt = self.yt
        create_pool(yt, "default_pool")
        yt.set(f"{TREES}/default/@config/default_parent_pool", "default_pool")
        wait(lambda: yt.exists(pool_path("default_pool")))
        self.sleeping(pool="test_pool")
        wait(lambda: yt.exists(pool_path("test_pool")))
        create_pool(yt, "test_pool")
        wait(lambda: self.parent("test_pool") == "<Root>")
        wait(lambda: yt.get(f"{PER_TREE}/default/user_to_ephemeral_pools/root") == [])
        wait(lambda: not get_or(yt, f"{pool_path('<Root>')}/is_ephemeral", False))

    def test_explicit_to_ephemeral_pool_transformation_with_user_default_parent_pool_map(self) -> None:
        yt = self.yt
        user = self.user_client()
        create_pool(yt, "u")
        create_pool(yt, "default_parent_for_u")
        self.update_tree_config(use_user_default_parent_pool_map=True)
        update_user_to_default_pool_map(yt, {"u": "default_parent_for_u"})
        op = self.sleeping(user)
        wait(lambda: get_or(yt, f"{operation_path(op.id)}/pool", "") == "u")
        wait(lambda: self.parent("u") == "<Root>")
        yt.remove(f"{TREES}/default/u", recursive=True)
        wait(lambda: self.parent("u") == "default_parent_for_u")
        wait(lambda: get_or(yt, f"{pool_path('u')}/is_ephemeral", False))

    def test_explicit_to_ephemeral_pool_transformation_with_ephemeral_subpool_config(self) -> None:
        yt = self.yt
        create_pool(yt, "research", attributes={"ephemeral_subpool_config": {"max_operation_count": 3}})
        create_pool(yt, "ephemeral")
        self.update_tree_config(default_parent_pool="research")
        op = self.sleeping(pool="ephemeral")
        wait(lambda: get_or(yt, f"{operation_path(op.id)}/pool", "") == "ephemeral")
        wait(lambda: self.parent("ephemeral") == "<Root>")
        yt.remove(f"{TREES}/default/ephemeral", recursive=True)
        wait(lambda: self.parent("ephemeral") == "research")
        wait(lambda: get_or(yt, f"{pool_path('ephemeral')}/is_ephemeral", False))
        wait(lambda: get_or(yt, f"{pool_path('ephemeral')}/max_operation_count", False) == 3)

    def test_ephemeral_subpool_config_applies_to_existent_ephemeral_subpools(self) -> None:
        yt = self.yt
        create_pool(yt, "research", attributes={"ephemeral_subpool_config": {"max_operation_count": 3}})
        create_pool(yt, "explicit", parent_name="research")
        self.update_tree_config(default_parent_pool="research")
        op = self.sleeping(pool="ephemeral")
        wait(lambda: get_or(yt, f"{operation_path(op.id)}/pool", "") == "ephemeral")
        yt.set(f"{TREES}/default/research/@ephemeral_subpool_config", {"max_operation_count": 5})
        wait(lambda: get_or(yt, f"{pool_path('ephemeral')}/max_operation_count", False) == 5)
        wait(lambda: get_or(yt, f"{pool_path('explicit')}/max_operation_count", False) != 5)

    def test_user_runs_operation_in_ephemeral_pool_under_root(self) -> None:
        yt = self.yt
        user = self.user_client()
        op = self.sleeping(user)
        wait(lambda: get_or(yt, f"{operation_path(op.id)}/pool", "") == "u")
        wait(lambda: self.parent("u") == "<Root>")
        op2 = self.sleeping(user)
        wait(lambda: get_or(yt, f"{operation_path(op2.id)}/pool", "") == "u")

    def user_client(self) -> ytw.YtClient:
        """``create_user("u")`` and a client authenticated as ``u``."""
        if not self.yt.exists("//sys/users/u"):
            self.yt.create("user", attributes={"name": "u"})
        token = self.yt.issue_token("u")
        return self.env.client(token.decode() if isinstance(token, bytes) else token)

    def test_ephemeral_pools_limit(self) -> None:
        yt = self.yt
        create_pool(yt, "default_pool")
        yt.set(f"{TREES}/default/@config/default_parent_pool", "default_pool")
        yt.set(f"{TREES}/default/@config/max_ephemeral_pools_per_user", 3)
        wait(lambda: yt.get(f"{PER_TREE}/default/config")["max_ephemeral_pools_per_user"] == 3)
        ops = []
        for i in range(1, 4):
            ops.append(self.sleeping(pool=f"pool{i}"))
            wait(lambda: len(running_jobs(yt, ops[-1].id)) == 1)  # wait_breakpoint(breakpoint_name)
        assert {f"pool{i}" for i in range(1, 4)} == set(
            yt.get(f"{PER_TREE}/default/user_to_ephemeral_pools/root")
        )
        no_retries = self.env.client(start_operation_retries={"enable": False})
        with pytest.raises(ytw.YtError):
            no_retries.run_operation(vanilla("true", pool="pool4"), sync=False)
        yt.remove(f"{TREES}/default/default_pool", recursive=True)
        yt.remove(f"{TREES}/default/@config/default_parent_pool")
        yt.remove(f"{TREES}/default/@config/max_ephemeral_pools_per_user")
        self.release(*ops)

    def test_move_last_operation_from_ephemeral_pool(self) -> None:
        yt = self.yt
        create_pool(yt, "real")
        op = self.sleeping(pool="ephemeral")
        wait(lambda: yt.exists(pool_path("ephemeral")))
        yt.update_operation_parameters(op.id, {"pool": "real"})
        wait(lambda: not yt.exists(pool_path("ephemeral")))

    def move_to_ephemeral_hub(self, parameters: dict[str, Any]) -> None:
        """The two tests' common body: an operation in an ephemeral pool moved into a hub by ``parameters``."""
        yt = self.yt
        create_pool(yt, "ephemeral_hub", attributes={"create_ephemeral_subpools": True})
        op = self.sleeping(pool="inexistent")
        wait(lambda: yt.exists(pool_path("inexistent")))
        yt.update_operation_parameters(op.id, parameters)
        wait(lambda: yt.get(f"{operation_path(op.id)}/pool") == "ephemeral_hub$root")

    def test_move_to_ephemeral_hub_via_common_option(self) -> None:
        self.move_to_ephemeral_hub({"pool": "ephemeral_hub"})

    def test_move_to_ephemeral_hub_via_per_pool_tree_option(self) -> None:
        self.move_to_ephemeral_hub(
            {"scheduling_options_per_pool_tree": {"default": {"pool": "ephemeral_hub"}}}
        )

    def test_fifo_pool_cannot_create_ephemeral_subpools(self) -> None:
        yt = self.yt
        create_pool(yt, "fifo_pool", attributes={"mode": "fifo"})
        with pytest.raises(ytw.YtError):
            yt.set(f"{TREES}/default/fifo_pool/@create_ephemeral_subpools", True)
        create_pool(yt, "ephemeral_hub", attributes={"create_ephemeral_subpools": True})
        with pytest.raises(ytw.YtError):
            yt.set(f"{TREES}/default/ephemeral_hub/@mode", "fifo")

    def test_destroy_user_ephemeral_pools_on_config_change(self) -> None:
        yt = self.yt
        create_pool(yt, "ephemeral_hub", attributes={"create_ephemeral_subpools": True})
        op = self.sleeping(pool="ephemeral_hub")
        wait(lambda: len(running_jobs(yt, op.id)) == 1)  # wait_breakpoint
        yt.set(f"{TREES}/default/ephemeral_hub/@create_ephemeral_subpools", False)
        yt.set(f"{TREES}/default/ephemeral_hub/@mode", "fifo")
        wait(lambda: yt.get(f"{operation_path(op.id)}/pool") == "ephemeral_hub")
        self.release(op)

    def test_default_ephemeral_hub_applies_ephemeral_subpool_config(self) -> None:
        yt = self.yt
        yt.set(f"{TREES}/default/@config/default_parent_pool", "research")
        subpool_config = {"mode": "fifo", "max_operation_count": 1, "resource_limits": {"cpu": 1}}
        create_pool(yt, "research", attributes={"ephemeral_subpool_config": subpool_config})
        op = self.sleeping(pool="ephemeral")
        wait(lambda: len(running_jobs(yt, op.id)) == 1)
        wait(lambda: yt.exists(f"{POOLS}/ephemeral"))
        pool_info = yt.get(f"{POOLS}/ephemeral")
        assert pool_info["parent"] == "research"
        assert pool_info["mode"] == "fifo"
        assert pool_info["resource_limits"]["cpu"] == 1.0
        assert pool_info["max_operation_count"] == 1

    def test_per_user_default_ephemeral_hub_applies_ephemeral_subpool_config(self) -> None:
        yt = self.yt
        user = self.user_client()
        subpool_config = {"mode": "fifo", "max_operation_count": 1, "resource_limits": {"cpu": 1}}
        create_pool(yt, "default_for_u", attributes={"ephemeral_subpool_config": subpool_config})
        update_user_to_default_pool_map(yt, {"u": "default_for_u"})
        self.update_tree_config(use_user_default_parent_pool_map=True)
        op = self.sleeping(user)
        wait(lambda: len(running_jobs(yt, op.id)) == 1)
        wait(lambda: yt.exists(pool_path("u")))
        pool_info = yt.get(pool_path("u"))
        assert pool_info["parent"] == "default_for_u"
        assert pool_info["mode"] == "fifo"
        assert pool_info["resource_limits"]["cpu"] == 1.0


class TestSchedulerPoolsCommon(Base):
    def test_pools_reconfiguration(self) -> None:
        # a map with schedule_job_delay 1 s → a vanilla job that runs about as long; the pool is moved meanwhile
        yt = self.yt
        create_pool(yt, "test_pool_1")
        create_pool(yt, "test_pool_2")
        op = yt.run_operation(vanilla("sleep 1", pool="test_pool_1"), sync=False)
        wait(lambda: state(yt, op.id) == "running")
        yt.remove(f"{TREES}/default/test_pool_1", recursive=True)
        create_pool(yt, "test_pool_1", parent_name="test_pool_2")
        op.wait(timeout=120_000)
        assert state(yt, op.id) == "completed"

    @pytest.mark.skip(
        reason="reads //sys/scheduler/event_log as a table (operation_started/completed with job_statistics, "
        "pools_info rows): pooltree's event log is the orchid's event_log and has no pools_info events"
    )
    def test_event_log(self) -> None:
        pass

    def test_pool_count(self) -> None:
        # the profiler's scheduler/pools/pool_count sensor is pooltree's /metrics; the orchid's count is checked
        yt = self.yt

        def check_pool_count(expected: int) -> None:
            wait(lambda: yt.get(f"{PER_TREE}/default/fair_share_info/pool_count") == expected)

        check_pool_count(0)
        create_pool(yt, "first_pool")
        create_pool(yt, "second_pool")
        check_pool_count(2)
        op = self.sleeping(pool="first_pool")
        check_pool_count(2)
        op.abort()
        op = self.sleeping()  # an ephemeral pool
        check_pool_count(3)
        op.abort()
        check_pool_count(2)

    def test_ephemeral_pool_name_validation(self) -> None:
        yt = self.yt
        no_retries = self.env.client(start_operation_retries={"enable": False})
        with pytest.raises(ytw.YtError):
            no_retries.run_operation(vanilla("sleep 1000", pool="invalid$name"), sync=False)
        op = self.sleeping(pool="valid_name")
        with pytest.raises(ytw.YtError):
            yt.update_operation_parameters(op.id, {"pool": "invalid|name"})


class TestSchedulerPoolsReconfiguration(Base):
    @pytest.fixture(autouse=True)
    def reconfiguration_setup(self, setup_method_fixture: None) -> None:
        wait(lambda: len(self.yt.list(POOLS)) == 1)  # <Root> is always in the orchid
        wait(lambda: not self.yt.get("//sys/scheduler/@alerts"))

    def wait_pool_exists(self, pool: str) -> None:
        wait(lambda: self.yt.exists(pool_path(pool)))

    def test_add_nested_pool(self) -> None:
        create_pool(self.yt, "test_parent")
        create_pool(self.yt, "test_pool", parent_name="test_parent")
        # YTsaurus's create_pool waits for the orchid to show the pool
        wait(lambda: self.parent("test_parent") == "<Root>")
        wait(lambda: self.parent("test_pool") == "test_parent")

    def test_move_to_existing_pool(self) -> None:
        create_pool(self.yt, "test_parent")
        create_pool(self.yt, "test_pool")
        wait(lambda: self.parent("test_pool") == "<Root>")
        self.yt.move(f"{TREES}/default/test_pool", f"{TREES}/default/test_parent/test_pool")
        wait(lambda: self.parent("test_pool") == "test_parent")

    def test_move_to_new_pool(self) -> None:
        create_pool(self.yt, "test_pool")
        create_pool(self.yt, "new_pool")
        self.yt.move(f"{TREES}/default/test_pool", f"{TREES}/default/new_pool/test_pool")
        self.wait_pool_exists("new_pool")
        wait(lambda: self.parent("test_pool") == "new_pool")

    def test_move_to_root_pool(self) -> None:
        create_pool(self.yt, "test_parent")
        create_pool(self.yt, "test_pool", parent_name="test_parent")
        wait(lambda: self.parent("test_pool") == "test_parent")
        self.yt.move(f"{TREES}/default/test_parent/test_pool", f"{TREES}/default/test_pool")
        wait(lambda: self.parent("test_pool") == "<Root>")

    def test_remove_big_hierarchy(self) -> None:
        parent = None
        for i in range(10):
            pool = f"pool{i}"
            create_pool(self.yt, pool, parent_name=parent)
            parent = pool
        wait(lambda: len(self.yt.list(POOLS)) == 11)
        self.yt.remove(f"{TREES}/default/pool0", recursive=True)
        wait(lambda: len(self.yt.list(POOLS)) == 1)  # only <Root> must remain

    def test_subtle_reconfiguration_crash(self) -> None:
        yt = self.yt
        create_pool(yt, "parent", attributes={"max_running_operation_count": 1})
        create_pool(yt, "child", parent_name="parent", attributes={"max_running_operation_count": 2})
        running_op = self.sleeping(pool="child")
        wait(lambda: len(running_jobs(yt, running_op.id)) == 1)  # wait_breakpoint
        waiting_op = self.sleeping(pool="child")
        wait(lambda: state(yt, waiting_op.id) == "pending")
        yt.set(f"{TREES}/default/parent/child/@max_running_operation_count", 0)
        self.release(running_op)
