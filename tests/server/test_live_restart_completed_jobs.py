"""``restart_completed_jobs`` through the official client (YTsaurus's ``test_restart_completed_jobs``): a vanilla
task whose jobs complete runs them again, counted lost, until the user completes the operation."""

from __future__ import annotations

import sys
from pathlib import Path

import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import Cluster, wait_for


def test_completed_jobs_run_again_until_the_operation_is_completed(cluster: Cluster) -> None:
    client = cluster.client()
    task = {"command": "echo ran >&2", "job_count": 1, "restart_completed_jobs": True}
    op = client.run_operation(ytw.VanillaSpecBuilder().task("service", task), sync=False)

    def lost() -> int:
        return client.get_operation(op.id)["progress"]["jobs"]["lost"]

    wait_for(lambda: lost() >= 3, timeout=120)
    assert client.get_operation(op.id)["state"] == "running"
    finished = [job for job in client.list_jobs(op.id)["jobs"] if job["state"] == "completed"]
    assert len(finished) >= 3 and len({job["id"] for job in finished}) == len(finished)
    client.complete_operation(op.id)
    wait_for(lambda: client.get_operation(op.id)["state"] == "completed", timeout=60)
    assert "unsupported_options" not in client.get_operation(op.id)["alerts"]
