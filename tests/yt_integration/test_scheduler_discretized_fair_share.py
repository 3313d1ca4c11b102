"""YTsaurus's ``TestDiscretizedFairShare`` (yt/yt/tests/integration/scheduler/test_scheduler_discretized_fair_share.py),
restated through ``yt.wrapper`` against a real ``pooltree scheduler`` and one ``pooltree node`` of 3 cpu, 20 user slots
and 10 GiB, as its environment has (tree options ``enable_discretized_fair_share`` and ``max_discretized_steps``;
``pooltree/fairshare/discretized.py``).

Its fair-share update period is 100 ms, as this environment's is. Its tests wait for the operations' fair shares to
reach whole jobs while the jobs start; the assertions here are the same (whole jobs, the demand of an uncontested
operation, 0.5 each without the option). The orchid flag ``discretized_fair_share_active`` is true here for an
operation whose function was a staircase in the last update, as in YTsaurus (it sets the flag in each update's clone
of the tree). Its test waits for both operations' flags; the first operation here often starts all three jobs on the
empty node before the second arrives, and then has no pending job and its continuous function, so this test asserts
the flag of each operation against its pending jobs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from yt_env import YtEnv, create_pool, get_or, module_env, operation_path, sleeping, update_tree_config, wait

PER_JOB_CPU = 1.0
TOTAL_CPU = 3.0


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YtEnv]:
    yield from module_env(
        tmp_path_factory, "discretized", num_nodes=1, node_resources="user_slots=20,cpu=3,memory=10Gi"
    )


def _fair_share_cpu(env: YtEnv, op_id: str) -> float | None:
    return get_or(env.yt, f"{operation_path(op_id)}/detailed_fair_share/total/cpu")


def _whole_jobs(fair_share_cpu: float, eps: float = 1e-4) -> bool:
    jobs = fair_share_cpu / (PER_JOB_CPU / TOTAL_CPU)
    return abs(jobs - round(jobs)) < eps


class TestDiscretizedFairShare:
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.env = env
        self.yt = env.yt

    def _enable(self) -> None:
        update_tree_config(self.yt, enable_discretized_fair_share=True, max_discretized_steps=100)

    def test_discretized_fair_share_whole_job_boundary(self) -> None:
        """Two equal operations of three 1-cpu jobs on 3 cpu: each gets whole jobs (1/3 at the start, not 0.5),
        and the orchid says the staircase was used."""
        self._enable()
        create_pool(self.yt, "pool")
        op1 = sleeping(self.yt, job_count=3, cpu_limit=PER_JOB_CPU, pool="pool")
        op2 = sleeping(self.yt, job_count=3, cpu_limit=PER_JOB_CPU, pool="pool")

        def both_whole() -> bool:
            fs1, fs2 = _fair_share_cpu(self.env, op1.id), _fair_share_cpu(self.env, op2.id)
            return (
                fs1 is not None
                and fs2 is not None
                and fs1 > 0
                and fs2 > 0
                and _whole_jobs(fs1)
                and _whole_jobs(fs2)
            )

        wait(both_whole)

        def flags_follow_pending() -> bool:
            # pooltree's flag says whether the operation's function was a staircase in the last update (YTsaurus's
            # ARCHITECTURE.md): an operation whose jobs all run (no pending allocation) is back to its continuous
            # function, one with pending jobs is on the staircase. (The first operation often starts all three jobs
            # on the empty node before the second arrives.)
            for op in (op1, op2):
                view = get_or(self.yt, operation_path(op.id)) or {}
                demand = view.get("resource_demand", {}).get("cpu", 0)
                pending = demand > view.get("resource_usage", {}).get("cpu", 0)
                flag = view.get("discretized_fair_share_active")
                if flag is None or bool(flag) != pending:  # a YsonBoolean
                    return False
            return True

        wait(flags_follow_pending)
        assert any(
            get_or(self.yt, f"{operation_path(op.id)}/discretized_fair_share_active") for op in (op1, op2)
        )
        op1.abort()
        op2.abort()

    def test_discretized_fair_share_disabled_preserves_continuous(self) -> None:
        """Without the option the same operations converge to 0.5 each (1.5 jobs), no whole number of jobs."""
        create_pool(self.yt, "pool")
        op1 = sleeping(self.yt, job_count=3, cpu_limit=PER_JOB_CPU, pool="pool")
        op2 = sleeping(self.yt, job_count=3, cpu_limit=PER_JOB_CPU, pool="pool")

        def both_near_half() -> bool:
            fs1, fs2 = _fair_share_cpu(self.env, op1.id), _fair_share_cpu(self.env, op2.id)
            return fs1 is not None and fs2 is not None and abs(fs1 - 0.5) < 0.05 and abs(fs2 - 0.5) < 0.05

        wait(both_near_half)
        assert not _whole_jobs(0.5)
        op1.abort()
        op2.abort()

    def test_discretized_fair_share_uncontested_gives_full_demand(self) -> None:
        """A single operation of 2 jobs gets its whole demand, 2/3 of the cluster: whole jobs."""
        self._enable()
        create_pool(self.yt, "pool")
        op = sleeping(self.yt, job_count=2, cpu_limit=PER_JOB_CPU, pool="pool")
        expected = 2 * PER_JOB_CPU / TOTAL_CPU
        wait(lambda: abs((_fair_share_cpu(self.env, op.id) or 0.0) - expected) < 0.01)
        share = _fair_share_cpu(self.env, op.id)
        assert share is not None and _whole_jobs(share)
        op.abort()
