"""What a job is started with: its environment (``job_environment``), the script its shell runs
(``shell_script``) and its private output files (``private_output``); pure helpers of ``executor.py``'s launch."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pooltree.node.job import JobSpec

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def job_environment(spec: JobSpec, sandbox: Path) -> dict[str, str]:
    """A minimal safe environment, the operation's own variables over it, then the YT_* job identity."""
    env = {
        "PATH": SAFE_PATH,
        "HOME": str(sandbox),
        "TMPDIR": str(sandbox / "tmp"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "SHELL": "/bin/sh",
        "PWD": str(sandbox),
    }
    env.update(spec.environment)
    env.update(
        {
            "YT_JOB_ID": spec.job_id,
            "YT_OPERATION_ID": spec.operation_id,
            "YT_JOB_INDEX": str(spec.job_index),
            "YT_TASK_JOB_INDEX": str(spec.job_index),
            "YT_JOB_COOKIE": str(spec.job_index),
            "YT_TASK_NAME": spec.task_name,
        }
    )
    if spec.memory_limit is not None:
        env["YT_JOB_MEMORY_LIMIT"] = str(int(spec.memory_limit))
    return env


def shell_script(spec: JobSpec) -> str:
    """The script ``/bin/sh -c`` runs: the command, behind a no-op trap for the interruption signal.

    The trap keeps the wrapper shell alive when the signal reaches the whole job, so the job's exit status is
    its command's; programs the shell starts get the default disposition back on exec.
    """
    sig = spec.interruption_signal
    if sig is None:
        return spec.command
    assert isinstance(sig, signal.Signals)
    return f"trap : {sig.name.removeprefix('SIG')}\n{spec.command}"


def private_output(path: Path) -> Any:
    """A new output file only the node's user can read (0600): jobs of other uids never see it."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "wb")


def plain_tmpfs_directories(sandbox: Path, volumes: Iterable[tuple[str, int]]) -> list[Path]:
    """Where the node cannot mount (no bubblewrap, no slot namespace): each tmpfs volume's path made as a plain
    directory of the sandbox, so the job finds it (its size is not enforced, its files count as disk); the
    directories made, for the caller to give to the job's uid."""
    made: list[Path] = []
    for relative, _size in volumes:
        path = sandbox / relative
        for missing in reversed([path, *path.parents]):
            if sandbox in missing.parents and not missing.exists():
                missing.mkdir()
                made.append(missing)
    return made
