"""Runs ``pooltree fair-share`` for the CLI tests: in this process through typer's runner, or as a real process.

Most tests run the command in-process (``run_fair_share``): a ``python -m pooltree.cli`` process spends about a
second of CPU importing the CLI (numpy, the fair-share core, the server modules the other commands register)
before it does anything, and with the 2 cores of the test machine shared by load average 10-48 a 60 s bound on
each of two dozen such processes was not always enough (the subprocess test that timed out). In-process the
imports are paid once per session; the command, its exit code and its stdout/stderr are the same, and an
unexpected exception is raised into the test (it would have been a traceback). ``run_fair_share_process`` keeps
the real ``python -m pooltree.cli`` path for the tests about the entry point and piped output.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from pooltree.cli import app

ROOT = Path(__file__).resolve().parents[2]
PROCESS_TIMEOUT = 300.0
"""The bound on one ``python -m pooltree.cli`` process (about a second of CPU; minutes only on a starved host)."""


def _environment(wide_console: bool) -> dict[str, str | None]:
    """COLUMNS=250 (``wide_console``), or no COLUMNS at all, as output piped from a shell would run."""
    return {"COLUMNS": "250" if wide_console else None}


def run_fair_share(*args: str, wide_console: bool = True) -> subprocess.CompletedProcess[str]:
    """``pooltree fair-share ARGS`` from the repo root, in this process."""
    with contextlib.chdir(ROOT):
        result = CliRunner().invoke(
            app, ["fair-share", *args], env=_environment(wide_console), catch_exceptions=False
        )
    return subprocess.CompletedProcess(["fair-share", *args], result.exit_code, result.stdout, result.stderr)


def run_fair_share_process(*args: str, wide_console: bool = True) -> subprocess.CompletedProcess[str]:
    """``python -m pooltree.cli fair-share ARGS`` from the repo root as a real process, bounded in time."""
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    env.update({key: value for key, value in _environment(wide_console).items() if value is not None})
    return subprocess.run(
        [sys.executable, "-m", "pooltree.cli", "fair-share", *args],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
    )
