"""The single-node preemption classes of YTsaurus's test_scheduler_preemption.py (yt/yt/tests/integration/
scheduler/), restated through ``yt.wrapper`` against a real ``pooltree scheduler`` and real ``pooltree node``
processes (issue 27): ``TestNonPreemptibleResourceUsageThreshold``, ``TestPreemptionPriorityScope`` and
``TestIncreasedStarvationToleranceForFullySatisfiedDemand`` on one node of 10 cpu / 10 user slots, and
``TestSchedulingBugOfOperationWithGracefulPreemption`` on one node of 2 cpu / 2 user slots, as their environments
have.

``run_sleeping_vanilla`` is a vanilla operation of ``sleep 1000`` jobs; a breakpoint is a wait for the job count it
waited for, and its release + ``track`` is ``complete_operation`` once the jobs run. Option names are those of
YTsaurus's current version of these tests (``max_unpreemptible_running_allocation_count``).
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
    holds_for,
    module_env,
    operation_path,
    pool_path,
    running_jobs,
    sleeping,
    state,
    update_tree_config,
    wait,
)

CONFIG = f"{PER_TREE}/default/config"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YtEnv]:
    yield from module_env(
        tmp_path_factory, "preemption_single", num_nodes=1, node_resources="user_slots=10,cpu=10,memory=64Gi"
    )


@pytest.fixture(scope="module")
def small_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YtEnv]:
    yield from module_env(
        tmp_path_factory, "preemption_small", num_nodes=1, node_resources="user_slots=2,cpu=2,memory=16Gi"
    )


class Base:
    yt: ytw.YtClient

    def update_tree_config(self, **options: Any) -> None:
        update_tree_config(self.yt, **options)

    def usage_cpu(self, op_id: str) -> Any:
        return get_or(self.yt, f"{operation_path(op_id)}/resource_usage/cpu")


class TestNonPreemptibleResourceUsageThreshold(Base):
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.env = env
        self.yt = env.yt
        self.yt.remove(f"{TREES}/default/@config/max_unpreemptible_running_allocation_count", force=True)
        self.yt.set(f"{TREES}/default/@config/max_unpreemptible_running_allocation_count", None)
        self.update_tree_config(
            aggressive_preemption_satisfaction_threshold=0.4,
            preemption_satisfaction_threshold=0.9,
            fair_share_starvation_tolerance=1.0,
            non_preemptible_resource_usage_threshold={},
        )

    def counts_are(self, op: Any, preemptible: int, aggressively: int) -> None:
        """``wait_no_assert(_check_preemptible_job_count(op, preemptible, aggressively))``."""

        def counts() -> tuple[Any, Any]:
            path = operation_path(op.id)
            return (
                self.yt.get(f"{path}/preemptible_job_count"),
                self.yt.get(f"{path}/aggressively_preemptible_job_count"),
            )

        wait(lambda: counts() == (preemptible, aggressively))

    def set_option(self, key: str, value: Any) -> None:
        """``update_pool_tree_config_option("default", key, value)``."""
        self.yt.set(f"{TREES}/default/@config/{key}", value)
        wait(lambda: self.yt.get(CONFIG).get(key) == value)

    def test_non_preemptible_resource_usage_threshold(self) -> None:
        op = sleeping(self.yt, job_count=15)
        wait(lambda: self.usage_cpu(op.id) == 10.0)
        self.counts_are(op, 1, 5)
        for threshold, expected in (
            ({"cpu": 1.0}, (1, 5)),
            ({"cpu": 1.0, "user_slots": 2}, (1, 5)),
            ({"cpu": 5.0, "user_slots": 2}, (1, 5)),
            ({"cpu": 5.0, "user_slots": 6}, (1, 4)),
            ({"user_slots": 7}, (1, 2)),
            ({"cpu": 10.0}, (0, 0)),
        ):
            self.set_option("non_preemptible_resource_usage_threshold", threshold)
            self.counts_are(op, *expected)

    def test_max_unpreemptible_running_allocation_count(self) -> None:
        op = sleeping(self.yt, job_count=15)
        wait(lambda: self.usage_cpu(op.id) == 10.0)
        self.counts_are(op, 1, 5)
        self.yt.remove(f"{TREES}/default/@config/max_unpreemptible_running_allocation_count", force=True)
        for count, expected in ((0, (1, 5)), (4, (1, 5)), (7, (1, 2)), (10, (0, 0))):
            self.set_option("max_unpreemptible_running_allocation_count", count)
            self.counts_are(op, *expected)

    def test_config_postprocessor(self) -> None:
        yt = self.yt
        option = f"{CONFIG}/non_preemptible_resource_usage_threshold"
        assert yt.get(option) == {}
        yt.remove(f"{TREES}/default/@config/max_unpreemptible_running_allocation_count", force=True)
        self.set_option("max_unpreemptible_running_allocation_count", 0)
        assert yt.get(option) == {"user_slots": 0}
        self.set_option("max_unpreemptible_running_allocation_count", 7)
        assert yt.get(option) == {"user_slots": 7}
        yt.set(f"{TREES}/default/@config/non_preemptible_resource_usage_threshold", {"cpu": 1.0})
        wait(lambda: yt.get(option) == {"cpu": 1.0, "user_slots": 7})
        self.set_option("non_preemptible_resource_usage_threshold", {"cpu": 1.0, "user_slots": 5})
        assert yt.get(option) == {"cpu": 1.0, "user_slots": 5}
        with pytest.raises(ytw.YtError):
            yt.remove(f"{TREES}/default/@config/non_preemptible_resource_usage_threshold", force=True)
            yt.set(f"{TREES}/default/@config/non_preemptible_resource_usage_threshold", None)

    def test_pool_config_overrides_tree_config(self) -> None:
        create_pool(self.yt, "pool")
        op = sleeping(self.yt, job_count=15, pool="pool")
        wait(lambda: self.usage_cpu(op.id) == 10.0)
        self.counts_are(op, 1, 5)
        self.set_option("non_preemptible_resource_usage_threshold", {"user_slots": 1})
        self.counts_are(op, 1, 5)
        self.yt.set(f"{TREES}/default/pool/@non_preemptible_resource_usage_threshold", {"user_slots": 7})
        self.counts_are(op, 1, 2)
        self.set_option("non_preemptible_resource_usage_threshold", {"user_slots": 10})
        self.counts_are(op, 1, 2)

    def test_operation_max_unpreemptible_running_allocation_count(self) -> None:
        op = sleeping(self.yt, job_count=15, max_unpreemptible_job_count=7)
        wait(lambda: self.usage_cpu(op.id) == 10.0)
        self.counts_are(op, 1, 2)
        self.set_option("non_preemptible_resource_usage_threshold", {"user_slots": 1})
        self.counts_are(op, 1, 5)
        self.set_option("non_preemptible_resource_usage_threshold", {"user_slots": 10})
        self.counts_are(op, 1, 2)


class TestPreemptionPriorityScope(Base):
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.env = env
        self.yt = env.yt

    def test_preemption_priority_scope(self) -> None:
        # The node orchid's last_preemptive_heartbeat_statistics/operation_count_by_preemption_priority (an
        # internal statistic of YTsaurus's last preemptive heartbeat) is not modelled: that one check is left out.
        yt = self.yt
        self.update_tree_config(
            preemption_satisfaction_threshold=0.8,
            fair_share_starvation_timeout=1000,
            fair_share_starvation_tolerance=0.95,
            max_unpreemptible_running_allocation_count=0,
            preemptive_scheduling_backoff=0,
            scheduling_preemption_priority_scope="operation_only",
        )
        create_pool(yt, "first", attributes={"strong_guarantee_resources": {"cpu": 4.9, "user_slots": 5}})
        create_pool(yt, "second", attributes={"strong_guarantee_resources": {"cpu": 5.1, "user_slots": 5}})
        normal_op = sleeping(yt, job_count=5, pool="first")
        wait(lambda: self.usage_cpu(normal_op.id) == 5.0)
        starving_op = sleeping(yt, pool="second", scheduling_tag_filter="nonexistent_tag")
        # starvation_timeout is 1 s: 10 s is ample
        wait(lambda: get_or(yt, f"{operation_path(starving_op.id)}/starvation_status") == "starving", 10)
        wait(lambda: get_or(yt, f"{pool_path('second')}/starvation_status") == "starving", 10)
        greedy_op = sleeping(yt, job_count=3, cpu_limit=2.0, pool="second")
        greedy = operation_path(greedy_op.id)
        wait(
            lambda: (
                get_or(yt, f"{greedy}/detailed_fair_share/total/cpu", 0.0) == pytest.approx(0.41, abs=1e-3)
            )
        )
        wait(lambda: yt.get(f"{greedy}/resource_usage/cpu") == 4.0)
        holds_for(lambda: yt.get(f"{greedy}/resource_usage/cpu") == 4.0, 3.0)  # time.sleep(3.0); assert
        assert yt.get(f"{greedy}/starvation_status") == "non_starving"
        assert yt.get(f"{pool_path('second')}/starvation_status") == "starving"
        self.yt.set(
            f"{TREES}/default/@config/scheduling_preemption_priority_scope", "operation_and_ancestors"
        )
        wait(lambda: yt.get(f"{greedy}/resource_usage/cpu") == 6.0)


class TestIncreasedStarvationToleranceForFullySatisfiedDemand(Base):
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.env = env
        self.yt = env.yt
        self.update_tree_config(
            aggressive_preemption_satisfaction_threshold=0.2,
            preemption_satisfaction_threshold=1.0,
            fair_share_starvation_tolerance=0.8,
            max_unpreemptible_running_allocation_count=0,
            fair_share_starvation_timeout=100,
            fair_share_aggressive_starvation_timeout=200,
            preemptive_scheduling_backoff=0,
            max_ephemeral_pools_per_user=5,
        )

    def test_increase_for_operation(self) -> None:
        yt = self.yt
        create_pool(yt, "regular_pool", attributes={"strong_guarantee_resources": {"cpu": 1.0}})
        create_pool(yt, "starving_pool", attributes={"strong_guarantee_resources": {"cpu": 9.0}})
        regular_op = sleeping(yt, cpu_limit=2.0, pool="regular_pool")
        wait(lambda: self.usage_cpu(regular_op.id) == 2.0)
        starving_op = sleeping(yt, job_count=9, pool="starving_pool")
        wait(lambda: self.usage_cpu(starving_op.id) == 8.0)
        status = f"{operation_path(starving_op.id)}/starvation_status"
        wait(lambda: yt.get(status) == "starving")
        holds_for(lambda: yt.get(status) == "starving", 3.0)

    def test_no_increase_for_pool(self) -> None:
        yt = self.yt
        create_pool(yt, "pool")
        regular_op = sleeping(yt, job_count=9, pool="pool")
        wait(lambda: self.usage_cpu(regular_op.id) == 9.0)
        starving_op = sleeping(yt, pool="pool", scheduling_tag_filter="nonexistent_tag")
        status = f"{operation_path(starving_op.id)}/starvation_status"
        wait(lambda: get_or(yt, status) == "starving", 10)  # starvation timeout 0.1 s: 10 s is ample
        holds_for(lambda: yt.get(status) == "starving", 3.0)
        assert yt.get(f"{pool_path('pool')}/starvation_status") == "non_starving"


class TestSchedulingBugOfOperationWithGracefulPreemption(Base):
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, small_env: YtEnv) -> None:
        small_env.reset()
        self.env = small_env
        self.yt = small_env.yt

    def test_scheduling_bug_of_operation_with_graceful_preemption(self) -> None:
        yt = self.yt
        create_pool(yt, "pool", attributes={"fair_share_starvation_tolerance": 0.4})
        placeholder = sleeping(yt)  # the breakpoint "placeholder"
        wait(lambda: len(running_jobs(yt, placeholder.id)) == 1)
        op = sleeping(yt, job_count=2, preemption_mode="graceful", pool="pool")
        wait(lambda: len(running_jobs(yt, op.id)) == 1)  # wait_breakpoint("graceful", job_count=1)
        yt.complete_operation(placeholder.id)  # release_breakpoint("placeholder")
        wait(lambda: len(running_jobs(yt, op.id)) == 2)  # wait_breakpoint("graceful", job_count=2)
        yt.complete_operation(op.id)  # release_breakpoint("graceful"); track
        wait(lambda: state(yt, op.id) == "completed")
