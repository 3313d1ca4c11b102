"""``pooltree local`` never makes nodes that can run nothing (issue 26): with more nodes than cpus (4 nodes on the
2-cpu test machines) each node still claims one cpu, start-up says the cpus are overcommitted, and a job of the
default 1 cpu runs to completion on every node. Before, each node got 0.5 cpu, below the tree's minimum free cpu
per node: the default job failed after 11 s and a 0.25-cpu job waited forever."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from live_procs import Procs, client, yt_cli
from polling import wait_for


def test_four_nodes_run_the_default_job_on_any_machine(tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    try:
        process = procs.spawn(
            "local", "--nodes", "4", "--data", str(tmp_path / "data"), "--memory-meter", "psutil"
        )
        url = procs.read_until(process, "scheduler at ").split("scheduler at ", 1)[1].split()[0]
        each = procs.read_until(process, "each node:")
        assert "cpu=1," in each or (os.cpu_count() or 1) >= 8, each
        if (os.cpu_count() or 1) < 4:
            assert "more than this machine has" in procs.read_until(process, "note:")
        token = (tmp_path / "data" / "token").read_text().strip()
        yt = client(url, token)
        wait_for(lambda: len(yt.get("//sys/scheduler/orchid/scheduler/nodes")) == 4, timeout=60)
        result = yt_cli(
            url, tmp_path, "vanilla", "--tasks", '{main={command="echo ran >&2"; job_count=4}}',
            token=token, timeout=120,
        )  # fmt: skip
        assert "completed" in result.stderr
        (op,) = yt.list_operations(state="completed")["operations"]
        jobs = yt.list_jobs(op["id"])["jobs"]
        assert len(jobs) == 4 and {job["state"] for job in jobs} == {"completed"}
    finally:
        procs.close()
