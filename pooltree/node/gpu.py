"""GPU devices of an exec node: discovery, whole-device assignment to jobs, and what a job sees of them.

YTsaurus's exec node binds each job to GPU slots: a job asking for ``gpu = N`` gets N whole devices of the node,
the job's environment names them (``NVIDIA_VISIBLE_DEVICES``, ``CUDA_VISIBLE_DEVICES``) and only their device files
(plus the driver's control files) exist in the job's container. pooltree does the same:

* **Discovery** (:func:`discover_gpus`): a configured device list wins (``--gpu-devices``, so tests and machines
  without NVIDIA hardware run the same code path with fake device files); otherwise ``nvidia-smi`` names the
  devices (index, UUID, model) when it is installed and answers; otherwise the ``/dev/nvidiaN`` files are the
  devices. A node with none has no GPU.
* **Assignment** (:class:`GpuSlots`): whole devices, lowest free indices first; a job's devices are held from its
  launch until every process of the job is gone, then returned. Assignments live in the node process: a node that
  restarts starts with every device free, which is right because its jobs died with it (``keeper.py``), and a
  scheduler restart changes nothing here -- revival re-registers the running jobs with the devices they hold.
* **Visibility**: under bubblewrap the sandbox's ``/dev`` is a fresh minimal one; the assigned device files and the
  control files that exist (``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ...) are bound into it at their usual paths.
  The kernel driver still enumerates every GPU of the host, so the variables carry host indices (CUDA then uses
  only those). Without bubblewrap the device files cannot be hidden; the isolation warning says so.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pooltree.errors import ConfigError, PooltreeError

_log = logging.getLogger(__name__)

DEVICE_DIRECTORY = Path("/dev")
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
"""Driver control files every CUDA process opens; bound into a GPU job's sandbox when the host has them."""
_DEVICE_NAME = re.compile(r"^nvidia([0-9]+)$")
NVIDIA_SMI_TIMEOUT = 20.0


WAITING_TIMEOUT_REASON = "waiting_timeout"
"""The abort reason of a job that waited for its resources on the node too long (YTsaurus ``WaitingTimeout``)."""
DEFAULT_WAITING_TIMEOUT = 30.0
"""Seconds a job waits for its GPUs when its allocation names no timeout (YTsaurus's exec node
``waiting_for_resources_timeout`` default)."""


class WaitingTimeout(PooltreeError):
    """A job's devices were not free within its waiting timeout."""


@dataclass(frozen=True)
class GpuDevice:
    """One whole GPU: its host index, the device file on the host, and what ``nvidia-smi`` said of it."""

    index: int
    path: str
    uuid: str = ""
    name: str = ""

    @property
    def sandbox_path(self) -> str:
        """Where the job sees the device: ``/dev/nvidiaN``, whatever file backs it on the host."""
        return str(DEVICE_DIRECTORY / f"nvidia{self.index}")

    def to_dict(self) -> dict[str, object]:
        return {"index": self.index, "device": self.sandbox_path, "uuid": self.uuid, "name": self.name}


def parse_gpu_devices(spec: str | Iterable[str], path: str = "gpu_devices") -> tuple[GpuDevice, ...]:
    """A configured device list: ``'0=/dev/nvidia0,1=/srv/fake1'`` or ``'/dev/nvidia0,/dev/nvidia1'``.

    Without ``INDEX=`` a file named ``nvidiaN`` keeps its N, any other file takes its position in the list.
    Each file must exist (a typo would hand jobs a device that is not there); indices must be distinct.
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    devices: list[GpuDevice] = []
    for position, raw in enumerate(items):
        where = f"{path}[{position}]"
        if not isinstance(raw, str):
            raise ConfigError(where, f"expected 'INDEX=FILE' or a device file, got {raw!r}")
        item = raw.strip()
        if not item:
            continue
        index_text, sep, file_text = item.partition("=")
        if sep:
            if not index_text.strip().isdigit():
                raise ConfigError(where, f"expected a device index before '=', got {index_text!r}")
            index, file = int(index_text), file_text.strip()
        else:
            file = item
            named = _DEVICE_NAME.match(Path(file).name)
            index = int(named.group(1)) if named else position
        if not file or not Path(file).exists():
            raise ConfigError(where, f"device file {file!r} does not exist")
        if any(device.index == index for device in devices):
            raise ConfigError(where, f"GPU index {index} is given twice")
        devices.append(GpuDevice(index=index, path=str(Path(file).absolute())))
    return tuple(sorted(devices, key=lambda device: device.index))


def _nvidia_smi_devices(device_directory: Path) -> tuple[GpuDevice, ...] | None:
    """The devices ``nvidia-smi`` lists, or None when it is missing or fails."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    argv = [tool, "--query-gpu=index,uuid,name", "--format=csv,noheader"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as error:
        _log.warning("nvidia-smi does not run (%s); GPUs are taken from the device files", error)
        return None
    if done.returncode != 0:
        _log.warning("nvidia-smi failed (exit %s); GPUs are taken from the device files", done.returncode)
        return None
    devices = []
    for line in done.stdout.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) >= 3 and fields[0].isdigit():
            index = int(fields[0])
            devices.append(GpuDevice(index, str(device_directory / f"nvidia{index}"), fields[1], fields[2]))
    return tuple(devices)


def _device_files(device_directory: Path) -> tuple[GpuDevice, ...]:
    found = []
    for entry in device_directory.glob("nvidia*"):
        named = _DEVICE_NAME.match(entry.name)
        if named:
            found.append(GpuDevice(int(named.group(1)), str(entry)))
    return tuple(sorted(found, key=lambda device: device.index))


def discover_gpus(
    configured: str | Sequence[str] | None = None, *, device_directory: Path = DEVICE_DIRECTORY
) -> tuple[GpuDevice, ...]:
    """The node's GPUs: the configured list, else ``nvidia-smi``'s, else the ``/dev/nvidiaN`` files."""
    if configured is not None and (not isinstance(configured, str) or configured.strip()):
        return parse_gpu_devices(configured)
    listed = _nvidia_smi_devices(device_directory)
    if listed:
        return listed
    return _device_files(device_directory)


def control_device_files(device_directory: Path = DEVICE_DIRECTORY) -> tuple[str, ...]:
    """The driver's control files present on this host (none on a host without the NVIDIA driver)."""
    return tuple(
        str(device_directory / name) for name in CONTROL_DEVICES if (device_directory / name).exists()
    )


def gpu_demand(amount: float, path: str = "resources.gpu") -> int:
    """Whole devices for a job's ``gpu`` demand; a fraction of a device cannot be handed out."""
    if not math.isfinite(amount) or amount < 0 or abs(amount - round(amount)) > 1e-9:
        raise ConfigError(path, f"expected a whole number of GPUs, got {amount!r}")
    return round(amount)


class GpuSlots:
    """Whole GPUs handed to jobs: ``acquire`` at launch, ``release`` when the job's last process is gone."""

    def __init__(self, devices: Sequence[GpuDevice] = (), control_files: Sequence[str] | None = None) -> None:
        indices = [device.index for device in devices]
        if len(set(indices)) != len(indices):
            raise ConfigError("gpu_devices", "GPU indices must be distinct")
        self.devices: tuple[GpuDevice, ...] = tuple(sorted(devices, key=lambda device: device.index))
        self.control_files: tuple[str, ...] = (
            control_device_files() if control_files is None else tuple(control_files)
        )
        self._assigned: dict[str, tuple[GpuDevice, ...]] = {}
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return len(self.devices)

    def free(self) -> tuple[GpuDevice, ...]:
        with self._lock:
            held = {device.index for devices in self._assigned.values() for device in devices}
        return tuple(device for device in self.devices if device.index not in held)

    def acquire(self, job_id: str, count: int) -> tuple[GpuDevice, ...]:
        """``count`` free devices for ``job_id``, lowest indices first; an error naming what is missing."""
        if count <= 0:
            return ()
        with self._lock:
            if job_id in self._assigned:
                return self._assigned[job_id]
            held = {device.index for devices in self._assigned.values() for device in devices}
            free = [device for device in self.devices if device.index not in held]
            if len(free) < count:
                raise PooltreeError(
                    f"job needs {count} GPU(s) but the node has {len(free)} free of {len(self.devices)}",
                    attributes={"job_id": job_id, "gpu_demand": count, "free_gpus": [d.index for d in free]},
                )
            taken = tuple(free[:count])
            self._assigned[job_id] = taken
            return taken

    async def acquire_waiting(
        self, job_id: str, count: int, timeout: float, stopped: Callable[[], bool], poll: float = 0.05
    ) -> tuple[GpuDevice, ...] | None:
        """``count`` devices for ``job_id`` once they are free, as YTsaurus's exec node lets an allocation wait for
        resources still held (a preempted job finishing its interruption): polled every ``poll`` seconds (devices
        are released from worker threads) for at most ``timeout`` seconds, then :class:`WaitingTimeout`. None
        when ``stopped()`` turns true first (the job was aborted while it waited)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.acquire(job_id, count)
            except PooltreeError as error:
                if stopped():
                    return None
                if time.monotonic() >= deadline:
                    raise WaitingTimeout(
                        f"{error.message}; waited {timeout:g} s for them", attributes=error.attributes
                    ) from None
            await asyncio.sleep(poll)

    def release(self, job_id: str) -> None:
        with self._lock:
            self._assigned.pop(job_id, None)

    def assigned(self, job_id: str) -> tuple[GpuDevice, ...]:
        return self._assigned.get(job_id, ())

    def assignments(self) -> dict[str, list[int]]:
        """Job id -> host indices of the devices it holds (the heartbeat and the orchid show this)."""
        with self._lock:
            return {job: [device.index for device in devices] for job, devices in self._assigned.items()}


def gpu_environment(devices: Sequence[GpuDevice]) -> dict[str, str]:
    """The variables that name a job's devices: host indices, as the driver enumerates them."""
    listed = ",".join(str(device.index) for device in devices)
    return {"NVIDIA_VISIBLE_DEVICES": listed or "void", "CUDA_VISIBLE_DEVICES": listed}


def device_binds(devices: Sequence[GpuDevice], control_files: Sequence[str]) -> list[tuple[str, str]]:
    """(host file, path in the sandbox) for each device file a GPU job sees; nothing for a job without GPUs."""
    if not devices:
        return []
    binds = [(device.path, device.sandbox_path) for device in devices]
    binds += [(path, str(DEVICE_DIRECTORY / Path(path).name)) for path in control_files]
    return binds
