"""Jobs die with their node (issue 13), at the worst moment too: the node process is SIGKILLed right after it
launched its jobs, while bubblewrap is still setting the sandboxes up. bwrap's ``--die-with-parent`` calls
``prctl(PR_SET_PDEATHSIG)`` only after ``exec`` (the monitor) and after the namespace's setup (its pid 1); a node
that died before that left the job running, every time. Each job's keeper watches a pipe from the node instead
(EOF when the node dies, whenever it dies) and kills the job's whole subtree."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from polling import wait_for
from process_table import processes_with

NODE = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from pathlib import Path
    from pooltree.node import JobExecutor, JobSpec

    async def main() -> None:
        root, isolation, command, jobs = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
        executor = JobExecutor(root, memory_meter="psutil", isolation=isolation)
        for index in range(jobs):
            await executor.start(JobSpec(job_id=f"job-{index}", operation_id="op", command=command))
        for index in range(jobs):
            assert await executor.wait_running(f"job-{index}", 60) is not None
        print("launched", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the node dies as its jobs' sandboxes are being set up

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_jobs_of_a_node_killed_while_launching_them_do_not_survive(tmp_path: Path, isolation: str) -> None:
    marker = f"{300 + random.random() * 60:.6f}"  # a sleep duration no other process on the host uses
    command = f"(setsid sleep {marker} &) ; sleep {marker}"  # a daemon in its own session, and a child
    node = subprocess.run(
        [sys.executable, "-c", NODE, str(tmp_path / "slots"), isolation, command, "4"],
        capture_output=True,
        timeout=120,
    )
    assert node.returncode == -signal.SIGKILL, node.stderr.decode()
    assert b"launched" in node.stdout
    try:
        wait_for(lambda: not processes_with(marker), timeout=20)
    finally:
        for pid in processes_with(marker):  # leave nothing running whatever the verdict
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
