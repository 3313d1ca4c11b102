"""Launching a job, on the executor's launcher threads (``executor.py``): the sandbox, the job's files, the output
files and the meter's setup, then its keeper (``keeper.py``, asked for through ``zygotes.py``), in a slot's
sandbox (``slots.py``) where the node keeps slots and the job needs no sandbox arguments of its own."""

from __future__ import annotations

import concurrent.futures
import os
import threading

from pooltree.node.files import BlobSource, write_job_files
from pooltree.node.gpu import GpuSlots, device_binds
from pooltree.node.isolation import JobIsolation
from pooltree.node.launch import job_environment, plain_tmpfs_directories, private_output, shell_script
from pooltree.node.memory import JobMemoryMeter
from pooltree.node.running import RunningJob
from pooltree.node.slots import SandboxSlots
from pooltree.node.trash import Trash
from pooltree.node.user_statistics import statistics_descriptor
from pooltree.node.zygotes import KeeperProcess, KeeperZygotes


class JobLauncher:
    """Starts jobs behind keepers; the executor owns it and the collaborators it is given."""

    def __init__(
        self,
        isolation: JobIsolation,
        meter: JobMemoryMeter,
        trash: Trash,
        slots: SandboxSlots,
        keepers: KeeperZygotes,
        gpus: GpuSlots,
    ) -> None:
        self.isolation = isolation
        self.meter = meter
        self._trash = trash
        self._slots = slots
        self._keepers = keepers
        self.gpus = gpus
        self.file_source: BlobSource | None = None
        """Where the job's stored files come from (``node/files.py``; set by whoever knows the scheduler)."""
        self._forgetting: dict[str, concurrent.futures.Future] = {}
        self._forgetting_lock = threading.Lock()

    def forgetting(self, job_id: str, removal: concurrent.futures.Future) -> None:
        """A forgotten job's directory is being removed: a job started with its id waits for ``removal``."""
        with self._forgetting_lock:
            self._forgetting[job_id] = removal
        removal.add_done_callback(lambda done: self._forgotten(job_id, done))

    def _forgotten(self, job_id: str, removal: concurrent.futures.Future) -> None:
        with self._forgetting_lock:
            if self._forgetting.get(job_id) is removal:
                del self._forgetting[job_id]

    def launch(self, job: RunningJob, extra: dict[str, str]) -> KeeperProcess:
        """Worker thread: a slot uid, a fresh sandbox, the output files, the meter's setup, then the process:
        the job's keeper (``keeper.py``), which starts the job and kills all of it if this node dies. Where the
        node keeps slots (``slots.py``) a job that needs no sandbox arguments of its own runs in one."""
        with self._forgetting_lock:
            forgetting = self._forgetting.get(job.spec.job_id)
        if forgetting is not None:  # an earlier job with this id is being forgotten: let it go first
            concurrent.futures.wait([forgetting])
        devices = device_binds(self.gpus.assigned(job.spec.job_id), self.gpus.control_files)
        own_arguments = bool(devices) or job.spec.network == "isolated"  # sandbox arguments of its own
        if self._slots.enabled and not own_arguments and not job.spec.keep_sandbox:
            return self._launch_in_slot(job, extra)
        env = job_environment(job.spec, job.sandbox)
        env.update(extra)
        self._trash.fresh_directory(job.directory)
        self._trash.fresh_directory(job.sandbox)
        (job.sandbox / "tmp").mkdir()
        slot = self.isolation.acquire(job.spec.job_id)
        self.isolation.prepare(job.directory, job.sandbox, slot)
        for path in write_job_files(job.sandbox, job.spec.files, self.file_source):
            if slot is not None:  # the job's own files, as the rest of its sandbox
                os.chown(path, slot.uid, slot.gid)
        volumes = [(volume.path, volume.size) for volume in job.spec.tmpfs]
        if not self.isolation.has_tmpfs:  # no namespace to mount in: plain directories (docs/live-cluster.md)
            for path in plain_tmpfs_directories(job.sandbox, volumes):
                if slot is not None:
                    os.chown(path, slot.uid, slot.gid)
        job_argv = self.isolation.wrap(
            ["/bin/sh", "-c", shell_script(job.spec)],
            job.sandbox,
            slot,
            devices=devices,
            own_network=job.spec.network == "isolated",
            tmpfs=volumes if self.isolation.has_tmpfs else (),
        )
        argv = self.meter.argv(job.spec.job_id, job_argv)
        self.meter.prepare(job.spec.job_id, job.spec.memory_limit)
        with (
            private_output(job.directory / "stdout") as stdout,
            private_output(job.directory / "stderr") as stderr,
            statistics_descriptor(job.directory) as statistics,
        ):
            return self._keepers.spawn(
                argv,
                env=env,
                cwd=str(job.sandbox),
                stdout=stdout.fileno(),
                stderr=stderr.fileno(),
                **statistics,
            )

    def _launch_in_slot(self, job: RunningJob, extra: dict[str, str]) -> KeeperProcess:
        """Worker thread: the job in a slot's sandbox (``slots.py``): its files written there, its keeper forked
        into the slot's namespace as pid 1 of namespaces of its own, the shell started by it as the slot's uid
        (the keeper drops groups, capabilities and new privileges as ``setpriv`` would: ``keeper._spawn_as``)."""
        used = self._slots.take()
        try:
            env = job_environment(job.spec, used.sandbox)
            env.update(extra)
            self._trash.fresh_directory(job.directory)
            os.chmod(job.directory, 0o700)  # stdout and stderr only: the job never passes through it
            for path in write_job_files(used.sandbox, job.spec.files, self.file_source):
                if used.slot is not None:
                    os.chown(path, used.slot.uid, used.slot.gid)
            argv = ["/bin/sh", "-c", shell_script(job.spec)]
            identity = None if used.slot is None else (used.slot.uid, used.slot.gid)
            self.meter.prepare(job.spec.job_id, job.spec.memory_limit)
        except BaseException:
            self._slots.give_back(used)  # nothing ran in it: emptied for the next job
            raise
        try:
            with (
                private_output(job.directory / "stdout") as stdout,
                private_output(job.directory / "stderr") as stderr,
                statistics_descriptor(job.directory) as statistics,
            ):
                process = self._keepers.spawn(
                    argv,
                    env=env,
                    cwd=str(used.sandbox),
                    stdout=stdout.fileno(),
                    stderr=stderr.fileno(),
                    namespace=used.namespace,
                    identity=identity,  # the keeper switches to the slot's uid (no setpriv exec)
                    tmpfs=[(volume.path, volume.size) for volume in job.spec.tmpfs],  # mounted by the keeper
                    **statistics,
                )
        except BaseException:
            self._slots.abandon(used)  # a keeper may have started in it: never another job there
            raise
        job.sandbox, job.sandbox_slot = used.sandbox, used
        return process
