"""Simulation scenarios (PRODUCT.md §4): a snapshot-shaped cluster and pool trees plus a workload.

A scenario document holds ``cluster``, ``pool_trees`` (or ``pool_trees_file``: a ``yt get //sys/pool_trees``
dump in YSON or JSON with pool options as attributes), ``scheduler`` settings of the simulated clock, optional
``controller_agent`` memory digest settings, ``node_failures``, and the workload: ``operations`` inline and/or
``workload_file`` (a CSV or JSONL trace, see :mod:`pooltree.sim.workload`). Everything is validated here; an
error is a ``ConfigError`` naming the field (``operations[3].tasks[0].job_count``).

Units: points in time (``submit_time``, ``node_failures[].at``) are seconds when given as plain numbers;
durations (``duration``, ``lifetime``, periods) follow the config convention: integers are milliseconds, strings
carry a unit (``30s``, ``5m``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pooltree.config import OperationSpec, cypress_dump_to_pool_trees, load_document, parse_snapshot
from pooltree.config.snapshot import OPERATION_TYPES, Snapshot
from pooltree.controllers.memory import MemoryDigestSettings
from pooltree.controllers.operations import gang_size_of
from pooltree.errors import ConfigError, join_path
from pooltree.resources import MEMORY, Vector, parse_duration, parse_resources, parse_size
from pooltree.sim.workload import load_trace

SCENARIO_KEYS = (
    "seed",
    "until",
    "scheduler",
    "controller_agent",
    "node_failures",
    "workload_file",
    "pool_trees_file",
    "report",
    "variants",
)
OPERATION_KEYS = ("id", "user", "type", "submit_time", "spec", "tasks", "lifetime", "in_timeframe")
TASK_KEYS = (
    "name",
    "job_count",
    "resources",
    "duration",
    "interruptible",
    "memory_usage",
    "memory_limit",
    "gang_options",
)
DISTRIBUTIONS = ("fixed", "lognormal", "uniform")
DEFAULT_HORIZON = 7 * 86400.0
"""Without ``until`` a run stops at the last submit time plus this horizon (a week) at the latest."""


def _map(value: Any, path: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"expected {what}, got {type(value).__name__}")
    return value


def _check_keys(value: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in value:
        if key not in allowed:
            raise ConfigError(
                join_path(path, str(key)), f"unknown key {key!r}; expected one of {', '.join(allowed)}"
            )


def parse_time_point(value: Any, path: str) -> float:
    """A point in simulated time: seconds as a plain number, or a duration string (``600s``, ``1h``)."""
    if isinstance(value, bool):
        raise ConfigError(path, f"expected seconds or a duration string, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(path, f"time must be a finite number of seconds >= 0, got {value!r}")
        return float(value)
    if isinstance(value, str):
        return parse_duration(value, path)
    raise ConfigError(path, f"expected seconds or a duration string, got {type(value).__name__}")


@dataclass(frozen=True)
class Distribution:
    """A positive random quantity: ``fixed`` (value), ``lognormal`` (median, sigma) or ``uniform`` (low, high)."""

    kind: str
    a: float
    b: float = 0.0

    def sample(self, rng: random.Random) -> float:
        """One draw from ``rng`` (a fixed value draws nothing, so it never shifts the random sequence)."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "lognormal":
            return self.a * math.exp(self.b * rng.gauss(0.0, 1.0))
        return self.a + (self.b - self.a) * rng.random()

    @property
    def mean(self) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "lognormal":
            return self.a * math.exp(self.b * self.b / 2.0)
        return (self.a + self.b) / 2.0

    def to_dict(self, unit: str) -> Any:
        """The scenario form (``unit`` is ``s`` for durations, ``bytes`` for sizes)."""

        def show(x: float) -> Any:
            return f"{x:g}s" if unit == "s" else round(x)

        if self.kind == "fixed":
            return show(self.a)
        if self.kind == "lognormal":
            return {"distribution": "lognormal", "median": show(self.a), "sigma": self.b}
        return {"distribution": "uniform", "min": show(self.a), "max": show(self.b)}


def parse_distribution(value: Any, path: str, *, size: bool) -> Distribution:
    """``300s`` / ``1.2Gi`` or ``{distribution: lognormal, median, sigma}`` / ``{distribution: uniform, min, max}``."""
    parse = (lambda v, p: parse_size(v, p)) if size else (lambda v, p: parse_duration(v, p))
    if not isinstance(value, Mapping):
        return Distribution("fixed", parse(value, path))
    kind = value.get("distribution", "fixed")
    if kind not in DISTRIBUTIONS:
        raise ConfigError(
            join_path(path, "distribution"),
            f"unknown distribution {kind!r}; known: {', '.join(DISTRIBUTIONS)}",
        )
    if kind == "fixed":
        _check_keys(value, ("distribution", "value"), path)
        if "value" not in value:
            raise ConfigError(join_path(path, "value"), "required for a fixed distribution")
        return Distribution("fixed", parse(value["value"], join_path(path, "value")))
    if kind == "lognormal":
        _check_keys(value, ("distribution", "median", "sigma"), path)
        if "median" not in value:
            raise ConfigError(join_path(path, "median"), "required for a lognormal distribution")
        median = parse(value["median"], join_path(path, "median"))
        sigma = value.get("sigma", 0.5)
        if isinstance(sigma, bool) or not isinstance(sigma, int | float) or not 0 <= sigma <= 5:
            raise ConfigError(join_path(path, "sigma"), f"must be a number in [0, 5], got {sigma!r}")
        if median <= 0:
            raise ConfigError(join_path(path, "median"), "must be positive")
        return Distribution("lognormal", median, float(sigma))
    _check_keys(value, ("distribution", "min", "max"), path)
    for key in ("min", "max"):
        if key not in value:
            raise ConfigError(join_path(path, key), "required for a uniform distribution")
    low = parse(value["min"], join_path(path, "min"))
    high = parse(value["max"], join_path(path, "max"))
    if high < low:
        raise ConfigError(join_path(path, "max"), "must not be less than min")
    return Distribution("uniform", low, high)


@dataclass(frozen=True)
class SimTask:
    """One task of a simulated operation: jobs of one shape with their duration and memory behaviour."""

    name: str
    job_count: int
    resources: Vector
    duration: Distribution | None
    """``None``: jobs run until the operation completes (vanilla services)."""
    interruptible: bool = False
    memory_usage: Distribution | None = None
    """Actual peak memory of the user job; when set, the memory digest defines the allocation's memory."""
    memory_limit: float = 0.0
    gang_size: int | None = None
    """YTsaurus ``gang_options`` (vanilla): ranked jobs whose loss restarts every job of the operation."""


@dataclass(frozen=True)
class SimOperation:
    """One operation of the workload."""

    id: str
    user: str
    type: str
    submit_time: float
    spec: OperationSpec
    raw_spec: Mapping[str, Any]
    tasks: tuple[SimTask, ...]
    lifetime: float | None = None
    """Vanilla: the operation is completed this long after it starts running (``None``: at the end)."""
    in_timeframe: bool = True
    placed: tuple[str, ...] = ()
    """Node addresses of jobs that already run when the run starts (a forecast forked from a live cluster, see
    ``pooltree.forecast``): when the operation arrives running, its first ``len(placed)`` jobs in task order are
    adopted on these nodes without a heartbeat (``SchedulerCore.adopt_allocation``)."""
    placed_since: tuple[float, ...] = ()
    """When each placed job really started (simulated seconds, usually negative): its allocation's start time."""
    below_fair_share_since: float | None = None
    """The operation's starvation clock at arrival (simulated seconds, usually negative): it has been below its
    fair share since then, so it starves when its timeout has passed from that moment, not from the arrival."""

    @property
    def job_count(self) -> int:
        return sum(task.job_count for task in self.tasks)


@dataclass(frozen=True)
class NodeFailure:
    address: str
    at: float
    duration: float


@dataclass(frozen=True)
class SchedulerSettings:
    """The simulated clock: update and heartbeat periods, heartbeat jitter, how long interruption takes."""

    fair_share_update_period: float = 1.0
    node_heartbeat_period: float = 1.0
    node_heartbeat_jitter: float = 0.1
    interruption_delay: float = 2.0
    skip_idle_heartbeats: bool = True
    skip_unchanged_fair_share_updates: bool = True


@dataclass(frozen=True)
class ReportSettings:
    timeline_operations: bool = True
    """Also write operation rows to timeline.csv (pools are always written)."""
    timeline_period: float = 0.0
    """Sample the timeline at most this often (0: every fair-share update)."""
    event_log: bool = True


@dataclass(frozen=True)
class Scenario:
    """A validated scenario."""

    snapshot: Snapshot
    scheduler: SchedulerSettings
    memory: MemoryDigestSettings
    operations: tuple[SimOperation, ...]
    node_failures: tuple[NodeFailure, ...] = ()
    seed: int = 0
    until: float | None = None
    report: ReportSettings = field(default_factory=ReportSettings)
    source: str = "<scenario>"
    endless: tuple[tuple[str, str], ...] = ()
    """(path, operation id) of vanilla operations that run until completed and have no lifetime: such a scenario
    needs an end, its ``until`` or the run's (``--until``); see :meth:`check_end`."""

    def check_end(self, until: float | None) -> None:
        """Raise when the run would have no end: an endless service, no lifetime, no ``until`` of either kind."""
        if until is None and self.until is None and self.endless:
            path, operation_id = self.endless[0]
            raise ConfigError(
                path,
                f"operation {operation_id} runs services until it is completed: give it a lifetime, "
                "give the scenario an until or run with --until",
            )

    def horizon(self) -> float:
        """Where the run stops at the latest: ``until``, or the last submit time plus a week."""
        if self.until is not None:
            return self.until
        last = max((op.submit_time for op in self.operations), default=0.0)
        return last + DEFAULT_HORIZON


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"expected true or false, got {value!r}")
    return value


def parse_scheduler(value: Any, path: str = "scheduler") -> SchedulerSettings:
    value = _map(value or {}, path, "a map of scheduler settings")
    _check_keys(value, tuple(SchedulerSettings.__dataclass_fields__), path)
    defaults = SchedulerSettings()
    args: dict[str, Any] = {}
    for key in (
        "fair_share_update_period",
        "node_heartbeat_period",
        "node_heartbeat_jitter",
        "interruption_delay",
    ):
        if key in value:
            args[key] = parse_duration(value[key], join_path(path, key))
    for key in ("skip_idle_heartbeats", "skip_unchanged_fair_share_updates"):
        if key in value:
            args[key] = _bool(value[key], join_path(path, key))
    settings = SchedulerSettings(**{**defaults.__dict__, **args})
    for key in ("fair_share_update_period", "node_heartbeat_period"):
        if getattr(settings, key) <= 0:
            raise ConfigError(join_path(path, key), "must be positive")
    if settings.node_heartbeat_jitter >= settings.node_heartbeat_period:
        raise ConfigError(join_path(path, "node_heartbeat_jitter"), "must be less than node_heartbeat_period")
    return settings


def parse_report(value: Any, path: str = "report") -> ReportSettings:
    value = _map(value or {}, path, "a map of report settings")
    _check_keys(value, ("timeline_operations", "timeline_period", "event_log"), path)
    return ReportSettings(
        timeline_operations=_bool(
            value.get("timeline_operations", True), join_path(path, "timeline_operations")
        ),
        timeline_period=parse_duration(value.get("timeline_period", 0), join_path(path, "timeline_period")),
        event_log=_bool(value.get("event_log", True), join_path(path, "event_log")),
    )


def parse_task(value: Any, path: str, operation_type: str) -> SimTask:
    """One entry of ``tasks``."""
    value = _map(value, path, "a task map")
    _check_keys(value, TASK_KEYS, path)
    name = value.get("name", "main")
    if not isinstance(name, str) or not name:
        raise ConfigError(join_path(path, "name"), f"expected a non-empty string, got {name!r}")
    job_count = value.get("job_count", 1)
    if isinstance(job_count, bool) or not isinstance(job_count, int) or job_count < 1:
        raise ConfigError(join_path(path, "job_count"), f"expected an integer >= 1, got {job_count!r}")
    if value.get("resources") is None:
        raise ConfigError(join_path(path, "resources"), "required: the resources of one job")
    resources = parse_resources(value["resources"], join_path(path, "resources"))
    if not np.any(resources > 0):
        raise ConfigError(join_path(path, "resources"), "a job must need some resource")
    duration = None
    if value.get("duration") is not None:
        duration = parse_distribution(value["duration"], join_path(path, "duration"), size=False)
    elif operation_type != "vanilla":
        raise ConfigError(
            join_path(path, "duration"), f"required for {operation_type} jobs (they run to completion)"
        )
    interruptible = _bool(value.get("interruptible", False), join_path(path, "interruptible"))
    memory_usage = None
    if value.get("memory_usage") is not None:
        memory_usage = parse_distribution(value["memory_usage"], join_path(path, "memory_usage"), size=True)
    memory_limit = float(resources[MEMORY])
    if value.get("memory_limit") is not None:
        memory_limit = parse_size(value["memory_limit"], join_path(path, "memory_limit"))
    if memory_usage is not None and memory_limit <= 0:
        raise ConfigError(
            join_path(path, "memory_limit"),
            "memory_usage needs a memory limit (memory_limit or resources.memory)",
        )
    gang_size = gang_size_of(value.get("gang_options"), job_count, join_path(path, "gang_options"))
    if gang_size is not None and operation_type != "vanilla":
        raise ConfigError(join_path(path, "gang_options"), "only vanilla operations have gang tasks")
    return SimTask(name, job_count, resources, duration, interruptible, memory_usage, memory_limit, gang_size)


def parse_operation(value: Any, path: str, *, operation_id: str, snapshot: Snapshot) -> SimOperation:
    """One workload operation; its pool tree must exist (the simulator runs each operation in one tree)."""
    value = _map(value, path, "an operation map")
    _check_keys(value, OPERATION_KEYS, path)
    operation_type = value.get("type", "map")
    if operation_type not in OPERATION_TYPES:
        raise ConfigError(
            join_path(path, "type"),
            f"unknown operation type {operation_type!r}; known: {', '.join(sorted(OPERATION_TYPES))}",
        )
    user = value.get("user", "root")
    if not isinstance(user, str) or not user:
        raise ConfigError(join_path(path, "user"), f"expected a non-empty user name, got {user!r}")
    submit_time = parse_time_point(value.get("submit_time", 0), join_path(path, "submit_time"))
    raw_spec = value.get("spec") or {}
    spec = OperationSpec.parse(raw_spec, join_path(path, "spec"))
    trees = spec.pool_trees_or(snapshot.default_pool_tree)
    if not trees:
        raise ConfigError(
            join_path(join_path(path, "spec"), "pool_trees"),
            "no pool tree: give pool_trees or the scenario's default_pool_tree",
        )
    for tree in trees:
        if tree not in snapshot.pool_trees:
            raise ConfigError(join_path(join_path(path, "spec"), "pool_trees"), f'unknown pool tree "{tree}"')
    tasks_value = value.get("tasks")
    if not isinstance(tasks_value, list) or not tasks_value:
        raise ConfigError(join_path(path, "tasks"), "required: a non-empty list of tasks")
    tasks = tuple(
        parse_task(task, join_path(join_path(path, "tasks"), index), operation_type)
        for index, task in enumerate(tasks_value)
    )
    names = [task.name for task in tasks]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise ConfigError(
                join_path(join_path(join_path(path, "tasks"), index), "name"), f"duplicate task name {name!r}"
            )
    lifetime = None
    if value.get("lifetime") is not None:
        if operation_type != "vanilla":
            raise ConfigError(join_path(path, "lifetime"), "only vanilla operations have a lifetime")
        lifetime = parse_duration(value["lifetime"], join_path(path, "lifetime"))
    in_timeframe = _bool(value.get("in_timeframe", True), join_path(path, "in_timeframe"))
    return SimOperation(
        operation_id,
        user,
        operation_type,
        submit_time,
        spec,
        dict(raw_spec),
        tasks,
        lifetime,
        in_timeframe,
    )


def parse_operations(
    values: Any, snapshot: Snapshot, path: str = "operations", *, taken: set[str] | None = None
) -> list[SimOperation]:
    """A list of operations; ids must be unique (missing ids become ``op-N``)."""
    if not isinstance(values, list):
        raise ConfigError(path, f"expected a list of operations, got {type(values).__name__}")
    taken = taken if taken is not None else set()
    result = []
    for index, value in enumerate(values):
        item_path = join_path(path, index)
        operation_id = value.get("id") if isinstance(value, Mapping) else None
        if operation_id is None:
            number = len(taken) + 1
            while f"op-{number}" in taken:
                number += 1
            operation_id = f"op-{number}"
        elif not isinstance(operation_id, str) or not operation_id:
            raise ConfigError(
                join_path(item_path, "id"), f"expected a non-empty string, got {operation_id!r}"
            )
        if operation_id in taken:
            raise ConfigError(join_path(item_path, "id"), f'duplicate operation id "{operation_id}"')
        taken.add(operation_id)
        result.append(parse_operation(value, item_path, operation_id=operation_id, snapshot=snapshot))
    return result


def node_addresses(snapshot: Snapshot) -> list[tuple[str, Vector, frozenset[str]]]:
    """Every exec node of the cluster: a group of ``count`` nodes is expanded to ``<address>-<i>``."""
    if snapshot.cluster.total_resources is not None:
        return []
    nodes = []
    for group in snapshot.cluster.nodes:
        if group.count == 1:
            nodes.append((group.address, np.array(group.resource_limits), group.tags))
        else:
            width = len(str(group.count))
            for index in range(group.count):
                nodes.append(
                    (f"{group.address}-{index:0{width}d}", np.array(group.resource_limits), group.tags)
                )
    return nodes


def parse_node_failures(value: Any, snapshot: Snapshot, path: str = "node_failures") -> list[NodeFailure]:
    if not isinstance(value, list):
        raise ConfigError(path, f"expected a list of {{address, at, duration}}, got {type(value).__name__}")
    known = {address for address, _, _ in node_addresses(snapshot)}
    failures = []
    for index, item in enumerate(value):
        item_path = join_path(path, index)
        item = _map(item, item_path, "a map with address, at, duration")
        _check_keys(item, ("address", "at", "duration"), item_path)
        address = item.get("address")
        if address not in known:
            raise ConfigError(join_path(item_path, "address"), f"unknown node {address!r}")
        if "at" not in item:
            raise ConfigError(join_path(item_path, "at"), "required: when the node fails")
        at = parse_time_point(item["at"], join_path(item_path, "at"))
        duration = parse_duration(item.get("duration", "1h"), join_path(item_path, "duration"))
        failures.append(NodeFailure(address, at, duration))
    return failures


def parse_scenario(document: Any, *, base_dir: Path | None = None, source: str = "<scenario>") -> Scenario:
    """Validate a scenario document (files it names are read relative to ``base_dir``)."""
    document = dict(_map(document, "", "a scenario map"))
    base_dir = base_dir or Path(".")
    if document.get("pool_trees_file") is not None:
        if document.get("pool_trees") is not None:
            raise ConfigError("pool_trees_file", "give either pool_trees or pool_trees_file, not both")
        file_path = document["pool_trees_file"]
        if not isinstance(file_path, str):
            raise ConfigError("pool_trees_file", "expected a file path")
        dump = load_document(base_dir / file_path)
        document["pool_trees"] = cypress_dump_to_pool_trees(dump)
    operations_doc = document.pop("operations", None)
    snapshot = parse_snapshot(document, extra_keys=SCENARIO_KEYS)
    if snapshot.cluster.total_resources is not None:
        raise ConfigError(
            "cluster.total_resources", "the simulator needs cluster.nodes (it runs node heartbeats)"
        )
    taken: set[str] = set()
    operations = parse_operations(operations_doc or [], snapshot, taken=taken)
    if document.get("workload_file") is not None:
        trace = document["workload_file"]
        if not isinstance(trace, str):
            raise ConfigError("workload_file", "expected a file path")
        operations += parse_operations(
            load_trace(base_dir / trace), snapshot, path=f"workload_file({trace})", taken=taken
        )
    if not operations:
        raise ConfigError("operations", "the workload is empty: give operations or workload_file")
    endless = tuple(
        (
            f"operations[{index}].lifetime" if index < len(operations_doc or []) else "until",
            operation.id,
        )
        for index, operation in enumerate(operations)
        if any(task.duration is None for task in operation.tasks) and operation.lifetime is None
    )
    seed = document.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError("seed", f"expected an integer >= 0, got {seed!r}")
    until = None
    if document.get("until") is not None:
        until = parse_duration(document["until"], "until")
    memory = MemoryDigestSettings.from_mapping(document.get("controller_agent"), "controller_agent")
    failures = parse_node_failures(document.get("node_failures") or [], snapshot)
    return Scenario(
        snapshot=snapshot,
        scheduler=parse_scheduler(document.get("scheduler")),
        memory=memory,
        operations=tuple(sorted(operations, key=lambda op: op.submit_time)),
        node_failures=tuple(failures),
        seed=seed,
        until=until,
        report=parse_report(document.get("report")),
        source=source,
        endless=endless,
    )


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (.yaml/.yml, .json or .yson)."""
    path = Path(path)
    return parse_scenario(load_document(path), base_dir=path.parent, source=str(path))
