"""Helpers for node tests: run a coroutine with a hard time bound, python one-liners as job commands."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import psutil
from job_python import JOB_PYTHON

from pooltree.node import JobExecutor, JobSpec

T = TypeVar("T")
MiB = 1024 * 1024


def run(coro: Awaitable[T], timeout: float = 20.0) -> T:
    """Run ``coro`` in a fresh event loop, failing the test after ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def py(code: str) -> str:
    """A shell command running ``code`` with this interpreter."""
    return f"{shlex.quote(JOB_PYTHON)} -c {shlex.quote(code)}"


def allocate(mib: int, hold: float) -> str:
    """A job command that touches ``mib`` MiB, says ``allocated`` and holds the memory for ``hold`` seconds."""
    return py(
        f"import time; b = bytearray(b'x') * ({mib} * 1024 * 1024); print('allocated', flush=True); time.sleep({hold})"
    )


async def wait_for_output(executor, job_id: str, text: bytes, timeout: float = 10.0) -> None:
    """Poll the job's stdout until ``text`` appears (bounded in time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while text not in executor.stdout(job_id):
        if loop.time() > deadline:
            raise AssertionError(f"job {job_id} did not print {text!r} within {timeout} s")
        await asyncio.sleep(0.02)


def spec(job_id: str, command: str, operation_id: str = "op-1", **kwargs: Any) -> JobSpec:
    """A job spec of operation ``operation_id`` running ``command``."""
    return JobSpec(job_id=job_id, operation_id=operation_id, command=command, **kwargs)


def executor(tmp_path: Path, **kwargs: Any) -> JobExecutor:
    """An executor under ``tmp_path/slots`` sampling memory every 50 ms with the portable meter."""
    kwargs.setdefault("memory_sample_period", 0.05)
    kwargs.setdefault("memory_meter", "psutil")
    return JobExecutor(tmp_path / "slots", **kwargs)


def gone(pid: int) -> bool:
    """The process has exited (no such process, or a zombie not yet reaped)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
