"""YTsaurus's ``TestSchedulerOperationLimits`` (yt/yt/tests/integration/scheduler/test_scheduler_strategy.py),
restated through ``yt.wrapper`` against a real ``pooltree scheduler`` and three ``pooltree node`` processes
(issue 27). Its pools under ``//sys/pools`` are the default tree's here.

Map operations become vanilla ones of one job; a job waiting on a breakpoint is a long ``sleep`` job, and
``release_breakpoint`` is ``complete_operation`` of the operations whose jobs waited (a vanilla operation's way to
finish with running jobs): the checks (running / pending states, counts, completion) are YTsaurus's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yt.wrapper as ytw
from yt_env import ORCHID, TREES, YtEnv, create_pool, module_env, state, vanilla, wait

POOLS = f"{ORCHID}/pool_trees/default/pools"
BREAKPOINT = "sleep 1000"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YtEnv]:
    yield from module_env(
        tmp_path_factory, "limits", num_nodes=3, node_resources="user_slots=2,cpu=2,memory=4Gi"
    )


def running_jobs(yt: ytw.YtClient, op_id: str) -> int:
    return sum(1 for job in yt.list_jobs(op_id)["jobs"] if job["state"] == "running")


class TestSchedulerOperationLimits:
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.env = env
        self.yt = env.yt
        self.yt.set(f"{TREES}/default/@config/max_running_operation_count_per_pool", 1)
        self.yt.set(f"{TREES}/default/@config/default_parent_pool", "default_pool")
        config = f"{ORCHID}/scheduling_info_per_pool_tree/default/config"
        wait(lambda: self.yt.get(config)["default_parent_pool"] == "default_pool")
        wait(lambda: self.yt.get(config)["max_running_operation_count_per_pool"] == 1)

    def start(self, command: str = BREAKPOINT, **spec: Any) -> Any:
        return self.yt.run_operation(vanilla(command, **spec), sync=False)

    def release(self, *ops: Any) -> None:
        """``release_breakpoint`` + ``track``: the waiting operations finish, each once it runs."""
        for op in ops:
            wait(
                lambda op=op: state(self.yt, op.id) == "running" and running_jobs(self.yt, op.id) == 1,
                timeout=60,
            )
            self.yt.complete_operation(op.id)
            wait(lambda op=op: state(self.yt, op.id) == "completed")

    def _run_operations(self) -> None:
        yt = self.yt
        op1 = self.start(pool="test_pool_1")
        op2 = self.start(pool="test_pool_1")
        op3 = self.start(pool="test_pool_2")
        wait(lambda: running_jobs(yt, op1.id) + running_jobs(yt, op3.id) == 2)  # wait_breakpoint(job_count=2)
        assert state(yt, op1.id) == "running"
        assert state(yt, op2.id) == "pending"
        assert state(yt, op3.id) == "running"
        self.release(op1, op3, op2)

    def test_operations_pool_limit(self) -> None:
        create_pool(self.yt, "test_pool_1")
        create_pool(self.yt, "test_pool_2")
        self._run_operations()

    def test_operations_recursive_pool_limit(self) -> None:
        create_pool(self.yt, "research")
        self.yt.set(f"{TREES}/default/research/@max_running_operation_count", 2)
        create_pool(self.yt, "test_pool_1", parent_name="research")
        create_pool(self.yt, "test_pool_2", parent_name="research")
        self._run_operations()

    def test_operation_count(self) -> None:
        attrs = {"max_running_operation_count": 3}
        create_pool(self.yt, "research", attributes=attrs)
        create_pool(self.yt, "subpool", parent_name="research", attributes=attrs)
        create_pool(self.yt, "other_subpool", parent_name="subpool", attributes=attrs)
        ops = [self.start(pool="other_subpool") for _ in range(3)]
        wait(lambda: self.yt.get(f"{POOLS}/research/operation_count") == 3)
        wait(lambda: self.yt.get(f"{POOLS}/research/running_operation_count") == 3)
        for op in ops:
            op.abort()

    def test_pending_operations_after_revive(self) -> None:
        yt = self.yt
        op1 = self.start("sleep 5")
        op2 = self.start("true")
        wait(lambda: state(yt, op2.id) == "pending")  # the user's ephemeral pool runs one at a time
        self.env.restart_scheduler()
        op1.wait(timeout=120_000)
        op2.wait(timeout=120_000)
        assert state(yt, op1.id) == "completed" and state(yt, op2.id) == "completed"

    def test_abort_of_pending_operation(self) -> None:
        yt = self.yt
        op1, op2, op3 = self.start(), self.start(), self.start()
        wait(lambda: running_jobs(yt, op1.id) == 1)  # wait_breakpoint()
        assert state(yt, op1.id) == "running"
        assert state(yt, op2.id) == "pending"
        assert state(yt, op3.id) == "pending"
        op2.abort()
        self.release(op1, op3)
        assert state(yt, op1.id) == "completed"
        assert state(yt, op2.id) == "aborted"
        assert state(yt, op3.id) == "completed"

    def test_reconfigured_pools_operations_limit(self) -> None:
        yt = self.yt
        create_pool(yt, "test_pool_1")
        create_pool(yt, "test_pool_2")
        op1 = self.start(pool="test_pool_1")
        wait(lambda: running_jobs(yt, op1.id) == 1)
        yt.remove(f"{TREES}/default/test_pool_1", recursive=True)
        create_pool(yt, "test_pool_1", parent_name="test_pool_2")
        wait(lambda: yt.exists(f"{POOLS}/test_pool_1"))
        op2 = self.start("true", pool="test_pool_2")
        assert state(yt, op1.id) == "running"
        wait(lambda: state(yt, op2.id) == "pending")
        self.release(op1)
        op2.wait(timeout=120_000)

    def test_total_operations_limit(self) -> None:
        yt = self.yt
        create_pool(yt, "research")
        create_pool(yt, "research_subpool", parent_name="research")
        create_pool(yt, "production")
        yt.set(f"{TREES}/default/research/@max_operation_count", 3)
        ops = []

        def run(pool: str, should_raise: bool) -> None:
            if should_raise:
                no_retries = self.env.client(start_operation_retries={"enable": False})
                with pytest.raises(ytw.YtError):
                    no_retries.run_operation(vanilla(BREAKPOINT, pool=pool), sync=True)
            else:
                op = self.start(pool=pool)
                wait(lambda: state(yt, op.id) in ("pending", "running"))
                ops.append(op)

        for _ in range(3):
            run("research", False)
        for _ in range(3, 5):
            run("research", True)
        for _ in range(3, 5):
            run("research_subpool", True)
        self.env.restart_scheduler()
        for _ in range(3, 5):
            run("research", True)
        for _ in range(3, 5):
            run("production", False)
        pools = f"{ORCHID}/scheduling_info_per_pool_tree/default/pools"
        wait(lambda: yt.get(f"{pools}/production/running_operation_count") == 1)
        wait(lambda: yt.get(f"{pools}/production/operation_count") == 2)
        wait(lambda: yt.get(f"{pools}/research/running_operation_count") == 1)
        wait(lambda: yt.get(f"{pools}/research/operation_count") == 3)
        wait(lambda: yt.get(f"{pools}/<Root>/running_operation_count") == 2)
        wait(lambda: yt.get(f"{pools}/<Root>/operation_count") == 5)
        for op in ops:
            op.abort()

    def test_pool_changes(self) -> None:
        yt = self.yt
        create_pool(yt, "research")
        create_pool(yt, "subpool", parent_name="research")
        create_pool(yt, "production")
        ops = [self.start(pool="subpool") for _ in range(3)]
        wait(lambda: yt.get(f"{POOLS}/subpool/running_operation_count") == 1)
        wait(lambda: yt.get(f"{POOLS}/subpool/operation_count") == 3)
        wait(lambda: yt.get(f"{POOLS}/research/running_operation_count") == 1)
        wait(lambda: yt.get(f"{POOLS}/research/operation_count") == 3)
        assert yt.get(f"{POOLS}/production/running_operation_count") == 0
        assert yt.get(f"{POOLS}/production/operation_count") == 0
        yt.move(f"{TREES}/default/research/subpool", f"{TREES}/default/production/subpool")
        wait(lambda: yt.get(f"{POOLS}/research/operation_count") == 0)
        assert yt.get(f"{POOLS}/subpool/running_operation_count") == 1
        assert yt.get(f"{POOLS}/subpool/operation_count") == 3
        wait(lambda: yt.get(f"{POOLS}/research/running_operation_count") == 0)
        wait(lambda: yt.get(f"{POOLS}/production/running_operation_count") == 1)
        wait(lambda: yt.get(f"{POOLS}/production/operation_count") == 3)
        for op in ops:
            op.abort()

    def _user_client(self) -> ytw.YtClient:
        if not self.yt.exists("//sys/users/u"):
            self.yt.create("user", attributes={"name": "u"})
        token = self.yt.issue_token("u")
        return self.env.client(token.decode() if isinstance(token, bytes) else token)

    def _test_pool_acl_core(self, pool: str, acl_path: str) -> None:
        user = self._user_client()
        user.run_operation(vanilla("true", pool=pool))
        self.yt.set(f"{TREES}/default{acl_path}/@acl/0/action", "deny")
        assert self.yt.check_permission("u", "use", f"{TREES}/default{acl_path}")["action"] == "deny"
        with pytest.raises(ytw.YtError):
            user.run_operation(vanilla("true", pool=pool))

    def test_global_pool_acl(self) -> None:
        ace = {"action": "allow", "subjects": ["u"], "permissions": ["use"]}
        create_pool(self.yt, "p", attributes={"inherit_acl": False, "acl": [ace]})
        self._test_pool_acl_core("p", "/p")

    def test_inner_pool_acl(self) -> None:
        ace = {"action": "allow", "subjects": ["u"], "permissions": ["use"]}
        create_pool(self.yt, "p1", attributes={"inherit_acl": False, "acl": [ace]})
        create_pool(self.yt, "p2", parent_name="p1")
        self._test_pool_acl_core("p2", "/p1")

    def test_forbid_immediate_operations(self) -> None:
        user = self._user_client()
        create_pool(self.yt, "p1", attributes={"forbid_immediate_operations": True})
        create_pool(self.yt, "p2", parent_name="p1")
        create_pool(self.yt, "default_pool", attributes={"forbid_immediate_operations": True})
        with pytest.raises(ytw.YtError):
            user.run_operation(vanilla("true", pool="p1"))
        user.run_operation(vanilla("true", pool="p2"))
        user.run_operation(vanilla("true", pool="p3"))

    def test_rename_pool_with_running_operation(self) -> None:
        # "BREAKPOINT; sleep 0.5" jobs: the breakpoint is a long sleep; releasing it is completing the operation
        # (a vanilla job cannot be released from outside), so the renames upstream makes after the release (while
        # its jobs still run) come before it here
        yt = self.yt
        create_pool(yt, "default_pool", attributes={"resource_limits": {"user_slots": 2}})
        create_pool(yt, "test_pool", attributes={"resource_limits": {"user_slots": 1}})
        total_slots = float(yt.get(f"{ORCHID}/cluster/resource_limits/user_slots"))

        def rename_test_pool(check_usage: bool = False) -> None:
            yt.set(f"{TREES}/default/test_pool/@name", "renamed_pool")
            wait(lambda: "renamed_pool" in yt.list(POOLS))
            pool_info = yt.get(f"{POOLS}/test_pool")
            assert pool_info["full_path"] == "/default_pool/test_pool"
            assert float(pool_info["resource_limits"]["user_slots"]) == total_slots
            if check_usage:
                wait(lambda: float(yt.get(f"{POOLS}/test_pool/resource_usage/user_slots")) == 2.0)

        def restore_test_pool(check_usage: bool = False) -> None:
            yt.set(f"{TREES}/default/renamed_pool/@name", "test_pool")
            wait(lambda: "renamed_pool" not in yt.list(POOLS))
            pool_info = yt.get(f"{POOLS}/test_pool")
            assert pool_info["full_path"] == "/test_pool"
            assert float(pool_info["resource_limits"]["user_slots"]) == 1.0
            if check_usage:
                wait(lambda: float(yt.get(f"{POOLS}/test_pool/resource_usage/user_slots")) == 1.0)

        op = self.start(job_count=10, pool="test_pool")
        wait(lambda: running_jobs(yt, op.id) >= 1)  # wait_breakpoint()
        rename_test_pool(check_usage=True)
        restore_test_pool(check_usage=True)
        # after release_breakpoint upstream's jobs still run (0.5 s each) through these renames
        rename_test_pool()
        restore_test_pool()
        rename_test_pool()
        yt.complete_operation(op.id)  # release_breakpoint
        wait(lambda: state(yt, op.id) == "completed")  # op.track()
        wait(lambda: "test_pool" not in yt.list(POOLS))  # the ephemeral pool goes with its last operation
