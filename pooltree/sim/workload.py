"""Workload traces: read CSV/JSONL traces operators export, write them, and generate synthetic ones.

A trace becomes a list of operation maps in the scenario form (validated by :mod:`pooltree.sim.scenario`).

* **JSONL**: one operation per line, exactly the scenario's ``operations[]`` form.
* **CSV**: one task per row; rows with the same ``id`` add tasks to one operation. Columns (header required;
  only ``submit_time`` and ``duration``-or-vanilla are needed): ``id, submit_time, user, pool, type, task,
  job_count, user_slots, cpu, gpu, memory, network, duration, duration_sigma, interruptible, memory_usage,
  memory_usage_sigma, memory_limit, preemption_mode, lifetime, in_timeframe``. Times and durations are seconds
  as plain numbers or strings with a unit; ``duration`` is the median when ``duration_sigma`` > 0 (lognormal);
  memory is bytes or a size with a suffix.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooltree.errors import ConfigError, join_path

CSV_COLUMNS = (
    "id",
    "submit_time",
    "user",
    "pool",
    "type",
    "task",
    "job_count",
    "user_slots",
    "cpu",
    "gpu",
    "memory",
    "network",
    "duration",
    "duration_sigma",
    "interruptible",
    "memory_usage",
    "memory_usage_sigma",
    "memory_limit",
    "preemption_mode",
    "lifetime",
    "in_timeframe",
)
_RESOURCE_COLUMNS = ("user_slots", "cpu", "gpu", "memory", "network")


def _number(text: str, path: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(path, f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(path, f"expected a finite number >= 0, got {text!r}")
    return value


def _seconds(text: str, path: str) -> str:
    """CSV times: a plain number means seconds; a string with a unit is kept for the scenario parser."""
    try:
        return f"{_number(text, path):g}s"
    except ConfigError:
        if text and text[-1].isalpha():
            return text
        raise


def _csv_bool(text: str, path: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no", ""):
        return False
    raise ConfigError(path, f"expected true or false, got {text!r}")


def _task_from_row(row: Mapping[str, str], path: str, operation_type: str) -> dict[str, Any]:
    task: dict[str, Any] = {"name": row.get("task") or "main"}
    if row.get("job_count"):
        count = _number(row["job_count"], join_path(path, "job_count"))
        if count != int(count):
            raise ConfigError(join_path(path, "job_count"), f"expected an integer, got {row['job_count']!r}")
        task["job_count"] = int(count)
    resources: dict[str, Any] = {}
    for name in _RESOURCE_COLUMNS:
        text = row.get(name)
        if text:
            resources[name] = (
                text if name == "memory" and not _is_number(text) else _number(text, join_path(path, name))
            )
            if name == "memory" and isinstance(resources[name], float):
                resources[name] = int(resources[name])
    task["resources"] = resources
    if row.get("duration"):
        median = _seconds(row["duration"], join_path(path, "duration"))
        sigma = (
            _number(row["duration_sigma"], join_path(path, "duration_sigma"))
            if row.get("duration_sigma")
            else 0.0
        )
        task["duration"] = (
            {"distribution": "lognormal", "median": median, "sigma": sigma} if sigma > 0 else median
        )
    if row.get("interruptible"):
        task["interruptible"] = _csv_bool(row["interruptible"], join_path(path, "interruptible"))
    if row.get("memory_usage"):
        usage: Any = row["memory_usage"]
        usage = int(_number(usage, join_path(path, "memory_usage"))) if _is_number(usage) else usage
        sigma = (
            _number(row["memory_usage_sigma"], join_path(path, "memory_usage_sigma"))
            if row.get("memory_usage_sigma")
            else 0.0
        )
        task["memory_usage"] = (
            {"distribution": "lognormal", "median": usage, "sigma": sigma} if sigma > 0 else usage
        )
    if row.get("memory_limit"):
        limit: Any = row["memory_limit"]
        task["memory_limit"] = (
            int(_number(limit, join_path(path, "memory_limit"))) if _is_number(limit) else limit
        )
    return task


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_csv_trace(text: str, source: str = "trace.csv") -> list[dict[str, Any]]:
    """Operations (scenario form) from a CSV trace; errors name ``<source>:<line>.<column>``."""
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None:
        raise ConfigError(source, "empty trace: a header line is required")
    for column in reader.fieldnames:
        if column not in CSV_COLUMNS:
            raise ConfigError(f"{source}:1.{column}", f"unknown column; known: {', '.join(CSV_COLUMNS)}")
    if "submit_time" not in reader.fieldnames:
        raise ConfigError(f"{source}:1", "the submit_time column is required")
    operations: dict[str, dict[str, Any]] = {}
    for line, row in enumerate(reader, start=2):
        path = f"{source}:{line}"
        operation_id = row.get("id") or f"trace-{line - 1}"
        operation_type = row.get("type") or "map"
        operation = operations.get(operation_id)
        if operation is None:
            spec: dict[str, Any] = {}
            if row.get("pool"):
                spec["pool"] = row["pool"]
            if row.get("preemption_mode"):
                spec["preemption_mode"] = row["preemption_mode"]
            operation = {
                "id": operation_id,
                "submit_time": _seconds(row.get("submit_time") or "0", join_path(path, "submit_time")),
                "user": row.get("user") or "root",
                "type": operation_type,
                "spec": spec,
                "tasks": [],
            }
            if row.get("lifetime"):
                operation["lifetime"] = _seconds(row["lifetime"], join_path(path, "lifetime"))
            if row.get("in_timeframe"):
                operation["in_timeframe"] = _csv_bool(row["in_timeframe"], join_path(path, "in_timeframe"))
            operations[operation_id] = operation
        operation["tasks"].append(_task_from_row(row, path, operation_type))
    return list(operations.values())


def parse_jsonl_trace(text: str, source: str = "trace.jsonl") -> list[dict[str, Any]]:
    """Operations from a JSONL trace (one scenario-form operation map per non-empty line)."""
    operations = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{source}:{line}", f"invalid JSON: {error.msg}") from None
        if not isinstance(value, dict):
            raise ConfigError(f"{source}:{line}", "expected one operation map per line")
        operations.append(value)
    return operations


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    """Read a ``.csv`` or ``.jsonl`` trace into scenario-form operation maps."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(str(path), f"cannot read trace: {error.strerror or error}") from None
    if path.suffix == ".csv":
        return parse_csv_trace(text, path.name)
    if path.suffix in (".jsonl", ".ndjson"):
        return parse_jsonl_trace(text, path.name)
    raise ConfigError(str(path), "unknown trace format: use .csv or .jsonl")


def write_trace(operations: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    """Write scenario-form operations as JSONL (``.jsonl``) or CSV (``.csv``, distributions flattened)."""
    path = Path(path)
    if path.suffix in (".jsonl", ".ndjson"):
        with path.open("w", encoding="utf-8") as out:
            for operation in operations:
                out.write(json.dumps(operation, sort_keys=True) + "\n")
        return
    if path.suffix != ".csv":
        raise ConfigError(str(path), "unknown trace format: use .csv or .jsonl")
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for operation in operations:
            for task in operation["tasks"]:
                row: dict[str, Any] = {
                    "id": operation["id"],
                    "submit_time": operation["submit_time"],
                    "user": operation.get("user", "root"),
                    "pool": operation.get("spec", {}).get("pool", ""),
                    "type": operation.get("type", "map"),
                    "task": task.get("name", "main"),
                    "job_count": task.get("job_count", 1),
                    "preemption_mode": operation.get("spec", {}).get("preemption_mode", ""),
                    "interruptible": str(task.get("interruptible", False)).lower(),
                    "lifetime": operation.get("lifetime", ""),
                }
                row.update(task.get("resources", {}))
                duration = task.get("duration")
                if isinstance(duration, Mapping):
                    row["duration"], row["duration_sigma"] = duration["median"], duration["sigma"]
                elif duration is not None:
                    row["duration"] = duration
                usage = task.get("memory_usage")
                if isinstance(usage, Mapping):
                    row["memory_usage"], row["memory_usage_sigma"] = usage["median"], usage["sigma"]
                elif usage is not None:
                    row["memory_usage"] = usage
                writer.writerow(row)


@dataclass(frozen=True)
class WorkloadParameters:
    """What ``pooltree workload generate`` draws from.

    Operations arrive per pool as a Poisson process (``rates``: operations per hour); each has a lognormal job
    count (median ``job_count``), ``cpu`` cores and ``memory`` bytes per job and lognormal job durations (median
    ``duration`` seconds, ``duration_sigma``); ``interruptible_fraction`` of them have interruptible jobs.
    """

    rates: Mapping[str, float]
    hours: float = 1.0
    job_count: float = 20.0
    job_count_sigma: float = 1.0
    cpu: float = 1.0
    memory: float = 4 * 1024.0**3
    duration: float = 300.0
    duration_sigma: float = 0.5
    interruptible_fraction: float = 0.0
    max_job_count: int = 10_000
    seed: int = 0

    def validate(self) -> None:
        if not self.rates:
            raise ConfigError(
                "rates", "give at least one pool with an arrival rate (pool=operations per hour)"
            )
        for pool, rate in self.rates.items():
            if not pool or not math.isfinite(rate) or rate <= 0:
                raise ConfigError(f"rates.{pool}", f"expected a positive rate per hour, got {rate!r}")
        checks = {
            "hours": self.hours > 0,
            "job_count": self.job_count >= 1,
            "job_count_sigma": 0 <= self.job_count_sigma <= 5,
            "cpu": self.cpu > 0,
            "memory": self.memory > 0,
            "duration": self.duration > 0,
            "duration_sigma": 0 <= self.duration_sigma <= 5,
            "interruptible_fraction": 0 <= self.interruptible_fraction <= 1,
            "max_job_count": self.max_job_count >= 1,
            "seed": self.seed >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ConfigError(name, f"out of range: {getattr(self, name)!r}")


def generate_workload(params: WorkloadParameters) -> list[dict[str, Any]]:
    """A synthetic trace in scenario form, sorted by submit time (deterministic for ``params.seed``)."""
    params.validate()
    operations: list[dict[str, Any]] = []
    horizon = params.hours * 3600.0
    for pool in sorted(params.rates):
        rng = random.Random(f"{params.seed}/{pool}")
        rate = params.rates[pool] / 3600.0
        t = rng.expovariate(rate)
        index = 0
        while t < horizon:
            index += 1
            jobs = round(params.job_count * math.exp(params.job_count_sigma * rng.gauss(0.0, 1.0)))
            jobs = max(1, min(params.max_job_count, jobs))
            task: dict[str, Any] = {
                "name": "main",
                "job_count": jobs,
                "resources": {"user_slots": 1, "cpu": params.cpu, "memory": int(params.memory)},
                "duration": (
                    {
                        "distribution": "lognormal",
                        "median": f"{params.duration:g}s",
                        "sigma": params.duration_sigma,
                    }
                    if params.duration_sigma > 0
                    else f"{params.duration:g}s"
                ),
            }
            if params.interruptible_fraction > 0 and rng.random() < params.interruptible_fraction:
                task["interruptible"] = True
            operations.append(
                {
                    "id": f"{pool}-{index}",
                    "submit_time": f"{round(t, 3)}s",
                    "user": f"user-{pool}",
                    "type": "map",
                    "spec": {"pool": pool},
                    "tasks": [task],
                }
            )
            t += rng.expovariate(rate)
    operations.sort(key=lambda op: (float(op["submit_time"][:-1]), op["id"]))
    return operations
