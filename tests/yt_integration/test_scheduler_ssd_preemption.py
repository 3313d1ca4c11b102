"""YTsaurus's ``TestSsdPriorityPreemption`` (yt/yt/tests/integration/scheduler/test_scheduler_preemption.py),
restated through ``yt.wrapper`` against a real ``pooltree scheduler`` and four ``pooltree node`` processes of
2 cpu / 2 user slots each, as its environment has (issue 27).

Its environment gives two nodes an SSD slot location (medium ``ssd_slots``) and the tag ``ssd_tag``; pooltree's
nodes have no disk media, and the tree's ``ssd_priority_preemption`` tells SSD nodes by ``node_tag_filter`` and SSD
jobs by their ``disk_request.medium_name`` (as YTsaurus's strategy does), so the two nodes carry the tag only.
A node's address is one of its tags on YTsaurus (``scheduling_tag_filter: <node>``): here each node is given its
address as a tag. ``@user_tags/end = "tag"`` is ``YtEnv.set_node_tags`` (a node restart, at moments it runs no job).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yt.wrapper as ytw
from yt_env import (
    ORCHID,
    TREES,
    YtEnv,
    create_pool,
    get_or,
    holds_for,
    job_count,
    module_env,
    operation_path,
    running_jobs,
    set_tree_options,
    sleeping,
    wait,
)

SSD_MEDIUM = "ssd_slots"
SSD_NODE_TAG = "ssd_tag"
SSD_NODES = (0, 1)
NUM_NODES = 4


def base_tags(index: int) -> str:
    own = f"node{index}"
    return f"{SSD_NODE_TAG},{own}" if index in SSD_NODES else own


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YtEnv]:
    yield from module_env(
        tmp_path_factory,
        "ssd",
        num_nodes=NUM_NODES,
        node_resources="user_slots=2,cpu=2,memory=16Gi",
        node_tags={index: base_tags(index) for index in range(NUM_NODES)},
    )


class TestSsdPriorityPreemption:
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.env = env
        self.yt = env.yt
        config = {
            "aggressive_preemption_satisfaction_threshold": 0.2,
            "preemption_satisfaction_threshold": 1.0,
            "fair_share_starvation_tolerance": 0.9,
            "max_unpreemptible_running_job_count": 0,
            "fair_share_starvation_timeout": 100,
            "fair_share_aggressive_starvation_timeout": 200,
            "preemptive_scheduling_backoff": 0,
            "max_ephemeral_pools_per_user": 5,
            "total_resource_limits_consider_delay": 100,
            "ssd_priority_preemption": {
                "enable": False,
                "node_tag_filter": SSD_NODE_TAG,
                "medium_names": [SSD_MEDIUM],
            },
        }
        set_tree_options(self.yt, config)
        wait(lambda: self.config().get("ssd_priority_preemption", {}).get("medium_names") == [SSD_MEDIUM])

    def config(self) -> dict[str, Any]:
        return self.yt.get(f"{ORCHID}/pool_trees/default/config")

    def set_ssd_enabled(self, enable: bool) -> None:
        """``update_pool_tree_config_option("default", "ssd_priority_preemption/enable", ...)``."""
        self.yt.set(f"{TREES}/default/@config/ssd_priority_preemption/enable", enable)
        wait(lambda: self.config()["ssd_priority_preemption"]["enable"] == enable)

    def cpu(self, op: Any) -> Any:
        return get_or(self.yt, f"{operation_path(op.id)}/resource_usage/cpu")

    def starvation(self, op: Any) -> Any:
        return get_or(self.yt, f"{operation_path(op.id)}/starvation_status")

    def with_ssd(self, job_count: int = 1, cpu_limit: float = 1.0, **spec: Any) -> Any:
        """``_run_sleeping_vanilla_with_ssd``: each job asks for 1 MiB on the SSD medium. Only SSD nodes have that
        medium on YTsaurus; pooltree's nodes have no media, so the jobs also carry ``scheduling_tag_filter:
        ssd_tag`` to keep them where the medium is."""
        spec.setdefault("scheduling_tag_filter", SSD_NODE_TAG)
        task = ytw.VanillaSpecBuilder().begin_task("task").command("sleep 1000").job_count(job_count)
        task = task.cpu_limit(cpu_limit).spec(
            {"disk_request": {"disk_space": 1024 * 1024, "medium_name": SSD_MEDIUM}}
        )
        builder = task.end_task()
        return self.yt.run_operation(builder.spec(spec) if spec else builder, sync=False)

    def no_running_or_aborted_jobs(self, op: Any) -> bool:
        return job_count(self.yt, op.id, "running") == 0 and job_count(self.yt, op.id, "aborted") == 0

    def unpreemptible_jobs_at_ssd_nodes(self) -> Any:
        """``_run_sleeping_vanilla_with_unpreemptible_jobs_at_ssd_nodes``: the SSD nodes filled first."""
        for index in SSD_NODES:
            self.env.set_node_tags(index, f"{base_tags(index)},tag")
        op = sleeping(self.yt, job_count=8, scheduling_tag_filter="tag")
        wait(lambda: self.cpu(op) == 4.0)
        holds_for(lambda: self.cpu(op) == 4.0, 0.5)  # time.sleep(0.5)
        for index in range(NUM_NODES):
            if index not in SSD_NODES:
                self.env.set_node_tags(index, f"{base_tags(index)},tag")
        wait(lambda: self.cpu(op) == 8.0)
        return op

    def test_regular_ssd_priority_preemption(self) -> None:
        self.unpreemptible_jobs_at_ssd_nodes()
        op = self.with_ssd(job_count=4)
        wait(lambda: self.starvation(op) == "starving")
        holds_for(lambda: self.no_running_or_aborted_jobs(op), 3.0)
        self.set_ssd_enabled(True)
        wait(lambda: self.cpu(op) == 4.0)

    def test_regular_ssd_priority_preemption_many_operations(self) -> None:
        yt = self.yt
        yt.set(f"{TREES}/default/@config/max_unpreemptible_running_job_count", 1)
        wait(lambda: self.config().get("max_unpreemptible_running_allocation_count") == 1)
        create_pool(yt, "first")
        create_pool(yt, "second")
        blocking_ops = [
            sleeping(yt, job_count=2, scheduling_tag_filter=f"node{index}", pool="first")
            for index in range(NUM_NODES)
        ]
        for blocking in blocking_ops:
            wait(lambda blocking=blocking: self.cpu(blocking) == 2.0)
        op = self.with_ssd(job_count=2, cpu_limit=2.0)
        wait(lambda: self.starvation(op) == "starving")
        holds_for(lambda: self.no_running_or_aborted_jobs(op), 3.0)
        self.set_ssd_enabled(True)
        wait(lambda: self.cpu(op) == 4.0)

    def test_regular_preemption_of_ssd_jobs(self) -> None:
        yt = self.yt
        self.set_ssd_enabled(True)
        create_pool(yt, "first", attributes={"strong_guarantee_resources": {"cpu": 2.0}})
        create_pool(yt, "second", attributes={"strong_guarantee_resources": {"cpu": 6.0}})
        blocking = self.with_ssd(job_count=4, pool="first")
        wait(lambda: self.cpu(blocking) == 4.0)
        sleeping(yt, job_count=8, pool="second")
        wait(lambda: self.cpu(blocking) == 2.0)

    @pytest.mark.parametrize("revive", [False, True])
    def test_no_aggressive_preemption_of_ssd_jobs_for_regular_jobs(self, revive: bool) -> None:
        yt = self.yt
        self.set_ssd_enabled(True)
        create_pool(yt, "aggressive", attributes={"enable_aggressive_starvation": True})
        blocking = self.with_ssd(job_count=4)
        wait(lambda: self.cpu(blocking) == 4.0)
        if revive:  # wait_for_fresh_snapshot: pooltree's store is written through
            self.env.restart_scheduler()
            wait(lambda: self.cpu(blocking) == 4.0)
        op = sleeping(yt, scheduling_tag_filter=SSD_NODE_TAG, pool="aggressive")
        wait(lambda: self.starvation(op) == "aggressively_starving")
        holds_for(lambda: self.no_running_or_aborted_jobs(op), 3.0)
        self.set_ssd_enabled(False)
        wait(lambda: self.cpu(op) == 1.0)

    @pytest.mark.parametrize("revive", [False, True])
    def test_aggressive_preemption_of_ssd_jobs_for_ssd_jobs(self, revive: bool) -> None:
        yt = self.yt
        self.set_ssd_enabled(True)
        create_pool(yt, "aggressive", attributes={"enable_aggressive_starvation": True})
        blocking = self.with_ssd(job_count=4)
        wait(lambda: self.cpu(blocking) == 4.0)
        if revive:
            self.env.restart_scheduler()
            wait(lambda: self.cpu(blocking) == 4.0)
        op = self.with_ssd(pool="aggressive")
        wait(lambda: self.cpu(op) == 1.0)

    @pytest.mark.skip(
        reason="pooltree keeps no medium directory: every medium name is accepted, so there is no "
        "'Config contains unknown SSD priority preemption media' alert to wait for (config/ssd_preemption.py)"
    )
    def test_config(self) -> None:
        pass

    @pytest.mark.skip(
        reason="reads the profiler counter scheduler/pools/preempted_job_resources/cpu by preemption_reason, "
        "which pooltree's /metrics does not serve"
    )
    def test_profiling(self) -> None:
        pass

    def test_forbid_regular_jobs_on_ssd_nodes(self) -> None:
        yt = self.yt
        self.set_ssd_enabled(True)
        create_pool(yt, "protected", attributes={"allow_regular_jobs_on_ssd_nodes": False})
        create_pool(yt, "regular")
        protected = sleeping(yt, job_count=4, pool="protected")
        wait(lambda: self.cpu(protected) == 4.0)
        regular = sleeping(yt, job_count=4, pool="regular")
        wait(lambda: self.cpu(regular) == 4.0)

        def tags(address: str) -> list[str]:
            return list(yt.get(f"{ORCHID}/nodes/{address}/tags"))

        for job in running_jobs(yt, protected.id):
            assert SSD_NODE_TAG not in tags(job["address"])
        for job in running_jobs(yt, regular.id):
            assert SSD_NODE_TAG in tags(job["address"])
        regular.abort()
        ssd_op = self.with_ssd(job_count=1, pool="protected")
        wait(lambda: self.cpu(ssd_op) == 1.0)

    def test_ignore_preemption_blocking_ancestor_for_ssd_jobs(self) -> None:
        yt = self.yt
        self.set_ssd_enabled(True)
        yt.set(f"{TREES}/default/@config/preemption_check_satisfaction", True)
        wait(lambda: self.config().get("preemption_check_satisfaction"))
        create_pool(yt, "prod", attributes={"strong_guarantee_resources": {"cpu": 7.0}})
        create_pool(yt, "research", attributes={"strong_guarantee_resources": {"cpu": 1.0}})
        blocking = sleeping(yt, job_count=5, cpu_limit=1.5, pool="prod")
        satisfaction = f"{operation_path(blocking.id)}/satisfaction_ratio"
        wait(lambda: self.cpu(blocking) == 6.0)
        wait(lambda: abs(yt.get(satisfaction) - 0.8) < 1e-4)
        ssd_op = self.with_ssd(job_count=1, pool="research")
        wait(lambda: self.cpu(ssd_op) == 1.0)
        wait(lambda: abs(yt.get(satisfaction) - 4.5 / 7.0) < 1e-4)
