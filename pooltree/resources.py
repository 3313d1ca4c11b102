"""Resource vectors, sizes and durations: the units every other part of pooltree speaks.

A resource vector is a ``numpy`` array of five float64 values in the YTsaurus order
``user_slots, cpu, gpu, memory, network``. Absolute vectors hold counts, cores and bytes; share vectors hold
fractions of a tree's total resources. ``inf`` in a limits vector means "unlimited".
Outputs spell the memory key ``memory`` everywhere; inputs also accept YTsaurus's ``user_memory``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from pooltree.errors import ConfigError, join_path

RESOURCES: tuple[str, ...] = ("user_slots", "cpu", "gpu", "memory", "network")
USER_SLOTS, CPU, GPU, MEMORY, NETWORK = range(5)
RESOURCE_COUNT = len(RESOURCES)
RESOURCE_ALIASES: dict[str, str] = {"user_memory": "memory"}

Vector = np.ndarray

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([KMGTPE]?)(i?)B?\s*$", re.IGNORECASE)
_SIZE_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|s|m|h|d)\s*$", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def zeros() -> Vector:
    return np.zeros(RESOURCE_COUNT)


def unlimited() -> Vector:
    return np.full(RESOURCE_COUNT, np.inf)


def vector(
    user_slots: float = 0, cpu: float = 0, gpu: float = 0, memory: float = 0, network: float = 0
) -> Vector:
    return np.array([user_slots, cpu, gpu, memory, network], dtype=float)


def same_vector(a: Vector, b: Vector) -> bool:
    """``np.array_equal(a, b)`` for resource vectors (NaN never equal), without its generic checks: a heartbeat
    compares its node's limits this way. Compared as Python lists (a NaN is a new float on each side, so it is
    never equal; -0.0 equals 0.0), a quarter of numpy's elementwise compare and reduce on five resources."""
    return a.shape == b.shape and a.tolist() == b.tolist()


def parse_size(value: Any, path: str = "") -> float:
    """Bytes from an integer or a string with a binary suffix (``512Mi``, ``64Gi``, ``1T``, ``10G``)."""
    if isinstance(value, bool):
        raise ConfigError(path, f"expected a size, got boolean {value!r}")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        match = _SIZE_RE.match(value)
        if not match:
            raise ConfigError(
                path, f"cannot parse size {value!r} (use bytes or a suffix like 512Mi, 64Gi, 1T)"
            )
        number = float(match.group(1)) * 1024 ** _SIZE_POWERS[match.group(2).upper()]
    else:
        raise ConfigError(path, f"expected a size, got {type(value).__name__}")
    if not math.isfinite(number) or number < 0:
        raise ConfigError(path, f"size must be a non-negative finite number, got {value!r}")
    return float(round(number))


def parse_duration(value: Any, path: str = "") -> float:
    """Seconds from YTsaurus integer milliseconds (``30000``) or a string with a unit (``30s``, ``5m``, ``250ms``)."""
    if isinstance(value, bool):
        raise ConfigError(path, f"expected a duration, got boolean {value!r}")
    if isinstance(value, int | float):
        seconds = float(value) / 1000.0
    elif isinstance(value, str):
        match = _DURATION_RE.match(value)
        if not match:
            raise ConfigError(
                path, f"cannot parse duration {value!r} (use milliseconds or a unit: 250ms, 30s, 5m, 1h, 1d)"
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
    else:
        raise ConfigError(path, f"expected a duration, got {type(value).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(path, f"duration must be non-negative, got {value!r}")
    return seconds


def parse_amount(name: str, value: Any, path: str) -> float:
    """One resource amount: memory accepts sizes; cpu keeps 2 decimal digits; the rest are counts."""
    if name == "memory":
        return parse_size(value, path)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(path, f"expected a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ConfigError(path, f"resource amount must be a non-negative finite number, got {value!r}")
    if name == "cpu":
        return round(number, 2)
    return number


def parse_resources(value: Any, path: str = "", *, missing: float = 0.0) -> Vector:
    """A resource vector from a map; ``missing`` fills absent keys (0 for usage/guarantees, inf for limits)."""
    if value is None:
        return np.full(RESOURCE_COUNT, missing)
    if not isinstance(value, Mapping):
        raise ConfigError(
            path, f"expected a map of resources ({', '.join(RESOURCES)}), got {type(value).__name__}"
        )
    result = np.full(RESOURCE_COUNT, missing)
    seen: set[str] = set()
    for raw_key, amount in value.items():
        key = RESOURCE_ALIASES.get(str(raw_key), str(raw_key))
        field = join_path(path, str(raw_key))
        if key not in RESOURCES:
            raise ConfigError(field, f"unknown resource {raw_key!r}; known resources: {', '.join(RESOURCES)}")
        if key in seen:
            raise ConfigError(field, f"resource {key!r} is given twice")
        seen.add(key)
        result[RESOURCES.index(key)] = parse_amount(key, amount, field)
    return result


def specified_keys(value: Mapping[str, Any] | None) -> frozenset[str]:
    """Canonical names of the resources a map specifies explicitly."""
    if not value:
        return frozenset()
    return frozenset(RESOURCE_ALIASES.get(str(k), str(k)) for k in value)


def round_resources(x: Vector) -> Vector:
    """YTsaurus rounding of absolute resources: cpu to 0.01, everything else to whole units."""
    out = np.where(np.isfinite(x), np.round(x), x)
    out[CPU] = round(float(x[CPU]), 2) if math.isfinite(x[CPU]) else x[CPU]
    return out


def resources_to_dict(x: Vector, *, drop_infinite: bool = False) -> dict[str, float | int]:
    """Absolute vector as an output map: integers where the resource is integral, cpu rounded to 0.01."""
    out: dict[str, float | int] = {}
    values = x.tolist() if isinstance(x, np.ndarray) else list(x)  # one conversion, not a numpy scalar each
    for name, value in zip(RESOURCES, values, strict=False):
        amount = float(value)
        if math.isinf(amount):
            if drop_infinite:
                continue
            out[name] = amount
        elif name == "cpu":
            out[name] = round(amount, 2)
        else:
            out[name] = round(amount)
    return out


def share_to_dict(x: Vector) -> dict[str, float]:
    """Share vector as an output map of floats."""
    return {name: float(x[index]) for index, name in enumerate(RESOURCES)}


def share(x: Vector, total: Vector) -> Vector:
    """x / total componentwise, with 0 wherever total is 0 (YTsaurus convention)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(total > 0, x / np.where(total > 0, total, 1.0), 0.0)
    return out


def dominant_resource(x: Vector, total: Vector) -> str:
    """The first resource (in YTsaurus order) with the largest share of total; ``cpu`` for an all-zero vector."""
    best_index, best = CPU, 0.0
    for index in range(RESOURCE_COUNT):
        if total[index] > 0:
            ratio = x[index] / total[index]
            if ratio > best:
                best, best_index = ratio, index
    return RESOURCES[best_index]


def format_size(nbytes: float) -> str:
    """Human-readable bytes with a binary suffix (for tables)."""
    if math.isinf(nbytes):
        return "inf"
    for suffix, power in (("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)):
        unit = 1024**power
        if abs(nbytes) >= unit:
            return f"{nbytes / unit:.1f}{suffix}"
    return f"{int(nbytes)}"
