"""Signals to a running job's processes, and killing all of them: the executor's only way to touch them.

A catchable signal (interruption, SIGTERM on abort) goes once to each process of the job but its wrappers (the
keeper, bubblewrap's monitor and pid 1); SIGKILL goes to the job's process group, then to members that left it.
``kill_tree`` repeats SIGKILL until nothing of the job is left (bounded)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable

from pooltree.node.isolation import JobIsolation
from pooltree.node.memory import JobMemoryMeter, read_process
from pooltree.node.running import RunningJob

KILL_ROUND = 0.02
"""Seconds between two SIGKILL rounds of ``kill_tree``."""


def send(pid: int, sig: signal.Signals, *, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


class JobSignals:
    """Signals for the executor's jobs; ``meter`` gives the node's memory meter (it lists a job's members)."""

    def __init__(self, meter: Callable[[], JobMemoryMeter], isolation: JobIsolation) -> None:
        self._meter = meter
        self.isolation = isolation

    def signal(self, job: RunningJob, sig: signal.Signals, members: list[int] | None = None) -> list[int]:
        """Deliver ``sig`` once to every process of the job: its process group, then members that left it.

        A process must not get the signal twice: a program that handles the first interruption signal and
        starts exiting restores the default disposition, and a second copy would kill it (exit 130).
        ``members`` saves a scan when the caller has just listed them. Returns the pids a catchable signal was
        sent to (empty for SIGKILL, which goes to the group).
        """
        if sig != signal.SIGKILL:
            return self._signal_inside(job, sig, members)
        group = None
        if job.process is not None and job.process.returncode is None:
            group = job.process.pid
            send(group, sig, group=True)
        for pid in self._meter().members(job.spec.job_id) if members is None else members:
            if group is not None and process_group(pid) == group:
                continue
            send(pid, sig, group=False)
        return []

    def _signal_inside(self, job: RunningJob, sig: signal.Signals, members: list[int] | None) -> list[int]:
        """A catchable signal: to every process of the job but its wrappers -- the keeper (it would only ignore
        it) and, under a sandbox, bubblewrap's monitor (it would die of it and take the job down with SIGKILL)
        and pid 1 of the namespace (it ignores it) -- each process once."""
        if job.process is None or job.process.returncode is not None:
            return []
        wrappers = {job.process.pid}
        entries = {
            pid: read_process(pid)
            for pid in (self._meter().members(job.spec.job_id) if members is None else members)
        }
        depth = (
            0 if job.sandbox_slot is not None else self.isolation.wrapper_depth
        )  # a slot's: the keeper only
        for _ in range(depth):  # the wrapper chain, one generation at a time
            wrappers |= {
                pid for pid, entry in entries.items() if entry is not None and entry.ppid in wrappers
            }
        sent = [pid for pid, entry in entries.items() if entry is not None and pid not in wrappers]
        for pid in sent:
            send(pid, sig, group=False)
        return sent

    async def kill_tree(self, job: RunningJob, rounds: int = 100) -> None:
        """SIGKILL the job's group and members until none is left (bounded: ``rounds`` × 20 ms)."""
        for _ in range(rounds):
            alive = self.live_members(job)
            if not alive:
                return
            self.signal(job, signal.SIGKILL, alive)
            await asyncio.sleep(KILL_ROUND)

    def still_running(self, job: RunningJob, signalled: list[int]) -> list[str]:
        """The job's live processes but the keeper, each as ``PID NAME (STATE, signalled or not)``: what an
        interruption that timed out left running, for its abort error (one scan)."""
        keeper = None if job.process is None else job.process.pid
        described = []
        for pid in self.live_members(job):
            if pid != keeper:
                name, state = _name_and_state(pid)
                described.append(
                    f"{pid} {name} ({state}, {'signalled' if pid in signalled else 'not signalled'})"
                )
        return described

    def live_members(self, job: RunningJob) -> list[int]:
        """The job's processes that are not zombies yet (one scan), with the root while it is unreaped."""
        alive = self._meter().leftovers([job.spec.job_id]).get(job.spec.job_id, [])
        if job.process is not None and job.process.returncode is None and job.process.pid not in alive:
            alive.append(job.process.pid)
        return alive


def _name_and_state(pid: int) -> tuple[str, str]:
    """The Name and State lines of ``/proc/<pid>/status`` (one read): ``("python3", "S (sleeping)")``; ``"?"`` and
    ``"gone"`` once the process has exited."""
    fields: dict[bytes, str] = {}
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                key, _, value = line.partition(b":")
                if key in (b"Name", b"State"):
                    fields[key] = value.decode(errors="replace").strip()
                    if len(fields) == 2:
                        break
    except OSError:
        pass
    return fields.get(b"Name") or "?", fields.get(b"State", "gone")
