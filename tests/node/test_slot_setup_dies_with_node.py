"""A slot's setup dies with its node (issue 26): the bubblewrap that makes a slot's mount namespace (``slots.py``)
is the node's only process that is not a job's; a node killed with -9 while it ran must not leave it behind.

After a CI run a system bubblewrap 0.8.0 of such a setup was found reparented to init, asleep on its event
descriptors, with no child: its ``--die-with-parent`` had not ended it, and the node (which started it in a
session of its own) was gone. Here the setup's ``bwrap`` is a wrapper that stops itself before it execs the
real one, so the node is held in that phase for certain and the setup process cannot end by itself, as that
bubblewrap could not; the node is then killed with -9, and nothing of the setup may be left."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from polling import wait_for
from process_table import describe, processes_with

from pooltree.node.bubblewrap import find_bubblewrap

BWRAP = find_bubblewrap().found

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or BWRAP is None, reason="slots need a root node with a working bubblewrap"
)

NODE = textwrap.dedent(
    """
    import asyncio, os, sys
    from pathlib import Path
    from pooltree.node import JobExecutor, JobSpec
    from pooltree.node.isolation import JobIsolation

    async def main() -> None:
        root = Path(sys.argv[1])
        isolation = JobIsolation(root, mode="sandbox")
        isolation.bwrap = os.environ["SETUP_BWRAP"]  # the setup's bubblewrap: the stopping wrapper
        executor = JobExecutor(root, memory_meter="psutil", isolation=isolation)
        assert executor.sandbox_slots
        await executor.start(JobSpec(job_id="job-0", operation_id="op", command="true"))
        print("started", flush=True)
        await asyncio.sleep(120)  # the slot's setup never finishes: the test kills the node meanwhile

    asyncio.run(main())
    """
)


def _stopped(pids: list[int]) -> list[int]:
    found = []
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
            if stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"T":
                found.append(pid)
    return found


def test_kill_9_of_a_node_setting_a_slot_up_leaves_no_setup_process(tmp_path: Path) -> None:
    assert BWRAP is not None
    wrapper = tmp_path / "stopping-bwrap"
    wrapper.write_text(f'#!/bin/sh\nkill -STOP $$\nexec {BWRAP.path} "$@"\n')
    wrapper.chmod(0o755)
    marker = str(wrapper)  # in the command line of the setup process only (the node gets it by environment)
    node = subprocess.Popen(
        [sys.executable, "-c", NODE, str(tmp_path / "slots")],
        env={**os.environ, "SETUP_BWRAP": marker},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: _stopped(processes_with(marker)), timeout=60)  # the node is in the slot's setup
        before = describe(processes_with(marker))
        node.kill()
        node.wait(10)
        try:
            wait_for(lambda: not processes_with(marker), timeout=20)
        except AssertionError:
            raise AssertionError(
                f"the slot's setup outlived its node: {describe(processes_with(marker))}; before: {before}"
            ) from None
    finally:
        if node.poll() is None:
            node.kill()
            node.wait(10)
        for pid in processes_with(marker):  # leave nothing behind whatever the verdict
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for stream in (node.stdout, node.stderr):
            if stream is not None:
                stream.close()
