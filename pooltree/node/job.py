"""Job specs, results, YT-shaped errors and statistics for the exec-node agent.

Pure data and pure functions: no processes, no clock. The executor fills these in; the agent turns them into
heartbeat reports. Error codes follow YTsaurus (``NJobProxy::EErrorCode``, ``NExecNode::EErrorCode``,
``EProcessErrorCode``) so a YT client prints familiar errors.
"""

from __future__ import annotations

import enum
import math
import signal as signal_module
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pooltree.config.operation import (
    DEFAULT_CUSTOM_STATISTICS_COUNT_LIMIT,
    MAX_CUSTOM_STATISTICS_COUNT_LIMIT,
    is_sandbox_path,
)
from pooltree.controllers.statistics import CUMULATIVE_STATISTICS
from pooltree.errors import ConfigError, join_path, yt_error
from pooltree.node import wire
from pooltree.node.files import JobFile, parse_job_files
from pooltree.resources import MEMORY, RESOURCES, USER_SLOTS, Vector, parse_resources, parse_size, vector

# YTsaurus error codes the node reports.
MEMORY_LIMIT_EXCEEDED = 1200
USER_JOB_FAILED = 1205
ABORT_BY_SCHEDULER = 1101
RESOURCE_OVERDRAFT = 1102
JOB_START_FAILED = 1120
PROCESS_NON_ZERO_EXIT_CODE = 10000
PROCESS_SIGNAL = 10001

RESOURCE_OVERDRAFT_REASON = "resource_overdraft"

_JOB_SPEC_FIELDS = frozenset(
    {
        "job_id",
        "operation_id",
        "command",
        "environment",
        "files",
        "memory_limit",
        "memory_reserve",
        "job_proxy_memory_reserve",
        "job_proxy_estimated_memory",
        "interruption_signal",
        "task_name",
        "job_index",
        "keep_sandbox",
        "resources",
        "network",
        "waiting_for_resources_timeout",
        "custom_statistics_count_limit",
        "tmpfs",
    }
)
JOB_NETWORKS = ("shared", "isolated")
"""``network`` of a job spec: ``isolated`` asks for a network namespace of the job's own (the scheduler sends it
when it runs without authentication, so a job cannot reach it and act as root); a node that cannot give one
refuses the job."""


class JobState(enum.StrEnum):
    """Job states as YTsaurus names them in ``list_jobs``."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"


def parse_signal(value: Any, path: str) -> signal_module.Signals:
    """A signal from its name (``SIGINT``, ``INT``) or number; the field path is named on error."""
    if isinstance(value, bool):
        raise ConfigError(path, f"expected a signal name like SIGINT, got {value!r}")
    if isinstance(value, int):
        try:
            return signal_module.Signals(value)
        except ValueError:
            raise ConfigError(path, f"unknown signal number {value}") from None
    if isinstance(value, str):
        name = value.strip().upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        try:
            return signal_module.Signals[name]
        except KeyError:
            raise ConfigError(path, f"unknown signal {value!r} (use a name like SIGINT or SIGUSR1)") from None
    raise ConfigError(path, f"expected a signal name like SIGINT, got {type(value).__name__}")


def _optional_size(value: Any, path: str) -> float | None:
    return None if value is None else parse_size(value, path)


@dataclass(frozen=True)
class TmpfsVolume:
    """A tmpfs the node mounts for a job: ``path`` relative to its sandbox, ``size`` bytes (mounted by a slot's
    keeper, ``keeper._mount_tmpfs``, or by bubblewrap, ``isolation.wrap``)."""

    path: str
    size: int

    def __post_init__(self) -> None:
        if not is_sandbox_path(self.path):
            raise ConfigError(
                "path", f"expected a path inside the job's sandbox (relative, normalized), got {self.path!r}"
            )
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size <= 0:
            raise ConfigError("size", f"expected a positive number of bytes, got {self.size!r}")


@dataclass(frozen=True)
class JobSpec:
    """What the scheduler asks a node to run: one job of one operation's task.

    ``memory_reserve`` is the user job's reserve the scheduler counted (memory_limit × digest factor);
    ``memory_limit`` is the user's hard limit (exceeding it fails the job). ``resources`` is the allocation's
    resource vector the node counts as usage; its memory defaults to the user job and job proxy reserves.
    """

    job_id: str
    operation_id: str
    command: str
    environment: Mapping[str, str] = field(default_factory=dict)
    memory_limit: float | None = None
    memory_reserve: float = 0.0
    job_proxy_memory_reserve: float = 0.0
    job_proxy_estimated_memory: float = 0.0
    interruption_signal: signal_module.Signals | str | int | None = None
    task_name: str = "main"
    job_index: int = 0
    keep_sandbox: bool = False
    resources: Vector | None = None
    files: tuple[JobFile, ...] = ()
    """Written into the sandbox before the command runs (``pooltree/node/files.py``)."""
    network: str = "shared"
    """``isolated``: the job runs in a network namespace of its own (only its own loopback); see JOB_NETWORKS."""
    waiting_for_resources_timeout: float | None = None
    """Seconds the job may wait on the node for resources other jobs still hold (its GPUs), from the tree's
    ``waiting_for_resources_on_node_timeout``; None: the node's default (``node/gpu.py``)."""
    custom_statistics_count_limit: int = DEFAULT_CUSTOM_STATISTICS_COUNT_LIMIT
    tmpfs: tuple[TmpfsVolume, ...] = ()
    """The task's ``tmpfs_path`` / ``tmpfs_volumes``: mounted in the sandbox before the command runs."""
    """How many custom statistics paths the job may write to descriptor 5 (``node/user_statistics.py``)."""

    def __post_init__(self) -> None:
        if self.interruption_signal is not None and not isinstance(
            self.interruption_signal, signal_module.Signals
        ):
            object.__setattr__(
                self, "interruption_signal", parse_signal(self.interruption_signal, "interruption_signal")
            )
        if self.resources is None:
            object.__setattr__(self, "resources", vector(user_slots=1, memory=self.total_memory_reserve))
        for name in ("job_id", "operation_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(name, f"expected a non-empty string, got {value!r}")
            if "/" in value or value in (".", "..") or "\0" in value:
                raise ConfigError(name, f"{value!r} cannot be used as a sandbox directory name")
        if self.job_id.startswith("."):
            raise ConfigError(
                "job_id", f"{self.job_id!r}: names starting with '.' are the node's own directories"
            )
        if not isinstance(self.command, str) or not self.command.strip():
            raise ConfigError("command", f"expected a non-empty shell command, got {self.command!r}")
        if not isinstance(self.task_name, str) or not self.task_name:
            raise ConfigError("task_name", f"expected a non-empty string, got {self.task_name!r}")
        for key, value in self.environment.items():
            path = join_path("environment", str(key))
            if not isinstance(key, str) or not key or "=" in key or "\0" in key:
                raise ConfigError(
                    path, "environment variable names must be non-empty strings without '=' or NUL"
                )
            if not isinstance(value, str) or "\0" in value:
                raise ConfigError(path, f"expected a string value without NUL, got {value!r}")
        if self.memory_limit is not None and not (math.isfinite(self.memory_limit) and self.memory_limit > 0):
            raise ConfigError(
                "memory_limit", f"must be a positive number of bytes, got {self.memory_limit!r}"
            )
        for name in ("memory_reserve", "job_proxy_memory_reserve", "job_proxy_estimated_memory"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(name, f"must be a non-negative number of bytes, got {value!r}")
        if self.memory_limit is not None and self.memory_reserve > self.memory_limit:
            raise ConfigError(
                "memory_reserve",
                f"reserve {self.memory_reserve:.0f} exceeds memory_limit {self.memory_limit:.0f}",
            )
        paths = [volume.path for volume in self.tmpfs]
        for index, path in enumerate(paths):
            if any(other == path or other.startswith(path + "/") for other in paths[index + 1 :]):
                raise ConfigError(f"tmpfs[{index}].path", f"{path!r} holds another tmpfs of the job")
        limit = self.custom_statistics_count_limit
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_CUSTOM_STATISTICS_COUNT_LIMIT
        ):
            raise ConfigError(
                "custom_statistics_count_limit",
                f"expected an integer from 1 to {MAX_CUSTOM_STATISTICS_COUNT_LIMIT}, got {limit!r}",
            )
        if isinstance(self.job_index, bool) or not isinstance(self.job_index, int) or self.job_index < 0:
            raise ConfigError("job_index", f"expected a non-negative integer, got {self.job_index!r}")
        if (
            not isinstance(self.resources, np.ndarray)
            or self.resources.shape != (len(RESOURCES),)
            or not np.all(np.isfinite(self.resources))
            or np.any(self.resources < 0)
        ):
            raise ConfigError(
                "resources", "expected a non-negative finite vector of user_slots, cpu, gpu, memory, network"
            )

    @property
    def total_memory_reserve(self) -> float:
        """The memory the scheduler counted for this job: user job plus job proxy reserve."""
        return self.memory_reserve + self.job_proxy_memory_reserve

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "start") -> JobSpec:
        """A spec from a heartbeat-response map; unknown keys and bad values name their field."""
        if not isinstance(data, Mapping):
            raise ConfigError(path, f"expected a map describing a job, got {type(data).__name__}")
        unknown = sorted(set(map(str, data)) - _JOB_SPEC_FIELDS)
        if unknown:
            raise ConfigError(
                join_path(path, unknown[0]),
                f"unknown job field; known: {', '.join(sorted(_JOB_SPEC_FIELDS))}",
            )
        for required in ("job_id", "operation_id", "command"):
            if required not in data:
                raise ConfigError(join_path(path, required), "required field is missing")
        kwargs: dict[str, Any] = {k: data[k] for k in ("job_id", "operation_id", "command") if k in data}
        if "environment" in data:
            env = data["environment"]
            if not isinstance(env, Mapping):
                raise ConfigError(join_path(path, "environment"), f"expected a map, got {type(env).__name__}")
            kwargs["environment"] = dict(env)
        if data.get("files") is not None:
            kwargs["files"] = parse_job_files(data["files"], join_path(path, "files"))
        kwargs["memory_limit"] = _optional_size(data.get("memory_limit"), join_path(path, "memory_limit"))
        for name in ("memory_reserve", "job_proxy_memory_reserve", "job_proxy_estimated_memory"):
            if name in data:
                kwargs[name] = parse_size(data[name], join_path(path, name))
        if data.get("interruption_signal") is not None:
            kwargs["interruption_signal"] = parse_signal(
                data["interruption_signal"], join_path(path, "interruption_signal")
            )
        for name, kind in (
            ("task_name", str),
            ("job_index", int),
            ("keep_sandbox", bool),
            ("custom_statistics_count_limit", int),
        ):
            if name in data:
                value = data[name]
                if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                    raise ConfigError(join_path(path, name), f"expected {kind.__name__}, got {value!r}")
                kwargs[name] = value
        if "network" in data:
            if data["network"] not in JOB_NETWORKS:
                raise ConfigError(
                    join_path(path, "network"),
                    f"expected one of {', '.join(JOB_NETWORKS)}, got {data['network']!r}",
                )
            kwargs["network"] = data["network"]
        if data.get("waiting_for_resources_timeout") is not None:
            value = data["waiting_for_resources_timeout"]
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ConfigError(
                    join_path(path, "waiting_for_resources_timeout"), f"expected seconds >= 0, got {value!r}"
                )
            kwargs["waiting_for_resources_timeout"] = float(value)
        if data.get("tmpfs") is not None:
            kwargs["tmpfs"] = _parse_tmpfs(data["tmpfs"], join_path(path, "tmpfs"))
        if data.get("resources") is not None:
            resources = parse_resources(data["resources"], join_path(path, "resources"))
            given = {str(key) for key in data["resources"]}
            if "user_slots" not in given:
                resources[USER_SLOTS] = 1.0
            if not given & {"memory", "user_memory"}:
                reserve = kwargs.get("memory_reserve", 0.0) + kwargs.get("job_proxy_memory_reserve", 0.0)
                resources[MEMORY] = reserve
            kwargs["resources"] = resources
        try:
            return cls(**kwargs)
        except ConfigError as error:
            raise ConfigError(join_path(path, error.path), error.reason) from None


def _parse_tmpfs(value: Any, path: str) -> tuple[TmpfsVolume, ...]:
    """``[{path, size}, ...]`` of a heartbeat's job spec; errors name the entry and field."""
    if not isinstance(value, list):
        raise ConfigError(path, f"expected a list of {{path, size}} maps, got {type(value).__name__}")
    volumes = []
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        if not isinstance(item, Mapping) or set(item) != {"path", "size"}:
            raise ConfigError(where, "expected a map of exactly path and size")
        try:
            volumes.append(TmpfsVolume(item["path"], item["size"]))
        except ConfigError as error:
            raise ConfigError(join_path(where, error.path), error.reason) from None
    return tuple(volumes)


def exit_error(returncode: int) -> dict:
    """ "User job failed" wrapping the process error for a non-zero exit code or a fatal signal."""
    if returncode < 0:
        number = -returncode
        try:
            name = signal_module.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        inner = yt_error(
            PROCESS_SIGNAL, f"Process terminated by signal {number}", {"signal": number, "signal_name": name}
        )
    else:
        inner = yt_error(
            PROCESS_NON_ZERO_EXIT_CODE, f"Process exited with code {returncode}", {"exit_code": returncode}
        )
    return yt_error(USER_JOB_FAILED, "User job failed", {}, [inner])


def memory_limit_error(limit: float, usage: float, pids: list[int]) -> dict:
    """The failure of a job whose process tree went above its ``memory_limit``."""
    return yt_error(
        MEMORY_LIMIT_EXCEEDED,
        "Memory limit exceeded",
        {"limit": int(limit), "usage": int(usage), "processes": sorted(pids)},
    )


def abort_error(reason: str, attributes: Mapping[str, Any] | None = None) -> dict:
    """The error of an aborted job: resource overdraft gets its own code, the rest are scheduler aborts."""
    attrs = {"abort_reason": reason, **dict(attributes or {})}
    if reason == RESOURCE_OVERDRAFT_REASON:
        return yt_error(RESOURCE_OVERDRAFT, "Job aborted due to resource overdraft", attrs)
    return yt_error(ABORT_BY_SCHEDULER, "Job aborted by scheduler", attrs)


@dataclass(frozen=True)
class JobResult:
    """The outcome of one job, as the node reports it once and the scheduler stores it."""

    job_id: str
    operation_id: str
    task_name: str
    state: JobState
    start_time: float
    finish_time: float
    exit_code: int | None = None
    error: dict | None = None
    abort_reason: str | None = None
    interruption_reason: str | None = None
    statistics: Mapping[str, float] = field(default_factory=dict)
    stderr_size: int = 0
    gpu_devices: tuple[int, ...] = ()
    """Host indices of the GPUs the job held (``node/gpu.py``)."""

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON/YSON-serialisable map of the result."""
        return wire.finished_job(
            self.job_id,
            self.operation_id,
            self.task_name,
            str(self.state),
            self.start_time,
            self.finish_time,
            statistics=self.statistics,
            stderr_size=self.stderr_size,
            exit_code=self.exit_code,
            error=self.error,
            abort_reason=self.abort_reason,
            interruption_reason=self.interruption_reason,
            **({wire.GPU_DEVICES: list(self.gpu_devices)} if self.gpu_devices else {}),
        )


@dataclass(frozen=True)
class MemoryTrack:
    """What the executor measured about one job's memory: the user job's and the job proxy's peaks (bytes)."""

    max_memory: float = 0.0
    job_proxy_max_memory: float = 0.0


def job_statistics(
    spec: JobSpec, track: MemoryTrack, *, total_seconds: float, exec_seconds: float
) -> dict[str, float]:
    """Job statistics under their YTsaurus names: memory in bytes, ``cumulative_*`` in bytes × seconds (the
    value times the exec time, as the controller's statistics define them), ``time/total`` and ``time/exec`` in
    milliseconds."""
    exec_seconds = max(exec_seconds, 0.0)
    stats: dict[str, float] = {
        "user_job/max_memory": round(track.max_memory),
        "user_job/memory_reserve": round(spec.memory_reserve),
        "job_proxy/max_memory": round(track.job_proxy_max_memory),
        "job_proxy/memory_reserve": round(spec.job_proxy_memory_reserve),
        "job_proxy/estimated_memory": round(spec.job_proxy_estimated_memory),
    }
    if spec.memory_limit is not None:
        stats["user_job/memory_limit"] = round(spec.memory_limit)
    for cumulative, base in CUMULATIVE_STATISTICS.items():
        if base in stats:
            stats[cumulative] = round(stats[base] * exec_seconds)
    stats["time/total"] = round(max(total_seconds, 0.0) * 1000.0)
    stats["time/exec"] = round(exec_seconds * 1000.0)
    return stats


def sandbox_path(root: Path, job_id: str) -> Path:
    """The job's own directory under the node's slot root (holds ``sandbox/``, ``stdout``, ``stderr``)."""
    return root / job_id
