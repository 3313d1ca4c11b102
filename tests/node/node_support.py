"""Helpers for node tests: run a coroutine with a hard time bound, python one-liners as job commands."""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")
MiB = 1024 * 1024


def run(coro: Awaitable[T], timeout: float = 20.0) -> T:
    """Run ``coro`` in a fresh event loop, failing the test after ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def py(code: str) -> str:
    """A shell command running ``code`` with this interpreter."""
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


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
