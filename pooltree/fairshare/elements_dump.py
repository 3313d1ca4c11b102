"""YTsaurus scheduler element dumps: load one as fair-share input and compare pooltree with production.

YTsaurus's ``yt/yt/library/vector_hdrf/unittests/fetch_scheduling_data`` script reads a pool tree's orchid
(``//sys/scheduler/orchid/scheduler/pool_trees/<tree>/{pools,operations}``) and writes a YSON list of
elements, parents before children:

- pools: ``type = "pool"``, ``name``, ``parent`` (``#`` for ``<Root>``), ``mode``, ``weight``,
  ``strong_guarantee_resources`` and ``total_fair_share`` (production's ``detailed_fair_share/total``); the
  root also carries ``resource_limits`` (the tree's total resources);
- operations: ``type = "operation"``, ``name``, ``parent``, ``resource_usage``, ``resource_demand``,
  ``operation_type``, ``weight`` and ``total_fair_share``.

``parse_elements_dump`` builds the tree the way YTsaurus's unit test ``TestExampleFromProductionCluster``
builds it from such a dump (``fair_share_update_ut.cpp`` with ``mock/fair_share_update_mock.cpp``):

- the total resources are the root's ``resource_limits``;
- a pool's strong guarantee is only the GPU of its ``strong_guarantee_resources`` (the test sets
  ``Gpu`` alone; the main resource stays cpu, so no other resource gets an implicit guarantee);
  ``guarantees="all"`` takes the whole vector instead (the orchid reports effective guarantees);
- pools keep the dump's mode and weight and have no resource limits; operations get the dump's demand,
  usage and weight, and no limits;
- vanilla operations are gang operations (the orchid does not say which operations are gangs, a gap
  YTsaurus's test notes in a comment, so the test treats every vanilla operation as one);
- children keep the dump's order; FIFO pools order their operations by weight only (the mock's
  ``HasHigherPriorityInFifoMode``), equal weights keeping the dump's order;
- the update runs with ``enable_step_function_for_gang_operations``,
  ``enable_improved_fair_share_by_fit_factor_computation`` and its ``distribution_gap`` variant on
  (``unit_test_settings``), and the main resource the test leaves at its default, cpu.

The tree's main resource is not in the dump, but the dump implies it (``ElementsDump.main_resource``): YTsaurus's
master refuses a guarantee in any resource without one in the main resource, so a tree whose pools set
guarantees only in GPU has ``main_resource = gpu``; other resources then get implicit guarantees in proportion to
the GPU ones. ``pooltree fair-share --elements-dump`` and the production figure use it.

What such a dump does not carry (so the update cannot use it): pools' resource limits, integral guarantees,
per-pool options (``allow_gang_operations``, ``enable_fair_share_truncation_in_fifo_pool``, ...),
operations' resource limits and start times, and which operations really are gangs.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pooltree.config.documents import loads_document
from pooltree.errors import ConfigError, join_path
from pooltree.fairshare.model import ROOT_ID, Element, FairShareResult, Operation, Pool, UpdateSettings
from pooltree.resources import GPU, RESOURCE_ALIASES, RESOURCE_COUNT, RESOURCES, Vector

GuaranteeMode = Literal["gpu", "all"]
POOL_MODES = ("fair_share", "fifo")
# The comparison of YTsaurus's figure: an element matches when every resource is within this of production.
MATCH_TOLERANCE = 1e-4


@dataclass(eq=False)
class ElementsDump:
    """A dump as fair-share input, with production's fair shares to compare against."""

    root: Pool
    total_resources: Vector
    production_fair_share: dict[str, Vector]  # element name -> production total_fair_share (shares)
    operation_types: dict[str, str]  # operation name -> operation_type
    order: list[str] = field(default_factory=list)  # element names in the dump's order
    # The tree's main resource as the dump implies it (``infer_main_resource``), None when it does not say.
    main_resource: str | None = None


def infer_main_resource(guaranteed: set[str]) -> str | None:
    """The tree's main resource from the resources pools set strong guarantees in.

    YTsaurus's master refuses a pool config that sets a guarantee in any resource without one in the tree's
    ``main_resource`` ("Main resource guarantee must be specified in order to set guarantees for any other
    resource"), so when every guarantee of a tree is in one resource, that resource is the main one.
    """
    return next(iter(guaranteed)) if len(guaranteed) == 1 else None


def unit_test_settings(**overrides: Any) -> UpdateSettings:
    """The options YTsaurus's ``TestExampleFromProductionCluster`` runs the update with."""
    values: dict[str, Any] = {
        "main_resource": "cpu",
        "enable_step_function_for_gang_operations": True,
        "enable_improved_fair_share_by_fit_factor_computation": True,
        "enable_improved_fair_share_by_fit_factor_computation_distribution_gap": True,
    }
    values.update(overrides)
    return UpdateSettings(**values)


def _resources(value: Any, path: str, *, share: bool = False) -> Vector:
    """A resource map (``user_slots``, ``cpu``, ``gpu``, ``user_memory``/``memory``, ``network``) as a vector."""
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"expected a map of resources, got {type(value).__name__}")
    out = np.zeros(RESOURCE_COUNT)
    seen: set[str] = set()
    for key, amount in value.items():
        name = RESOURCE_ALIASES.get(key, key)
        if name not in RESOURCES:
            # Resources pooltree does not model (disk quota, ...) would be dropped silently; refuse them.
            raise ConfigError(join_path(path, key), f"unknown resource; known: {', '.join(RESOURCES)}")
        if name in seen:
            raise ConfigError(join_path(path, key), "resource given twice (memory and user_memory)")
        seen.add(name)
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not np.isfinite(amount):
            raise ConfigError(join_path(path, key), f"expected a finite number, got {amount!r}")
        if amount < 0:
            raise ConfigError(join_path(path, key), f"must be non-negative, got {amount!r}")
        if share and amount > 1.0 + 1e-9:
            raise ConfigError(join_path(path, key), f"a share must be at most 1, got {amount!r}")
        out[RESOURCES.index(name)] = float(amount)
    return out


def _field(item: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in item:
        raise ConfigError(join_path(path, key), "missing")
    return item[key]


def _string(item: Mapping[str, Any], key: str, path: str) -> str:
    value = _field(item, key, path)
    if not isinstance(value, str) or not value:
        raise ConfigError(join_path(path, key), f"expected a non-empty string, got {value!r}")
    return value


def _weight(item: Mapping[str, Any], path: str) -> float:
    value = _field(item, "weight", path)
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value) or value < 0:
        raise ConfigError(join_path(path, "weight"), f"expected a non-negative finite number, got {value!r}")
    return float(value)


def parse_elements_dump(
    document: Any, *, source: str = "elements", guarantees: GuaranteeMode = "gpu"
) -> ElementsDump:
    """Build the fair-share input of a parsed element dump (see the module docstring); errors name the field."""
    if guarantees not in ("gpu", "all"):
        raise ConfigError("guarantees", f"must be 'gpu' or 'all', got {guarantees!r}")
    if not isinstance(document, list) or not document:
        raise ConfigError(source, "expected a non-empty list of elements")
    reader = _DumpReader(guarantees)
    for index, item in enumerate(document):
        reader.read(item, join_path(source, index))
    if reader.root is None or reader.total is None:
        raise ConfigError(source, f"no {ROOT_ID} pool")
    return ElementsDump(
        reader.root,
        reader.total,
        reader.production,
        reader.operation_types,
        reader.order,
        infer_main_resource(reader.guaranteed),
    )


class _DumpReader:
    """The tree of a dump read element by element (parents listed before their children)."""

    def __init__(self, guarantees: GuaranteeMode) -> None:
        self.guarantees: GuaranteeMode = guarantees
        self.pools: dict[str, Pool] = {}
        self.names: set[str] = set()
        """Every element read so far."""
        self.production: dict[str, Vector] = {}
        """Each element's ``total_fair_share`` in the dump."""
        self.operation_types: dict[str, str] = {}
        self.order: list[str] = []
        self.root: Pool | None = None
        self.total: Vector | None = None
        """The root's ``resource_limits``: the tree's total resources."""
        self.guaranteed: set[str] = set()
        """Resources some pool has a strong guarantee of."""

    def read(self, item: Any, path: str) -> None:
        """Add one element of the dump under its parent."""
        if not isinstance(item, Mapping):
            raise ConfigError(path, f"expected a map, got {type(item).__name__}")
        name = _string(item, "name", path)
        kind = _string(item, "type", path)
        if name in self.names:
            raise ConfigError(join_path(path, "name"), f"element {name!r} appears twice")
        fair_share = _resources(
            _field(item, "total_fair_share", path), join_path(path, "total_fair_share"), share=True
        )
        element: Element
        if kind == "pool":
            mode = _string(item, "mode", path)
            if mode not in POOL_MODES:
                raise ConfigError(join_path(path, "mode"), f"expected one of {', '.join(POOL_MODES)}")
            if name == ROOT_ID:
                self._read_root(item, path, mode)
                self._add(name, fair_share)
                return
            element = self.pools[name] = self._pool(item, path, name, mode)
        elif kind == "operation":
            element = _operation(item, path, name)
            self.operation_types[name] = _string(item, "operation_type", path)
        else:
            raise ConfigError(join_path(path, "type"), f"expected 'pool' or 'operation', got {kind!r}")
        parent_name = _string(item, "parent", path)
        parent = self.pools.get(parent_name)
        if parent is None:
            where = "is an operation" if parent_name in self.names else "is not a pool listed before it"
            raise ConfigError(join_path(path, "parent"), f"{parent_name!r} {where}")
        parent.children.append(element)
        self._add(name, fair_share)

    def _add(self, name: str, fair_share: Vector) -> None:
        self.names.add(name)
        self.production[name] = fair_share
        self.order.append(name)

    def _read_root(self, item: Mapping[str, Any], path: str, mode: str) -> None:
        if self.root is not None:
            raise ConfigError(join_path(path, "name"), "a second root")
        if item.get("parent") is not None:
            raise ConfigError(join_path(path, "parent"), "the root has no parent")
        self.total = _resources(_field(item, "resource_limits", path), join_path(path, "resource_limits"))
        self.root = self.pools[ROOT_ID] = Pool(ROOT_ID, mode=mode)

    def _pool(self, item: Mapping[str, Any], path: str, name: str, mode: str) -> Pool:
        """A pool with the dump's weight and strong guarantees (only the GPU one with ``guarantees="gpu"``)."""
        strong = _resources(
            _field(item, "strong_guarantee_resources", path),
            join_path(path, "strong_guarantee_resources"),
        )
        self.guaranteed.update(RESOURCES[r] for r in np.flatnonzero(strong).tolist())
        if self.guarantees == "gpu":
            strong = np.where(np.arange(RESOURCE_COUNT) == GPU, strong, 0.0)
            specified = frozenset({"gpu"})
        else:
            specified = frozenset(RESOURCES)
        return Pool(
            name,
            weight=_weight(item, path),
            mode=mode,
            strong_guarantee_resources=strong,
            specified_guarantee_resources=specified,
            fifo_sort_parameters=("weight",),
        )


def _operation(item: Mapping[str, Any], path: str, name: str) -> Operation:
    """An operation with the dump's weight, usage and demand (a vanilla operation as a gang)."""
    usage = _resources(_field(item, "resource_usage", path), join_path(path, "resource_usage"))
    demand = _resources(_field(item, "resource_demand", path), join_path(path, "resource_demand"))
    if np.any(demand < usage):
        raise ConfigError(
            join_path(path, "resource_demand"),
            "demand must include usage (≥ usage in every resource)",
        )
    operation_type = _string(item, "operation_type", path)
    return Operation(
        name,
        weight=_weight(item, path),
        usage=usage,
        demand=demand,
        is_gang=operation_type == "vanilla",
    )


def load_elements_dump(path: str | Path, *, guarantees: GuaranteeMode = "gpu") -> ElementsDump:
    """Read a dump from a ``.yson`` file (``.yson.gz`` gzipped); errors name the file and the field."""
    path = Path(path)
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise ConfigError(
            str(path), f"cannot read file: {getattr(error, 'strerror', None) or error}"
        ) from None
    return parse_elements_dump(
        loads_document(data, "yson", source=str(path)), source=str(path), guarantees=guarantees
    )


@dataclass(eq=False)
class Comparison:
    """Per element, the largest absolute difference to production over the five resources."""

    names: list[str]
    difference: np.ndarray  # (n,) max over resources of |pooltree - production|
    worst_resource: list[str]
    tolerance: float

    @property
    def total(self) -> int:
        return len(self.names)

    @property
    def matching(self) -> int:
        return int(np.count_nonzero(self.difference <= self.tolerance))

    @property
    def fraction(self) -> float:
        return self.matching / self.total if self.total else 1.0

    def worst(self, count: int = 10) -> list[tuple[str, float, str]]:
        """The ``count`` elements furthest from production: (name, difference, resource)."""
        order = np.argsort(-self.difference, kind="stable")[:count]
        return [(self.names[i], float(self.difference[i]), self.worst_resource[i]) for i in order.tolist()]

    def mismatched(self) -> list[str]:
        return [
            name for name, d in zip(self.names, self.difference.tolist(), strict=True) if d > self.tolerance
        ]


def compare(result: FairShareResult, dump: ElementsDump, tolerance: float = MATCH_TOLERANCE) -> Comparison:
    """Compare every element's fair share with production's ``total_fair_share``, resource by resource."""
    names = list(dump.order)
    ours = np.array([result.elements[name].fair_share for name in names])
    theirs = np.array([dump.production_fair_share[name] for name in names])
    delta = np.abs(ours - theirs)
    worst = delta.argmax(axis=1)
    return Comparison(names, delta.max(axis=1), [RESOURCES[int(r)] for r in worst], tolerance)
