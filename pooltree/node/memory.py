"""Memory of a job's whole process tree: a per-job cgroup v2 when the node may create one, else ``/proc``.

Both meters answer the same questions for the executor: how to launch the job so it is tracked, how much memory
the job uses now and at its peak, and which processes belong to it (so every one of them can be killed).

* ``CgroupMeter`` puts each job in ``<parent>/job-<id>``: usage is ``memory.current`` minus reclaimable
  ``inactive_file`` (page cache the kernel drops before it runs out of memory), ``memory.max`` holds
  ``memory_limit`` so the kernel enforces it between samples, and ``memory.events: oom_kill`` reveals that it did.
* ``ProcessTreeMeter`` (still named ``psutil``, the name configs and heartbeats use; it reads ``/proc``
  directly, which is several times cheaper) sums RSS over the job's session (``start_new_session`` makes the
  job's root the session leader) plus every descendant ever seen, and takes each process's ``VmHWM`` (its own
  peak RSS) into the peak, so a short spike of one process between two samples is still counted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pooltree.errors import ConfigError

DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_CGROUP_PARENT = DEFAULT_CGROUP_ROOT / "pooltree"


@dataclass(frozen=True)
class MemorySample:
    """One measurement of a job: bytes in use now, the best known peak so far, the member processes."""

    current: float
    peak: float
    pids: tuple[int, ...]
    limit_hit: bool = False


class JobMemoryMeter(Protocol):
    """What the executor needs from a memory backend."""

    name: str

    def prepare(self, job_id: str, memory_limit: float | None) -> None: ...

    def argv(self, job_id: str, job_argv: list[str]) -> list[str]: ...

    def attach(self, job_id: str, pid: int, keeper: bool = False) -> None: ...

    def sample(self, job_ids: list[str]) -> dict[str, MemorySample]: ...

    def members(self, job_id: str) -> list[int]: ...

    def leftovers(self, job_ids: list[str]) -> dict[str, list[int]]: ...

    def release(self, job_id: str) -> None: ...


@dataclass(frozen=True)
class ProcessEntry:
    """One process as ``/proc/<pid>/stat`` shows it: enough to build the job trees in one pass."""

    ppid: int
    pgid: int
    sid: int
    start_ticks: int  # start time since boot in clock ticks: with the pid, the process's identity
    zombie: bool


def read_process(pid: int) -> ProcessEntry | None:
    """``/proc/<pid>/stat`` of one process; None when it is gone or unreadable."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        # The command name is in parentheses and may hold spaces or ')': the fields start after the last ')'.
        fields = data[data.rindex(b")") + 2 :].split(maxsplit=20)
        return ProcessEntry(
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            sid=int(fields[3]),
            start_ticks=int(fields[19]),
            zombie=fields[0] in (b"Z", b"X"),
        )
    except (OSError, ValueError, IndexError):
        return None


def read_memory(pid: int) -> tuple[int, int] | None:
    """``(VmRSS, VmHWM)`` of a live process in bytes from one read of ``/proc/<pid>/status``; None for a
    zombie or a process that is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    rss = hwm = None
    for line in text.splitlines():
        if line.startswith(b"State:"):
            if line.split()[1:2] in ([b"Z"], [b"X"]):
                return None
        elif line.startswith(b"VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith(b"VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    if rss is None:  # kernel threads and exiting processes have no memory lines
        return None
    return rss, hwm or 0


@dataclass
class _TreeJob:
    root: int
    keeper: bool = False
    known: dict[int, int] = field(default_factory=dict)  # pid -> start ticks, guards against pid reuse
    peak: float = 0.0


class ProcessTreeMeter:
    """Fallback without cgroups: RSS summed over the job's session and all descendants seen.

    The process table is read straight from ``/proc``; one pass serves every job asked about, so a node's
    sampler and its exit sweeps cost one scan each however many jobs they cover. A scan skips the processes
    it already knows to be foreign: one that belongs to no job of this node (not in a job's session, not a
    descendant of a member, not a known member) can never join one later (a session is only entered at
    birth, and a new job's session is new), so only members, newcomers and this process's own children (job
    roots not yet attached) and their descendants are read again. ``/proc/<pid>`` inode numbers tell a reused pid apart.
    """

    name = "psutil"

    def __init__(self) -> None:
        self._jobs: dict[str, _TreeJob] = {}
        self._foreign: dict[int, int] = {}  # pid -> inode of its /proc directory

    def prepare(self, job_id: str, memory_limit: float | None) -> None:
        """Nothing to set up before launch; the session is created by the executor."""

    def argv(self, job_id: str, job_argv: list[str]) -> list[str]:
        return list(job_argv)

    def attach(self, job_id: str, pid: int, keeper: bool = False) -> None:
        """Track the job from its root: the session it leads (the root's pid stays ours until reaped). A
        ``keeper`` root (``keeper.py``: the node's, not the job's) is a member but its memory is not counted."""
        self._jobs[job_id] = _TreeJob(root=pid, keeper=keeper)

    def _scan(self) -> tuple[dict[int, ProcessEntry], dict[int, int]]:
        """The processes that are not known foreigners, and the inode of each one's ``/proc`` directory."""
        table: dict[int, ProcessEntry] = {}
        inodes: dict[int, int] = {}
        foreign: dict[int, int] = {}
        try:
            listing = os.scandir("/proc")
        except OSError:
            return table, inodes
        with listing:
            for item in listing:
                if not item.name.isdigit():
                    continue
                pid = int(item.name)
                inode = item.inode()
                if self._foreign.get(pid) == inode:
                    foreign[pid] = inode
                    continue
                entry = read_process(pid)
                if entry is not None:
                    table[pid] = entry
                    inodes[pid] = inode
        self._foreign = foreign  # foreigners that exited are forgotten
        return table, inodes

    def _collect(self, job_ids: list[str]) -> dict[str, list[tuple[int, ProcessEntry]]]:
        """Current member processes of each job: session members, known pids still alive, and all their
        descendants. One pass over the process table serves every job."""
        if not any(job_id in self._jobs for job_id in job_ids):
            return {}
        table, inodes = self._scan()
        children: dict[int, list[int]] = {}
        sessions: dict[int, list[int]] = {}
        for pid, entry in table.items():
            children.setdefault(entry.ppid, []).append(pid)
            sessions.setdefault(entry.sid, []).append(pid)
        members_of: dict[str, set[int]] = {}
        for job_id, job in list(self._jobs.items()):  # every job, so that foreigners are told apart
            seeds = list(sessions.get(job.root, ()))
            for pid, started in list(job.known.items()):
                entry = table.get(pid)
                if entry is not None and entry.start_ticks == started:
                    seeds.append(pid)
                else:
                    job.known.pop(pid, None)
            members: set[int] = set()
            stack = seeds
            while stack:
                pid = stack.pop()
                if pid in members or pid not in table:
                    continue
                members.add(pid)
                stack.extend(children.get(pid, ()))
            for pid in members:
                job.known.setdefault(pid, table[pid].start_ticks)
            members_of[job_id] = members
        ours = set().union(*members_of.values()) if members_of else set()
        me = os.getpid()
        launching = {pid for pid, entry in table.items() if entry.ppid == me}  # roots maybe not attached yet
        below: set[int] = (
            set()
        )  # and whatever runs below them (a pre-started sandbox waits for its job there)
        stack = list(launching)
        while stack:
            pid = stack.pop()
            if pid not in below:
                below.add(pid)
                stack.extend(children.get(pid, ()))
        for pid, entry in table.items():
            if pid not in ours and pid not in below and entry.sid not in launching:
                self._foreign[pid] = inodes[pid]
        return {
            job_id: [(pid, table[pid]) for pid in sorted(members_of[job_id])]
            for job_id in job_ids
            if job_id in members_of
        }

    def sample(self, job_ids: list[str]) -> dict[str, MemorySample]:
        out: dict[str, MemorySample] = {}
        for job_id, procs in self._collect(job_ids).items():
            current = 0.0
            largest_hwm = 0.0
            pids: list[int] = []
            job = self._jobs.get(job_id)
            for pid, entry in procs:
                if entry.zombie or (job is not None and job.keeper and pid == job.root):
                    continue
                memory = read_memory(pid)
                if memory is None:
                    continue
                rss, hwm = memory
                current += rss
                pids.append(pid)
                largest_hwm = max(largest_hwm, hwm)
            if job is None:  # released meanwhile
                continue
            job.peak = max(job.peak, current, largest_hwm)
            out[job_id] = MemorySample(current=current, peak=job.peak, pids=tuple(pids))
        return out

    def members(self, job_id: str) -> list[int]:
        return [pid for pid, _ in self._collect([job_id]).get(job_id, [])]

    def leftovers(self, job_ids: list[str]) -> dict[str, list[int]]:
        """Processes of each job that are still alive (zombies excluded), from one scan for all of them."""
        return {
            job_id: [pid for pid, entry in procs if not entry.zombie]
            for job_id, procs in self._collect(job_ids).items()
        }

    def release(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _read_keyed(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                out[parts[0]] = int(parts[1])
    except OSError:
        pass
    return out


def probe_cgroup_v2(parent: Path = DEFAULT_CGROUP_PARENT) -> str | None:
    """Why per-job cgroup v2 memory accounting is unusable under ``parent``, or None when it works.

    Checks that the hierarchy offers the memory controller, that ``parent`` exists or can be created, that
    memory can be enabled for its children, and that a probe child really gets ``memory.current``.
    """
    hierarchy = parent.parent
    controllers = hierarchy / "cgroup.controllers"
    try:
        offered = controllers.read_text().split()
    except OSError as error:
        return f"no cgroup v2 hierarchy at {hierarchy} ({error.strerror or error})"
    if "memory" not in offered:
        return f"{controllers} does not offer the memory controller"
    try:
        parent.mkdir(exist_ok=True)
        subtree = parent / "cgroup.subtree_control"
        if "memory" not in subtree.read_text().split():
            subtree.write_text("+memory")
    except OSError as error:
        return f"cannot enable the memory controller under {parent} ({error.strerror or error})"
    probe = parent / f"probe-{os.getpid()}"
    try:
        probe.mkdir(exist_ok=True)
    except OSError as error:
        return f"cannot create a child cgroup under {parent} ({error.strerror or error})"
    try:
        if not (probe / "memory.current").exists():
            return f"child cgroups under {parent} have no memory.current"
        return None
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


class CgroupMeter:
    """Per-job cgroup v2 under a delegated parent: exact tree accounting and kernel-enforced memory_limit."""

    name = "cgroup_v2"

    def __init__(self, parent: Path = DEFAULT_CGROUP_PARENT):
        self.parent = parent
        self._peaks: dict[str, float] = {}

    def _path(self, job_id: str) -> Path:
        return self.parent / f"job-{job_id}"

    def prepare(self, job_id: str, memory_limit: float | None) -> None:
        path = self._path(job_id)
        path.mkdir(exist_ok=True)
        if memory_limit is not None:
            (path / "memory.max").write_text(str(int(memory_limit)))
        with contextlib.suppress(OSError):
            (path / "memory.swap.max").write_text("0")
        self._peaks[job_id] = 0.0

    def argv(self, job_id: str, job_argv: list[str]) -> list[str]:
        # The wrapper shell moves itself into the job's cgroup (as the node's user, before any sandbox or uid
        # switch), then execs the job's argv: every process of the job is born inside the cgroup.
        procs = str(self._path(job_id) / "cgroup.procs")
        return ["/bin/sh", "-c", 'echo 0 > "$0" || exit 125; shift; exec "$@"', procs, "--", *job_argv]

    def attach(self, job_id: str, pid: int, keeper: bool = False) -> None:
        """The wrapper joins the cgroup itself (below the keeper, which stays outside); nothing to do here."""

    def sample(self, job_ids: list[str]) -> dict[str, MemorySample]:
        out: dict[str, MemorySample] = {}
        for job_id in job_ids:
            path = self._path(job_id)
            current = _read_int(path / "memory.current") or 0
            inactive_file = _read_keyed(path / "memory.stat").get("inactive_file", 0)
            working_set = max(current - inactive_file, 0)
            self._peaks[job_id] = max(self._peaks.get(job_id, 0.0), float(working_set))
            oom_kills = _read_keyed(path / "memory.events").get("oom_kill", 0)
            out[job_id] = MemorySample(
                current=float(working_set),
                peak=self._peaks[job_id],
                pids=tuple(self.members(job_id)),
                limit_hit=oom_kills > 0,
            )
        return out

    def members(self, job_id: str) -> list[int]:
        try:
            text = (self._path(job_id) / "cgroup.procs").read_text()
        except OSError:
            return []
        return sorted(int(line) for line in text.split() if line.isdigit())

    def leftovers(self, job_ids: list[str]) -> dict[str, list[int]]:
        """Processes still in each job's cgroup (the kernel drops them from ``cgroup.procs`` as they exit)."""
        out: dict[str, list[int]] = {}
        for job_id in job_ids:
            alive = []
            for pid in self.members(job_id):
                entry = read_process(pid)
                if entry is not None and not entry.zombie:
                    alive.append(pid)
            out[job_id] = alive
        return out

    def release(self, job_id: str) -> None:
        path = self._path(job_id)
        with contextlib.suppress(OSError):
            (path / "cgroup.kill").write_text("1")
        for _ in range(50):
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                for pid in self.members(job_id):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)
        self._peaks.pop(job_id, None)


def make_meter(mode: str = "auto", cgroup_parent: Path = DEFAULT_CGROUP_PARENT) -> tuple[JobMemoryMeter, str]:
    """The memory meter for ``mode`` (``auto``, ``cgroup``, ``psutil``) and a sentence on why it was chosen."""
    if mode not in ("auto", "cgroup", "psutil"):
        raise ConfigError("memory_meter", f"unknown mode {mode!r}; use auto, cgroup or psutil")
    if mode == "psutil":
        return ProcessTreeMeter(), "psutil requested"
    reason = probe_cgroup_v2(cgroup_parent)
    if reason is None:
        return CgroupMeter(cgroup_parent), f"cgroup v2 under {cgroup_parent}"
    if mode == "cgroup":
        raise ConfigError("memory_meter", f"cgroup v2 is unavailable: {reason}")
    return ProcessTreeMeter(), f"psutil fallback: {reason}"
