"""The executor's record of one running job (``RunningJob``) and of a decision taken before its process exits
(``Verdict``): plain data shared by the executor's rooms (``executor.py``, ``signalling.py``, ``enforcement.py``)."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pooltree.node.job import JobResult, JobSpec, JobState
from pooltree.node.memory import MemorySample
from pooltree.node.slots import SandboxSlot
from pooltree.node.user_statistics import StatisticsFile
from pooltree.node.zygotes import KeeperProcess


@dataclass
class Verdict:
    """A decision taken before the process exits (kill for memory, abort, interruption timeout)."""

    state: JobState
    error: dict
    abort_reason: str | None = None


@dataclass
class RunningJob:
    """The executor's bookkeeping for one running job."""

    spec: JobSpec
    directory: Path
    sandbox: Path
    start_time: float
    start_mono: float
    process: KeeperProcess | None = None
    phase: str = "running"
    verdict: Verdict | None = None
    interruption_reason: str | None = None
    interrupted_pids: list[int] = field(default_factory=list)
    """The processes the interruption signal was sent to: an interruption that times out names what it left."""
    memory: MemorySample | None = None
    max_memory: float = 0.0
    job_proxy_max_memory: float = 0.0
    exit_mono: float | None = None
    sandbox_slot: SandboxSlot | None = None
    """The slot the job runs in (``slots.py``); None for a job in a bubblewrap of its own or unsandboxed."""
    supervisor: asyncio.Task | None = None
    killer: asyncio.Task | None = None
    user_statistics: StatisticsFile = field(default_factory=StatisticsFile)
    """What the job wrote to descriptor 5 (``user_statistics.py``), parsed again only when it grew."""
    done: asyncio.Future[JobResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    launched: asyncio.Future[int | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


def bookkeeping_bytes(job: RunningJob) -> int:
    """The executor-side memory for one job: its record and the objects it holds directly."""
    return sys.getsizeof(job) + sum(sys.getsizeof(value) for value in vars(job).values())
