"""A gang operation end to end: the official client, a real scheduler and two real nodes (issue 14).

A vanilla task with ``gang_options``: aborting one job (``yt abort-job``) switches the operation to a new
incarnation, so the other job is aborted with ``operation_incarnation_changed`` and restarted in its own
allocation on its node; the aborted job runs again too. Jobs see YTsaurus's gang environment.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent))
from polling import wait_for
from test_live_service import Cluster


def test_aborting_one_gang_job_restarts_the_other_in_its_allocation(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, nodes=2, slots=1)
    try:
        client = cluster.client()
        # the first incarnation's jobs wait; the next one's finish at once, so the operation completes
        command = (
            "echo incarnation=$YT_OPERATION_INCARNATION rank=$YT_GANG_RANK >&2; "
            'if [ "$YT_OPERATION_INCARNATION" = 0 ]; then sleep 60; fi'
        )
        spec = (
            ytw.VanillaSpecBuilder()
            .begin_task("main")
            .command(command)
            .job_count(2)
            .spec({"gang_options": {}})
            .end_task()
        )
        op = client.run_operation(spec, sync=False)

        def listed(state: str, count: int) -> list[dict]:
            jobs = client.list_jobs(op.id, job_state=state)["jobs"]
            return jobs if len(jobs) == count else []

        first = wait_for(lambda: listed("running", 2))
        victim, other = first
        cluster.cli("abort-job", victim["id"])
        aborted = wait_for(lambda: listed("aborted", 2))
        reasons = {job["id"]: job["abort_reason"] for job in aborted}
        assert reasons == {victim["id"]: "user_request", other["id"]: "operation_incarnation_changed"}
        op.wait(timeout=60_000)
        done = client.list_jobs(op.id, job_state="completed")["jobs"]
        assert len(done) == 2 and not {job["id"] for job in done} & {victim["id"], other["id"]}
        # the other job started again on its node (its allocation was kept)
        assert other["address"] in {job["address"] for job in done}
        ranks = set()
        for job in done:
            stderr = wait_for(lambda job=job: client.get_job_stderr(op.id, job["id"]).read())
            assert stderr.startswith(b"incarnation=1 rank="), stderr
            ranks.add(stderr.strip().split(b"rank=")[1])
        assert ranks == {b"0", b"1"}
    finally:
        cluster.close()
