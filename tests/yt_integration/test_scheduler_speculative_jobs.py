"""YTsaurus's speculative job tests (yt/yt/tests/integration/controller/test_speculative_jobs.py:
``TestSpeculativeJobsOther``, ``TestListSpeculativeJobs`` and, in their timeout form, two of
``TestSpeculativeJobEngine``'s), restated through ``yt.wrapper`` against a real ``pooltree scheduler`` and three
``pooltree node`` processes (issue 30).

YTsaurus's engine tests launch copies with a testing option (``testing_speculative_launch_mode``); pooltree has
no testing options, so copies come from ``job_speculation_timeout`` (100 ms, as YTsaurus's timeout tests set it).
A job waiting on a breakpoint is a ``sleep``: a long one that ``complete_operation`` ends where YTsaurus releases
and tracks only to finish, a finite one where the test needs the jobs to end on their own (the copy started
later, so the original ends first). Where YTsaurus reads ``@progress/jobs/aborted/scheduled/<reason>``, the jobs'
``abort_reason`` is read (pooltree's ``progress/jobs`` counts aborted jobs without reasons).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import yt.wrapper as ytw
from yt_env import YtEnv, module_env, running_jobs, state, vanilla, wait

SPEC = {"job_speculation_timeout": 100}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YtEnv]:
    yield from module_env(
        tmp_path_factory, "speculative", num_nodes=3, node_resources="user_slots=2,cpu=2,memory=4Gi"
    )


def brief_jobs(yt: ytw.YtClient, op_id: str) -> dict[str, Any]:
    return yt.get_operation(op_id, attributes=["brief_progress"])["brief_progress"]["jobs"]


def sorted_jobs(yt: ytw.YtClient, op_id: str) -> list[dict[str, Any]]:
    """YTsaurus's ``get_sorted_jobs``: the operation's jobs by start time."""
    return sorted(yt.list_jobs(op_id)["jobs"], key=lambda job: job["start_time"])


class TestSpeculativeJobs:
    @pytest.fixture(autouse=True)
    def setup_method_fixture(self, env: YtEnv) -> None:
        env.reset()
        self.env = env
        self.yt = env.yt

    def start(self, command: str, job_count: int = 1, **spec: Any) -> Any:
        return self.yt.run_operation(vanilla(command, job_count, **{**SPEC, **spec}), sync=False)

    def test_speculation_job_timeout(self) -> None:
        """``TestSpeculativeJobsOther.test_speculation_job_timeout``: one job past the timeout runs twice at once;
        the operation completes with one of the two aborted as a speculative loser."""
        op = self.start("sleep 6")
        wait(lambda: state(self.yt, op.id) == "completed", timeout=90)
        jobs = sorted_jobs(self.yt, op.id)
        assert len(jobs) == 2
        original, copy = jobs
        assert copy["start_time"] < original["finish_time"]  # both ran at once
        reasons = Counter(job.get("abort_reason") for job in jobs if job["state"] == "aborted")
        assert reasons["speculative_run_lost"] + reasons["speculative_run_won"] == 1
        counts = brief_jobs(self.yt, op.id)
        assert (counts["running"], counts["completed"], counts["aborted"], counts["total"]) == (0, 1, 1, 1)

    def test_original_faster_than_speculative(self) -> None:
        """``TestSpeculativeJobEngine.test_original_faster_than_speculative``: the original completes first and the
        copy is aborted with ``speculative_run_lost``. Both sleep as long; the copy starts a second later (a 1 s
        timeout here), so the original's lead is not lost to process start-up."""
        op = self.start("sleep 5", job_speculation_timeout=1000)
        wait(lambda: state(self.yt, op.id) == "completed", timeout=90)
        original, copy = sorted_jobs(self.yt, op.id)
        assert original["state"] == "completed"
        assert (copy["state"], copy.get("abort_reason")) == ("aborted", "speculative_run_lost")

    def test_speculative_for_speculative(self) -> None:
        """``TestSpeculativeJobsOther.test_speculative_for_speculative``: the original is aborted by the user; its
        copy, past the timeout itself, gets a copy of its own; in the end one job completed, two aborted."""
        op = self.start("sleep 10")
        wait(lambda: len(running_jobs(self.yt, op.id)) == 2, timeout=30)
        original, _copy = sorted_jobs(self.yt, op.id)
        self.yt.abort_job(original["id"])
        wait(lambda: brief_jobs(self.yt, op.id)["aborted"] == 1, timeout=30)
        wait(lambda: brief_jobs(self.yt, op.id)["running"] == 2, timeout=30)
        wait(lambda: state(self.yt, op.id) == "completed", timeout=90)
        counts = brief_jobs(self.yt, op.id)
        assert (counts["running"], counts["aborted"], counts["completed"], counts["total"]) == (0, 2, 1, 1)

    def test_list_speculative_jobs(self) -> None:
        """``TestListSpeculativeJobs.test_list_speculative_jobs`` (runtime data): two jobs and their two copies are
        two competitions of two jobs each, and ``list_jobs`` filters by ``job_competition_id``."""
        op = self.start("sleep 1000", job_count=2, max_speculative_job_count_per_task=2)
        wait(lambda: len(running_jobs(self.yt, op.id)) == 4, timeout=30)
        jobs = self.yt.list_jobs(op.id)["jobs"]
        assert len(jobs) == 4
        grouped: dict[str, list[str]] = defaultdict(list)
        for job in jobs:
            grouped[job["job_competition_id"]].append(job["id"])
        assert len(grouped) == 2
        for competition_id, members in grouped.items():
            listed = self.yt.list_jobs(op.id, job_competition_id=competition_id)["jobs"]
            assert sorted(job["id"] for job in listed) == sorted(members)
            assert len(members) == 2
        self.yt.complete_operation(op.id)

    def test_with_competitors_flag_in_list_jobs(self) -> None:
        """``TestListSpeculativeJobs.test_with_competitors_flag_in_list_jobs``: with one copy among two jobs (the
        cap is 1 here, YTsaurus's test launches one copy), two jobs have competitors and ``with_competitors``
        lists exactly them."""
        op = self.start("sleep 1000", job_count=2, max_speculative_job_count_per_task=1)
        wait(lambda: len(running_jobs(self.yt, op.id)) == 3, timeout=30)
        jobs = self.yt.list_jobs(op.id)["jobs"]
        assert len(jobs) == 3
        assert len([job for job in jobs if job["has_competitors"]]) == 2
        first, second = self.yt.list_jobs(op.id, with_competitors=True)["jobs"]
        assert first["job_competition_id"] == second["job_competition_id"]
        assert (
            brief_jobs(self.yt, op.id)["pending"] == 0
        )  # the other job's request waits for room under the cap
        self.yt.complete_operation(op.id)
