"""A slow live job's speculative copy wins (real scheduler, two real nodes, the official client).

The job sleeps for ten minutes when it runs on the node ``slow-node`` (its sandbox lives under that node's root)
and ends at once anywhere else. The operation sets ``job_speculation_timeout``: the scheduler asks for a copy once
the job has run a second, the copy starts on ``fast-node`` (the slow node has one slot) and completes; the original
is aborted with ``speculative_run_won`` and its processes end. The job is counted completed once; both jobs carry the original's id as ``job_competition_id``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).parent))
from live_procs import ORCHID, Procs, client, vanilla
from polling import wait_for

COMMAND = 'case "$(pwd)" in */slow-node/*) sleep 600;; esac; echo done >&2'


def _processes_under(root: Path) -> list[int]:
    prefix = str(root.resolve())
    found = []
    for proc in psutil.process_iter(["pid", "cwd"]):
        if (proc.info.get("cwd") or "").startswith(prefix):
            found.append(proc.pid)
    return found


def test_a_slow_jobs_speculative_copy_wins_and_the_original_is_aborted(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        _, url = procs.scheduler(tmp_path / "data", 0)
        procs.node(url, "slow-node", "user_slots=1,cpu=1,memory=2Gi")
        yt = client(url)
        slots = f"{ORCHID}/default/resource_limits/user_slots"
        wait_for(lambda: yt.exists(slots) and yt.get(slots) == 1, timeout=30)
        operation = yt.run_operation(vanilla(COMMAND, 1, job_speculation_timeout=1000), sync=False)
        op_id = operation.id

        def jobs() -> list[dict]:
            return yt.list_jobs(op_id)["jobs"]

        [original] = wait_for(lambda: [j for j in jobs() if j["state"] == "running"], timeout=30)
        assert original["address"] == "slow-node"
        # past the timeout the copy is demand the slow node cannot take: it waits for another node
        wait_for(lambda: yt.get_operation(op_id, attributes=["brief_progress"])["brief_progress"]["jobs"]["pending"] == 1, timeout=30)  # fmt: skip
        procs.node(url, "fast-node", "user_slots=1,cpu=1,memory=2Gi")
        wait_for(lambda: yt.get_operation(op_id, attributes=["state"])["state"] == "completed", timeout=60)

        final = {job["id"]: job for job in jobs()}
        assert len(final) == 2
        copy = next(job for job in final.values() if job["id"] != original["id"])
        assert (copy["address"], copy["state"]) == ("fast-node", "completed")
        lost = final[original["id"]]
        assert (lost["state"], lost.get("abort_reason")) == ("aborted", "speculative_run_won")
        assert yt.get_job_stderr(op_id, copy["id"]).read().decode() == "done\n"
        # YTsaurus's competition attributes and list_jobs filters
        assert {job["job_competition_id"] for job in final.values()} == {original["id"]}
        assert all(job["has_competitors"] for job in final.values())
        assert len(yt.list_jobs(op_id, job_competition_id=original["id"])["jobs"]) == 2
        assert yt.list_jobs(op_id, with_competitors=False)["jobs"] == []
        counts = yt.get_operation(op_id, attributes=["brief_progress"])["brief_progress"]["jobs"]
        assert (counts["completed"], counts["aborted"], counts["total"]) == (1, 1, 1)  # counted once
        # the original's processes were stopped by its node
        wait_for(lambda: not _processes_under(tmp_path / "nodes" / "slow-node"), timeout=30)
    finally:
        procs.close()
