"""The job keeper (``pooltree/node/keeper.py``) on its own: the job's status comes through unchanged, what the job
leaves behind dies with it, and everything below the keeper dies when the node's end of the lifeline closes."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from polling import wait_for
from process_table import processes_with

from pooltree.node.keeper import KEEPER_EXIT_NODE_GONE, keeper_argv


@pytest.fixture
def lifeline() -> Iterator[tuple[int, int]]:
    """A pipe as the executor holds it: (read end for the keeper, write end for the 'node')."""
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        with contextlib.suppress(OSError):
            os.close(fd)


def _keeper(read: int, command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        keeper_argv(read, ["/bin/sh", "-c", command]), pass_fds=(read,), start_new_session=True
    )


def _marker() -> str:
    return f"{300 + random.random() * 60:.6f}"  # a sleep duration no other process on the host uses


def _kill_all(marker: str) -> None:
    for pid in processes_with(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_the_jobs_exit_status_and_signal_come_through(lifeline: tuple[int, int]) -> None:
    read, _ = lifeline
    assert _keeper(read, "exit 3").wait(30) == 3
    assert _keeper(read, "kill -TERM $$").wait(30) == -signal.SIGTERM


def test_what_the_job_left_behind_is_gone_when_the_keeper_exits(lifeline: tuple[int, int]) -> None:
    read, _ = lifeline
    marker = _marker()
    try:
        keeper = _keeper(read, f"(setsid sleep {marker} &) ; sleep {marker} & echo started")
        assert keeper.wait(30) == 0
        assert processes_with(marker) == [], "the keeper exits only once every process of the job is gone"
    finally:
        _kill_all(marker)


def test_closing_the_lifeline_kills_the_whole_subtree(lifeline: tuple[int, int]) -> None:
    read, write = lifeline
    marker = _marker()
    try:
        keeper = _keeper(read, f"(setsid sleep {marker} &) ; sleep {marker}")
        wait_for(lambda: len(processes_with(marker)) >= 3, timeout=30)  # keeper, sh, and the sleeps
        os.close(write)  # what the kernel does when the node dies
        assert keeper.wait(30) == KEEPER_EXIT_NODE_GONE
        assert processes_with(marker) == []
    finally:
        _kill_all(marker)


def test_a_keeper_started_after_the_node_died_never_starts_the_job(
    lifeline: tuple[int, int], tmp_path: Path
) -> None:
    read, write = lifeline
    os.close(write)
    flag = tmp_path / "ran"
    assert _keeper(read, f"touch {flag}").wait(30) == KEEPER_EXIT_NODE_GONE
    assert not flag.exists()
