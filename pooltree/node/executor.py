"""The exec-node job executor: each job a real process group in its own sandbox, measured and policed.

``JobExecutor`` starts ``/bin/sh -c <command>`` in a new session (so the job's process group and session are
its own), with stdout/stderr written to files next to the job's sandbox. One sampler task measures every
running job's process tree each ``memory_sample_period`` seconds and hands the numbers to the node memory
arbitration (a pure policy): jobs above ``memory_limit`` fail with "Memory limit exceeded", and on an
overdrafted node jobs above their reserve are aborted with ``resource_overdraft``. ``interrupt`` delivers the
operation's ``interruption_signal`` and kills the job if it does not finish within the timeout; ``abort`` sends
SIGTERM, then SIGKILL after a short grace. Every path ends by killing whatever is left of the job's processes.

Per-job costs are kept off the event loop (heartbeats and the other jobs share it):

* ``start`` only registers the job; the sandbox, the output files and the fork run on launcher threads
  (``wait_running`` waits for them). An abort or interruption that arrives first is applied once the process
  exists.
* The exit is noticed through a pidfd on the loop. The job's process group is SIGKILLed while the root is still
  an unreaped zombie (until it is reaped, its pid, and so the group id, cannot belong to anyone else), then one
  scan of the process table per batch of exits finds members that left the group; only if some are alive does
  the executor fall back to killing round by round.
* Deleting a directory costs milliseconds of disk latency: a finished sandbox (before its result is published)
  and a forgotten job's directory are renamed into ``<root>/.trash`` and deleted by background threads.

``job_proxy/max_memory`` is the size of the executor's own bookkeeping for the job (its record, measured with
``sys.getsizeof``); the shared interpreter is not split between jobs, and there is no separate proxy process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pooltree.errors import ConfigError, PooltreeError
from pooltree.node.arbitration import OverdraftPolicy, arbitrate_node_memory
from pooltree.node.enforcement import memory_verdicts
from pooltree.node.files import BlobSource, outputs_within_limit, truncate_output
from pooltree.node.gpu import (
    DEFAULT_WAITING_TIMEOUT,
    WAITING_TIMEOUT_REASON,
    GpuSlots,
    WaitingTimeout,
    gpu_demand,
    gpu_environment,
)
from pooltree.node.isolation import JobIsolation
from pooltree.node.job import (
    JOB_START_FAILED,
    JobResult,
    JobSpec,
    JobState,
    MemoryTrack,
    abort_error,
    exit_error,
    job_statistics,
    memory_limit_error,
    yt_error,
)
from pooltree.node.launcher import JobLauncher
from pooltree.node.memory import DEFAULT_CGROUP_PARENT, JobMemoryMeter, make_meter
from pooltree.node.running import RunningJob, Verdict, bookkeeping_bytes
from pooltree.node.signalling import JobSignals, send
from pooltree.node.slots import SandboxSlot, SandboxSlots
from pooltree.node.trash import Trash
from pooltree.node.user_statistics import UserStatisticsError, user_statistics_error
from pooltree.node.zygotes import KeeperZygotes
from pooltree.resources import GPU

DEFAULT_STDERR_LIMIT = 5 * 1024 * 1024
"""YTsaurus's default ``max_stderr_size``: what is kept of a job's stderr (and stdout)."""
NODE_SHUTDOWN_REASON = "node_shutdown"
LAUNCH_THREADS = 4

_log = logging.getLogger(__name__)

FinishListener = Callable[[JobResult], None]


def _check_settings(
    memory_sample_period: float, abort_grace: float, stderr_limit: int, node_memory_limit: float
) -> None:
    """``ConfigError`` naming the first executor setting out of its range."""
    if not (isinstance(memory_sample_period, int | float) and 0.01 <= memory_sample_period <= 60):
        raise ConfigError(
            "memory_sample_period", f"must be between 0.01 and 60 seconds, got {memory_sample_period!r}"
        )
    if not (isinstance(abort_grace, int | float) and 0 <= abort_grace <= 600):
        raise ConfigError("abort_grace", f"must be between 0 and 600 seconds, got {abort_grace!r}")
    if isinstance(stderr_limit, bool) or not isinstance(stderr_limit, int) or stderr_limit <= 0:
        raise ConfigError("stderr_limit", f"must be a positive number of bytes, got {stderr_limit!r}")
    if math.isnan(node_memory_limit) or node_memory_limit < 0:
        raise ConfigError(
            "node_memory_limit", f"must be a non-negative number of bytes, got {node_memory_limit!r}"
        )


class JobExecutor:
    """Runs jobs as process groups, measures their memory, enforces limits, interrupts and aborts them."""

    def __init__(
        self,
        root: Path | str,
        *,
        node_memory_limit: float = math.inf,
        memory_sample_period: float = 0.2,
        abort_grace: float = 1.0,
        stderr_limit: int = DEFAULT_STDERR_LIMIT,
        memory_meter: str = "auto",
        cgroup_parent: Path | str = DEFAULT_CGROUP_PARENT,
        overdraft_policy: OverdraftPolicy = arbitrate_node_memory,
        clock: Callable[[], float] = time.time,
        on_finish: FinishListener | None = None,
        isolation: str | JobIsolation = "auto",
        sandbox_slots: bool = True,
        gpus: GpuSlots | None = None,
    ):
        _check_settings(memory_sample_period, abort_grace, stderr_limit, node_memory_limit)
        # Absolute: bubblewrap binds the sandbox by path from another working directory, so a relative root
        # (``pooltree local``'s default ``.pooltree``) made every isolated job fail to start.
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        # Sandboxes, output files and forks of new jobs on threads of their own: they never queue behind the
        # node's other blocking work (or the slow deletions of the trash).
        self._launcher = concurrent.futures.ThreadPoolExecutor(
            LAUNCH_THREADS, thread_name_prefix="pooltree-node-launch"
        )
        # A finished job's cleanup (accounting, output caps, the sandbox's rename) must not queue behind
        # launches waiting for their keepers: its result, and so its slot, waits for it.
        self._finisher = concurrent.futures.ThreadPoolExecutor(
            LAUNCH_THREADS, thread_name_prefix="pooltree-node-finish"
        )
        # Jobs die with the node: each job's keeper holds the read end of this pipe and kills the job's whole
        # subtree on EOF, which the kernel delivers when the last write end closes -- when this process dies,
        # however (``keeper.py``). Both ends are close-on-exec: only keepers get the read end (``pass_fds``).
        self._lifeline_read, self._lifeline_write = os.pipe()
        # One zygote per node forks each job's keeper (a few ms) instead of a Python start per job (``keeper.py``).
        self._keepers = KeeperZygotes(self._lifeline_read, LAUNCH_THREADS)
        self.node_memory_limit = float(node_memory_limit)
        self.memory_sample_period = float(memory_sample_period)
        self.abort_grace = float(abort_grace)
        self.stderr_limit = stderr_limit
        self.meter: JobMemoryMeter
        self.meter, self.meter_reason = make_meter(memory_meter, Path(cgroup_parent))
        self.isolation = (
            isolation if isinstance(isolation, JobIsolation) else JobIsolation(self.root, mode=isolation)
        )
        self.isolation.prepare_root()
        self._trash = Trash(self.root, self.isolation.sandboxes)
        """Finished sandboxes and forgotten jobs: renamed away at once, deleted in the background (``trash.py``)."""
        self._signals = JobSignals(lambda: self.meter, self.isolation)
        wraps_argv = self.meter.argv("probe", ["probe"]) != ["probe"]  # the cgroup meter's join: start cold
        self._slots = SandboxSlots(
            self.root,
            self.isolation,
            self._trash.discard,
            self._keepers.spawn,
            enabled=sandbox_slots and not wraps_argv,
        )
        """Sandboxes set up once per slot and entered by each job (``slots.py``), where the node can."""
        self.gpus = gpus if gpus is not None else GpuSlots(control_files=())
        """The node's GPUs, handed to jobs as whole devices (``gpu.py``); none unless the node has some."""
        self._launching = JobLauncher(
            self.isolation, self.meter, self._trash, self._slots, self._keepers, self.gpus
        )
        """Sandboxes, files and keepers of new jobs, on the launcher threads (``launcher.py``)."""
        self._log_isolation()
        self._policy = overdraft_policy
        self._clock = clock
        self._listeners: list[FinishListener] = [on_finish] if on_finish else []
        self._running: dict[str, RunningJob] = {}
        self._results: dict[str, JobResult] = {}
        self._sampler: asyncio.Task | None = None
        self._sweeper: asyncio.Task | None = None
        self._sweep_waiting: dict[str, asyncio.Future[list[int] | None]] = {}
        self._preparer: threading.Thread | None = None
        self._closed = False

    @property
    def file_source(self) -> BlobSource | None:
        """Where the job's stored files come from (``node/files.py``; set by whoever knows the scheduler)."""
        return self._launching.file_source

    @file_source.setter
    def file_source(self, source: BlobSource | None) -> None:
        self._launching.file_source = source

    def _log_isolation(self) -> None:
        _log.info("job isolation: %s", self.isolation.summary())
        if self.isolation.warning:
            _log.warning("%s", self.isolation.warning)
        if self.gpus.count and not self.isolation.sandboxed:
            _log.warning("without bubblewrap every job can open every GPU device file of the host")

    # ----------------------------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> JobExecutor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def prepare_slots(self, count: int) -> None:
        """Set ``count`` slots up in the background now (``SandboxSlots.prepare``), where jobs run in slots: the
        node's user slots, so its first jobs find them ready."""
        if not self._slots.enabled or count <= 0 or self._closed or self._preparer is not None:
            return
        self._preparer = threading.Thread(
            target=self._slots.prepare, args=(count,), name="pooltree-node-slots", daemon=True
        )
        self._preparer.start()

    def add_listener(self, listener: FinishListener) -> None:
        """Call ``listener(result)`` as soon as any job finishes (the agent's extra heartbeat hook)."""
        self._listeners.append(listener)

    async def start(self, spec: JobSpec) -> None:
        """Accept the job and begin launching it; returns at once, without waiting for the disk or the fork.

        The job is running (for ``running_job_ids``, ``interrupt``, ``abort``) from this moment; the sandbox,
        the output files and the process are made in a worker thread (``wait_running`` waits for that). A
        launch failure becomes a failed result; an abort or interruption that came first is applied as soon as
        the process exists.
        """
        if self._closed:
            raise PooltreeError(
                "executor is shut down; cannot start jobs", attributes={"job_id": spec.job_id}
            )
        if spec.job_id in self._running or spec.job_id in self._results:
            raise PooltreeError(
                f"job {spec.job_id} is already known to this node", attributes={"job_id": spec.job_id}
            )
        directory = self.root / spec.job_id
        job = RunningJob(
            spec=spec,
            directory=directory,
            sandbox=self.isolation.sandbox_of(directory, spec.job_id),
            start_time=self._clock(),
            start_mono=time.monotonic(),
        )
        self._running[spec.job_id] = job
        job.supervisor = asyncio.create_task(self._run(job))
        if self._sampler is None or self._sampler.done():
            self._sampler = asyncio.create_task(self._sample_loop())

    async def wait_running(self, job_id: str, timeout: float | None = None) -> int | None:
        """The pid of the job's root process once it is launched; None when the launch failed or the job has
        already finished (``asyncio.TimeoutError`` after ``timeout``)."""
        job = self._running.get(job_id)
        if job is None:
            if job_id in self._results:
                return None
            job = self._get_running(job_id)
        return await asyncio.wait_for(asyncio.shield(job.launched), timeout)

    async def _run(self, job: RunningJob) -> None:
        """Launch the job in a worker thread, then supervise it to its result."""
        spec = job.spec
        try:
            extra = await self._assign_gpus(job)
            job.process = await asyncio.get_running_loop().run_in_executor(
                self._launcher, self._launching.launch, job, extra
            )
        except (OSError, subprocess.SubprocessError, PooltreeError) as error:
            self.isolation.release(spec.job_id)
            self.gpus.release(spec.job_id)
            job.launched.set_result(None)
            if job.verdict is None and isinstance(error, WaitingTimeout):  # its GPUs stayed held (`gpu.py`)
                job.verdict = Verdict(
                    JobState.ABORTED,
                    abort_error(WAITING_TIMEOUT_REASON, {"reason": str(error)}),
                    WAITING_TIMEOUT_REASON,
                )
            if job.verdict is None:
                job.verdict = Verdict(
                    JobState.FAILED,
                    yt_error(JOB_START_FAILED, "Failed to start user job", {"reason": str(error)}),
                )
            await self._finish(job, None)
            return
        self.meter.attach(spec.job_id, job.process.pid, keeper=True)
        job.launched.set_result(job.process.pid)
        if job.verdict is not None:  # aborted (or the node shut down) while launching
            self._signals.signal(job, signal.SIGKILL, [])
        elif job.phase == "interrupting" and spec.interruption_signal is not None:
            # to the processes there are now (a scan)
            job.interrupted_pids += self._signals.signal(job, spec.interruption_signal)
        await self._supervise(job)

    async def _assign_gpus(self, job: RunningJob) -> dict[str, str]:
        """Whole devices for the job's ``gpu`` demand and the variables naming them (none on a GPU-less node).
        Devices still held by other jobs are waited for, at most the spec's ``waiting_for_resources_timeout``
        (`gpu.py`: ``WaitingTimeout``); an abort while waiting ends the wait."""
        spec = job.spec
        if not self.gpus.count:
            return {}
        demand = 0.0 if spec.resources is None else float(spec.resources[GPU])
        timeout = spec.waiting_for_resources_timeout
        devices = await self.gpus.acquire_waiting(
            spec.job_id,
            gpu_demand(demand),
            DEFAULT_WAITING_TIMEOUT if timeout is None else timeout,
            lambda: job.verdict is not None,
        )
        if devices is None:
            raise PooltreeError("aborted while waiting for its GPUs")  # the abort's verdict stands
        return gpu_environment(devices)

    def gpu_devices(self, job_id: str) -> list[int]:
        """Host indices of the GPUs a running job holds."""
        return [device.index for device in self.gpus.assigned(job_id)]

    def interrupt(self, job_id: str, timeout: float, reason: str = "preemption") -> None:
        """Ask the job to finish: send its interruption_signal and abort it with ``reason`` after ``timeout``.

        A job exiting 0 within the timeout completes (with ``interruption_reason``); any other ending is an
        abort with ``reason``. A job without an interruption_signal cannot be interrupted and is aborted now.
        """
        job = self._get_running(job_id)
        if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout >= 0):
            raise ConfigError(
                "timeout", f"interruption timeout must be a non-negative number of seconds, got {timeout!r}"
            )
        if job.phase != "running" or job.exit_mono is not None:
            return
        sig = job.spec.interruption_signal
        if sig is None:
            self.abort(
                job_id, reason, {"interruption": "unsupported: the operation has no interruption_signal"}
            )
            return
        job.phase = "interrupting"
        job.interruption_reason = reason
        job.interrupted_pids = self._signals.signal(job, sig)
        job.killer = asyncio.create_task(self._interruption_deadline(job, float(timeout), reason))

    def abort(self, job_id: str, reason: str, attributes: Mapping[str, Any] | None = None) -> None:
        """Abort the job with ``reason``: SIGTERM to its processes, SIGKILL after ``abort_grace``."""
        job = self._get_running(job_id)
        if job.verdict is not None or job.exit_mono is not None:
            return
        job.verdict = Verdict(JobState.ABORTED, abort_error(reason, attributes), reason)
        job.phase = "aborting"
        if job.killer is not None:
            job.killer.cancel()
        self._signals.signal(job, signal.SIGTERM)
        job.killer = asyncio.create_task(self._kill_after(job, self.abort_grace))

    async def wait(self, job_id: str, timeout: float | None = None) -> JobResult:
        """The job's result, waiting for it to finish (``asyncio.TimeoutError`` after ``timeout``)."""
        if job_id in self._results:
            return self._results[job_id]
        job = self._get_running(job_id)
        return await asyncio.wait_for(asyncio.shield(job.done), timeout)

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Kill every running job (aborted, ``node_shutdown``) and wait for their results; idempotent."""
        self._closed = True
        for job in list(self._running.values()):
            if job.verdict is None and job.exit_mono is None:
                job.verdict = Verdict(
                    JobState.ABORTED, abort_error(NODE_SHUTDOWN_REASON), NODE_SHUTDOWN_REASON
                )
            await self._signals.kill_tree(job)
        pending = [job.supervisor for job in self._running.values() if job.supervisor is not None]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        await asyncio.to_thread(self._slots.close)
        if self._preparer is not None:  # it retires what it was setting up, the slots being closed
            await asyncio.to_thread(self._preparer.join, timeout)
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        await self._trash.drain(timeout)
        self._trash.shutdown()
        self._launcher.shutdown(wait=False)
        self._finisher.shutdown(wait=False)
        await asyncio.to_thread(self._keepers.close)
        if self._lifeline_write >= 0:  # any keeper still running kills what is left of its job
            os.close(self._lifeline_write)
            os.close(self._lifeline_read)
            self._lifeline_write = self._lifeline_read = -1

    # ----------------------------------------------------------------------------------------------- queries

    def alerts(self) -> list[dict[str, Any]]:
        """The node's alerts (YT errors): a reduced job isolation."""
        alert = self.isolation.alert()
        return [alert] if alert is not None else []

    @property
    def sandbox_slots(self) -> bool:
        """Whether sandboxed jobs run in the node's slots (``slots.py``) rather than a bubblewrap each."""
        return self._slots.enabled

    def running_job_ids(self) -> list[str]:
        return sorted(self._running)

    def result(self, job_id: str) -> JobResult | None:
        return self._results.get(job_id)

    def spec(self, job_id: str) -> JobSpec | None:
        job = self._running.get(job_id)
        return job.spec if job else None

    def phase(self, job_id: str) -> str | None:
        """``running``, ``interrupting`` or ``aborting`` for a running job; None otherwise."""
        job = self._running.get(job_id)
        return job.phase if job else None

    def start_time(self, job_id: str) -> float | None:
        """When a running job started (executor clock, seconds); None for unknown or finished jobs."""
        job = self._running.get(job_id)
        return job.start_time if job else None

    def memory_usage(self, job_id: str) -> float:
        """The job's last measured memory (bytes); 0 before the first sample."""
        job = self._running.get(job_id)
        return job.memory.current if job and job.memory else 0.0

    def running_statistics(self, job_id: str) -> dict[str, float]:
        """Statistics of a running job so far (same names as the final ones)."""
        job = self._get_running(job_id)
        elapsed = time.monotonic() - job.start_mono
        stats = job_statistics(job.spec, self._track(job), total_seconds=elapsed, exec_seconds=elapsed)
        # a fault fails the job once it ends, not its heartbeat
        with contextlib.suppress(UserStatisticsError):
            stats.update(job.user_statistics.read(job.directory, job.spec.custom_statistics_count_limit))
        return stats

    def stderr(self, job_id: str, limit: int | None = None) -> bytes:
        """The tail of the job's stderr, at most ``limit`` (default ``stderr_limit``) bytes."""
        return self._tail(job_id, "stderr", limit)

    def stdout(self, job_id: str, limit: int | None = None) -> bytes:
        """The tail of the job's stdout, at most ``limit`` (default ``stderr_limit``) bytes."""
        return self._tail(job_id, "stdout", limit)

    def forget(self, job_id: str) -> None:
        """Drop a finished job's result now and its directory (stdout, stderr, a kept sandbox) in the background.

        The directory is renamed into the trash on a cleanup thread, off the event loop; starting a job with
        the same id waits for that rename, and ``shutdown`` waits for every deletion.
        """
        if job_id in self._running:
            raise PooltreeError(f"job {job_id} is still running", attributes={"job_id": job_id})
        self._results.pop(job_id, None)
        directory = self.root / job_id
        sandbox = self.isolation.sandbox_of(directory, job_id)
        paths = [directory] if directory in sandbox.parents else [directory, sandbox]
        try:
            removal = self._trash.submit(self._discard_all, paths)
        except RuntimeError:  # shut down: no background threads any more
            self._discard_all(paths)
            return
        self._launching.forgetting(job_id, removal)

    def _discard_all(self, paths: list[Path]) -> None:
        for path in paths:
            self._trash.discard(path)

    # ----------------------------------------------------------------------------------------------- internals

    def _get_running(self, job_id: str) -> RunningJob:
        job = self._running.get(job_id)
        if job is None:
            raise PooltreeError(
                f"no running job {job_id} on this node", code=1135, attributes={"job_id": job_id}
            )
        return job

    def _tail(self, job_id: str, name: str, limit: int | None) -> bytes:
        if job_id not in self._running and job_id not in self._results:
            raise PooltreeError(f"no job {job_id} on this node", code=1135, attributes={"job_id": job_id})
        limit = self.stderr_limit if limit is None else limit
        try:
            with open(self.root / job_id / name, "rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(size - limit, 0))
                return handle.read(limit)
        except FileNotFoundError:
            return b""

    def _track(self, job: RunningJob) -> MemoryTrack:
        job.job_proxy_max_memory = max(job.job_proxy_max_memory, bookkeeping_bytes(job))
        return MemoryTrack(job.max_memory, job.job_proxy_max_memory)

    async def _kill_after(self, job: RunningJob, grace: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(job.done), grace)
            return
        await self._signals.kill_tree(job)

    async def _interruption_deadline(self, job: RunningJob, timeout: float, reason: str) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(job.done), timeout)
            return
        if job.verdict is None:
            try:  # a description only: a failed scan must not keep the job from being killed below
                left = self._signals.still_running(job, job.interrupted_pids)
            except Exception as error:  # any scan failure (kill_tree goes on with its own scans)
                left = [f"(the job's processes could not be listed: {error})"]
            attributes = {
                "interruption_timeout": timeout,
                "interruption": "timed out",
                "processes_left": left,
            }
            job.verdict = Verdict(JobState.ABORTED, abort_error(reason, attributes), reason)
            job.phase = "aborting"
        await self._signals.kill_tree(job)

    async def _supervise(self, job: RunningJob) -> None:
        """Wait for the root to exit, make sure nothing of the job is left, then publish the result."""
        returncode = await self._wait_exit(job)
        job.exit_mono = time.monotonic()
        # In a slot the keeper is pid 1 of the job's PID namespace: the kernel makes it a zombie only once every
        # other process of the namespace has exited (zap_pid_ns_processes), so nothing can be left to look for.
        if job.sandbox_slot is None:
            leftovers = await self._sweep(job)
            if leftovers is None or leftovers:
                await self._signals.kill_tree(job)
        await self._finish(job, returncode)

    async def _wait_exit(self, job: RunningJob) -> int | None:
        """The root's exit status (``-signal`` when killed by one), as ``asyncio.subprocess`` reports it.

        The exit is noticed without reaping (a pidfd on the loop, or ``waitid(WNOWAIT)`` in a thread where
        pidfds are missing); the job's process group is SIGKILLed while the root is still a zombie, because
        until it is reaped its pid, and so the group id, cannot belong to anyone else.
        """
        assert job.process is not None
        pid = job.process.pid
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        if pidfd is not None:
            loop = asyncio.get_running_loop()
            exited: asyncio.Future[None] = loop.create_future()
            loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
            try:
                await exited
            finally:
                loop.remove_reader(pidfd)
                os.close(pidfd)
        else:
            with contextlib.suppress(ChildProcessError):
                await asyncio.to_thread(os.waitid, os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        send(pid, signal.SIGKILL, group=True)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # reaped elsewhere; the status is lost
            job.process.returncode = -signal.SIGKILL
            return None
        job.process.returncode = self.isolation.exit_code(os.waitstatus_to_exitcode(status))
        return job.process.returncode

    def _sweep(self, job: RunningJob) -> asyncio.Future[list[int] | None]:
        """The job's processes still alive after its exit, from a scan shared by every exit of this moment.

        None means the scan failed, and the caller falls back to killing round by round.
        """
        found: asyncio.Future[list[int] | None] = asyncio.get_running_loop().create_future()
        self._sweep_waiting[job.spec.job_id] = found
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep_loop())
        return found

    async def _sweep_loop(self) -> None:
        await asyncio.sleep(0)  # exits noticed in this loop iteration join the same scan
        while self._sweep_waiting:
            batch, self._sweep_waiting = self._sweep_waiting, {}
            leftovers: dict[str, list[int]] | None
            try:
                leftovers = self.meter.leftovers(list(batch))
            except Exception:  # one failed scan must not leave jobs unfinished
                _log.exception("cannot list the processes left by %d finished jobs", len(batch))
                leftovers = None
            for job_id, found in batch.items():
                if not found.done():
                    found.set_result(None if leftovers is None else leftovers.get(job_id, []))

    async def _finish(self, job: RunningJob, returncode: int | None) -> None:
        """Turn the exit into a result, clean up the sandbox, publish the result to waiters and listeners."""
        spec = job.spec
        if job.killer is not None and job.killer is not asyncio.current_task():
            job.killer.cancel()
        if job.memory is not None and job.memory.limit_hit and job.verdict is None and returncode != 0:
            job.verdict = Verdict(
                JobState.FAILED,
                memory_limit_error(spec.memory_limit or 0, job.memory.peak, list(job.memory.pids)),
            )
        interruption_reason = None
        state: JobState
        error: dict | None = None
        abort_reason: str | None = None
        if job.verdict is not None:
            state, error, abort_reason = job.verdict.state, job.verdict.error, job.verdict.abort_reason
        elif returncode == 0:
            state = JobState.COMPLETED
            interruption_reason = job.interruption_reason
        elif job.interruption_reason is not None:
            state, abort_reason = JobState.ABORTED, job.interruption_reason
            error = abort_error(abort_reason, {"interruption": "job did not exit 0"})
            error["inner_errors"].append(exit_error(returncode if returncode is not None else -9))
        else:
            state, error = JobState.FAILED, exit_error(returncode if returncode is not None else -9)
        finish_mono = time.monotonic()
        exec_end = job.exit_mono if job.exit_mono is not None else finish_mono
        stats = job_statistics(
            spec,
            self._track(job),
            total_seconds=finish_mono - job.start_mono,
            exec_seconds=exec_end - job.start_mono,
        )
        try:  # the job's own statistics (descriptor 5); bad ones fail the job, as in YTsaurus
            stats.update(job.user_statistics.read(job.directory, spec.custom_statistics_count_limit))
            job.user_statistics.discard(job.directory)
        except UserStatisticsError as fault:
            if state is JobState.COMPLETED:  # a job that failed or was aborted keeps its own ending
                state, interruption_reason = JobState.FAILED, None
                error = user_statistics_error(str(fault))
        devices = tuple(self.gpu_devices(spec.job_id))  # before the clean-up returns them
        emptying = job.sandbox_slot is not None and outputs_within_limit(job.directory, self.stderr_limit)
        if emptying:  # the slot is emptied after the result is out (below): its next job waits for that
            stderr_size = self._settle(job)
        else:
            stderr_size = await asyncio.get_running_loop().run_in_executor(
                self._finisher, self._clean_up, job
            )
        result = JobResult(
            job_id=spec.job_id,
            operation_id=spec.operation_id,
            task_name=spec.task_name,
            state=state,
            start_time=job.start_time,
            finish_time=job.start_time + (finish_mono - job.start_mono),
            exit_code=returncode,
            error=error,
            abort_reason=abort_reason,
            interruption_reason=interruption_reason,
            statistics=stats,
            stderr_size=stderr_size,
            gpu_devices=devices,
        )
        self._results[spec.job_id] = result
        del self._running[spec.job_id]
        if emptying:
            assert job.sandbox_slot is not None
            self._give_back_later(job.sandbox_slot)
        job.done.set_result(result)
        for listener in list(self._listeners):
            listener(result)

    def _settle(self, job: RunningJob) -> int:
        """On the loop, for a job of a slot whose outputs need no cut: its accounting released (a slot's job
        never has the cgroup meter, whose release writes and waits: slots are off with it); the stderr size."""
        self.meter.release(job.spec.job_id)
        self.isolation.release(job.spec.job_id)
        self.gpus.release(job.spec.job_id)
        try:
            return os.stat(job.directory / "stderr").st_size
        except OSError:
            return 0

    def _give_back_later(self, used: SandboxSlot) -> None:
        """The finished job's slot emptied on a finisher thread while its result travels: as YTsaurus's node
        offers resources still being released (``include_releasing_resources_in_scheduler_heartbeat`` off),
        the freed slot is reported at the job's exit, and a job that gets it meanwhile waits for the emptying
        (``SandboxSlots.take``), never a new slot."""
        self._slots.emptying(used)
        try:
            emptied = self._finisher.submit(self._slots.give_back, used)
        except RuntimeError:  # shut down: empty it here
            self._slots.give_back(used)
            return
        self._trash.track(emptied)

    def _clean_up(self, job: RunningJob) -> int:
        """Worker thread: release the job's accounting, cap its output files, drop its sandbox; the stderr size."""
        spec = job.spec
        try:
            self.meter.release(spec.job_id)
        except OSError:
            _log.exception("cannot release the memory accounting of job %s", spec.job_id)
        self.isolation.release(spec.job_id)  # every process of the job is gone: its uid may be reused
        self.gpus.release(spec.job_id)  # ... and its GPUs handed to the next job
        stderr_size = 0
        try:
            # cut as YTsaurus's job proxy does: the first half, ``\n...skipped...\n``, the last half
            stderr_size = truncate_output(job.directory / "stderr", self.stderr_limit)
            truncate_output(job.directory / "stdout", self.stderr_limit)
        except OSError:
            _log.exception("cannot cap the output files of job %s", spec.job_id)
        if job.sandbox_slot is not None:
            self._slots.give_back(job.sandbox_slot)  # emptied for the slot's next job
        elif not spec.keep_sandbox:
            self._trash.discard(job.sandbox)
        return stderr_size

    async def _sample_loop(self) -> None:
        while self._running:
            try:
                self.sample_now()
            except Exception:  # a failed sample must not stop enforcement for the other jobs
                _log.exception("memory sampling failed; retrying in %.2f s", self.memory_sample_period)
            await asyncio.sleep(self.memory_sample_period)

    def sample_now(self) -> None:
        """Measure every running job once and enforce memory_limit and the node memory limit
        (``enforcement.py`` decides; the jobs it names are killed here)."""
        active = [job for job in self._running.values() if job.process is not None and job.exit_mono is None]
        if not active:
            return
        samples = self.meter.sample([job.spec.job_id for job in active])
        for judged in memory_verdicts(active, samples, self._policy, self.node_memory_limit):
            job = judged.job
            job.verdict = judged.verdict
            job.phase = "aborting"
            if judged.replaces_killer and job.killer is not None:
                job.killer.cancel()
            job.killer = asyncio.create_task(self._signals.kill_tree(job))
