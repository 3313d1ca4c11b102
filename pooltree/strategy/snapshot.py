"""The strategy's input: tree options (`StrategyConfig`) and a snapshot of the pool tree (`SchedulingTree`).

A `SchedulingTree` is built once per fair-share update from the tree runtime and the fair-share results (see
:func:`pooltree.strategy.build.scheduling_tree_from_runtime`) or directly by tests. It holds the element
tree with parent links, each element's published fair share and demand share, FIFO flags and order, specified
resource limits and the *effective* starvation/preemption settings, resolved top-down here (an element's own
value if set, else its parent's; the root takes the tree options).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from pooltree.config.base import Resources
from pooltree.config.operation_preemption import (
    operation_non_preemptible_threshold,
    operation_starvation_timeout,
    operation_starvation_tolerance,
)
from pooltree.errors import ConfigError, join_path
from pooltree.resources import (
    CPU,
    MEMORY,
    RESOURCE_COUNT,
    USER_SLOTS,
    Vector,
    parse_duration,
    parse_resources,
    unlimited,
    zeros,
)
from pooltree.strategy.model import SchedulingStatus

ROOT_ID = "<Root>"

_DURATION_FIELDS = (
    "fair_share_starvation_timeout",
    "fair_share_aggressive_starvation_timeout",
    "preemptive_scheduling_backoff",
    "allocation_preemption_timeout",
    "allocation_graceful_preemption_timeout",
    "node_reconnection_timeout",
    "schedule_allocations_timeout",
)


def _default_min_spare() -> Vector:
    spare = zeros()
    spare[USER_SLOTS] = 1
    spare[CPU] = 1
    spare[MEMORY] = 256 * 1024 * 1024
    return spare


@dataclass
class StrategyConfig:
    """Tree options the strategy reads, with YTsaurus defaults (yt-semantics §c, §d, §e.6). Durations in seconds."""

    fair_share_starvation_tolerance: float = 0.8
    fair_share_starvation_timeout: float = 30.0
    fair_share_aggressive_starvation_timeout: float = 120.0
    enable_aggressive_starvation: bool = False
    non_preemptible_resource_usage_threshold: Vector | None = None
    max_unpreemptible_running_allocation_count: int | None = None
    preemption_satisfaction_threshold: float = 1.0
    aggressive_preemption_satisfaction_threshold: float = 0.2
    preemptive_scheduling_backoff: float = 5.0
    allocation_preemption_timeout: float = 15.0
    allocation_graceful_preemption_timeout: float = 60.0
    min_spare_allocation_resources_on_node: Vector = field(default_factory=_default_min_spare)
    fifo_pool_scheduling_order: str = "satisfaction"
    scheduling_preemption_priority_scope: str = "operation_and_ancestors"
    enable_conditional_preemption: bool = True
    preemption_check_starvation: bool = True
    preemption_check_satisfaction: bool = True
    allocation_count_preemption_timeout_coefficient: float = 1.0
    enable_pool_starvation: bool = True
    max_schedule_attempts_per_heartbeat: int = 10_000
    enable_absolute_fair_share_starvation_tolerance: bool = False
    allow_preemption_from_starving_operations: bool | None = None
    use_pool_satisfaction_for_scheduling: bool = False
    max_schedulable_element_count_in_fifo_pool: int | None = None
    node_reconnection_timeout: float = 300.0
    enable_guarantee_priority_scheduling: bool = False
    schedule_allocations_timeout: float = 40.0
    """None (unset): the operation's own starvation is checked as ``preemption_check_starvation`` says."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, path: str = "config") -> None:
        """Raise ConfigError naming the field for any out-of-range option."""
        if not 0.0 <= self.fair_share_starvation_tolerance <= 1.0:
            raise ConfigError(join_path(path, "fair_share_starvation_tolerance"), "must be in [0, 1]")
        for name in _DURATION_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int | float) or math.isnan(value) or value < 0:
                raise ConfigError(join_path(path, name), f"must be a non-negative duration, got {value!r}")
        if self.fair_share_aggressive_starvation_timeout < self.fair_share_starvation_timeout:
            raise ConfigError(
                join_path(path, "fair_share_aggressive_starvation_timeout"),
                "must not be less than fair_share_starvation_timeout",
            )
        if not self.preemption_satisfaction_threshold > 0:
            raise ConfigError(join_path(path, "preemption_satisfaction_threshold"), "must be positive")
        if (
            not 0
            <= self.aggressive_preemption_satisfaction_threshold
            <= self.preemption_satisfaction_threshold
        ):
            raise ConfigError(
                join_path(path, "aggressive_preemption_satisfaction_threshold"),
                "must be non-negative and not greater than preemption_satisfaction_threshold",
            )
        if self.fifo_pool_scheduling_order not in ("fifo", "satisfaction"):
            raise ConfigError(join_path(path, "fifo_pool_scheduling_order"), "must be fifo or satisfaction")
        if self.scheduling_preemption_priority_scope not in ("operation_only", "operation_and_ancestors"):
            raise ConfigError(
                join_path(path, "scheduling_preemption_priority_scope"),
                "must be operation_only or operation_and_ancestors",
            )
        if not self.allocation_count_preemption_timeout_coefficient >= 1.0:
            raise ConfigError(
                join_path(path, "allocation_count_preemption_timeout_coefficient"), "must be at least 1"
            )
        if self.max_unpreemptible_running_allocation_count is not None and (
            self.max_unpreemptible_running_allocation_count < 0
        ):
            raise ConfigError(join_path(path, "max_unpreemptible_running_allocation_count"), "must be >= 0")
        if self.max_schedule_attempts_per_heartbeat < 1:
            raise ConfigError(join_path(path, "max_schedule_attempts_per_heartbeat"), "must be positive")

    def tree_non_preemptible_threshold(self) -> Vector | None:
        """Tree-level threshold vector (absolute), user_slots defaulting to max_unpreemptible_running_allocation_count."""
        threshold = (
            None
            if self.non_preemptible_resource_usage_threshold is None
            else self.non_preemptible_resource_usage_threshold.copy()
        )
        if self.max_unpreemptible_running_allocation_count is not None:
            if threshold is None:
                threshold = unlimited()
            if math.isinf(threshold[USER_SLOTS]):
                threshold[USER_SLOTS] = float(self.max_unpreemptible_running_allocation_count)
        return threshold

    @classmethod
    def from_options(cls, options: Any, path: str = "config") -> StrategyConfig:
        """Read the options this class knows from a mapping or an attribute object (e.g. the tree config model).

        Durations given as numbers are taken as seconds when the source is an object (already parsed) and as
        YTsaurus milliseconds when the source is a raw mapping; strings with units are parsed either way.
        """
        raw_mapping = isinstance(options, Mapping)
        values: dict[str, Any] = {}
        for spec in fields(cls):
            name = spec.name
            value = options.get(name) if raw_mapping else getattr(options, name, None)
            if value is None or (
                name == "non_preemptible_resource_usage_threshold" and _names_nothing(value)
            ):
                continue  # YTsaurus: a threshold naming no resource is trivial, no threshold at all
            field_path = join_path(path, name)
            if name in _DURATION_FIELDS:
                if hasattr(value, "total_seconds"):
                    value = float(value.total_seconds())
                elif isinstance(value, str) or raw_mapping:
                    value = parse_duration(value, field_path)
                else:
                    value = float(value)
            elif name in (
                "non_preemptible_resource_usage_threshold",
                "min_spare_allocation_resources_on_node",
            ):
                value = _as_vector(value, field_path, missing=math.inf if name.startswith("non") else 0.0)
            elif hasattr(value, "value") and not isinstance(value, int | float | bool | str):
                value = value.value
            values[name] = value
        config = cls(**values)
        config.validate(path)
        return config


def _as_vector(value: Any, path: str, missing: float) -> Vector:
    if isinstance(value, np.ndarray):
        return value.astype(float)
    if isinstance(value, Resources):  # a pool tree config's resource map (the live scheduler's trees)
        value = value.to_dict()  # only what was written: ``missing`` fills the rest (inf for thresholds)
    elif hasattr(value, "model_dump"):
        value = {k: v for k, v in value.model_dump().items() if v is not None}
    return parse_resources(value, path, missing=missing)


@dataclass
class ElementSpec:
    """One pool or operation in a snapshot. Optional settings left ``None`` are inherited from the parent.

    Shares are fractions of the tree's total resources; ``specified_resource_limits`` and
    ``non_preemptible_resource_usage_threshold`` are absolute (inf = unlimited / unset).
    ``demand_share`` may be left ``None``: pools then sum their children, operations take (usage + needed)/total.
    """

    id: str
    parent: str | None
    kind: str = "pool"
    fair_share: Vector = field(default_factory=zeros)
    demand_share: Vector | None = None
    scheduling_status: SchedulingStatus | None = None
    specified_resource_limits: Vector | None = None
    weight: float = 1.0
    fifo: bool = False
    fifo_index: int = 0
    schedulable: bool = True
    start_time: float = 0.0
    fair_share_starvation_tolerance: float | None = None
    fair_share_starvation_timeout: float | None = None
    enable_aggressive_starvation: bool | None = None
    non_preemptible_resource_usage_threshold: Vector | None = None
    allow_normal_preemption: bool | None = None
    allow_aggressive_preemption: bool | None = None
    preemption_mode: str = "normal"
    scheduling_tag_filter: Callable[[frozenset[str]], bool] | Any | None = None
    interruption_signal: str | None = None
    resource_limits_overcommit_tolerance: Vector | None = None
    """A pool's ``resource_limits_overcommit_tolerance`` (absolute; `limits_tolerance.py`)."""
    use_pool_satisfaction_for_scheduling: bool | None = None
    """A pool's own ``use_pool_satisfaction_for_scheduling`` (None: inherited; `pool_satisfaction.py`)."""
    is_gang: bool = False
    """A gang operation (spec ``is_gang``): the step fair share, FIFO truncation and
    ``allow_aggressive_preemption_for_gang_operations`` (restarts belong to ``gang_options``, see gang.py)."""

    @property
    def is_operation(self) -> bool:
        return self.kind == "operation"


class SpecRows(list[ElementSpec]):
    """Element specs in build order with what the builder knows about how they derive from the tree ``base``,
    so that a tree derived from ``base`` costs what changed rather than a walk over every element. A plain list
    of the same specs gives the same tree; the hints are read only when ``base`` is the tree deriving.

    - ``replaced`` (for `SchedulingTree.with_shares` and `with_operation_changes`): the specs of the list that
      are not ``base``'s very objects (``with_shares`` copies ``base``'s id map and writes only these into it;
      both tell `publish` that only these elements have new specs: `SchedulingTree.respecced`).
    - ``ids`` and ``tail`` (for `SchedulingTree.with_operation_changes`): the id of each spec, in list order,
      and the first row whose id is not the next of ``base``'s ids without the removed ones (the first new
      operation's row): the id map is ``base``'s, copied, without the removed ids, with the rows from ``tail``
      on re-appended in order (or, when the tail is long, made from the ids in C).
    - ``children`` (for `SchedulingTree.with_operation_changes`): for parents whose children changed, their
      children in list order (what a scan of every spec for its parent would collect).
    """

    __slots__ = ("base", "children", "ids", "replaced", "tail")

    def __init__(self, specs: Iterable[ElementSpec] = ()) -> None:
        super().__init__(specs)
        self.base: SchedulingTree | None = None
        self.replaced: list[ElementSpec] = []
        self.ids: list[str] | None = None
        self.tail = 0
        self.children: Mapping[str, list[str]] | None = None


@dataclass(frozen=True)
class EffectiveSettings:
    """Settings of one element after top-down inheritance."""

    starvation_tolerance: float
    starvation_timeout: float
    aggressive_starvation_enabled: bool
    non_preemptible_threshold: Vector | None
    allow_aggressive_preemption: bool
    normal_preemption_allowed_by_ancestors: bool
    use_pool_satisfaction: bool = False
    """A pool's satisfaction in its parent's heap is min(best child's, its own) (`pool_satisfaction.py`)."""


class SchedulingTree:
    """Validated, immutable-by-convention snapshot of one pool tree for the strategy.

    ``skeleton`` identifies the structure (element ids, parents, kinds and the static settings the effective
    settings are resolved from): two trees with the same ``skeleton`` object differ only in their shares and
    statuses, which lets the strategy keep its per-element objects across publishes (see
    :meth:`with_shares`).
    """

    def __init__(
        self,
        total_resources: Vector,
        elements: Iterable[ElementSpec],
        config: StrategyConfig | None = None,
        name: str = "default",
    ):
        self.name = name
        self.config = config or StrategyConfig()
        self.total_resources = np.asarray(total_resources, dtype=float)
        if self.total_resources.shape != (RESOURCE_COUNT,) or np.any(self.total_resources < 0):
            raise ConfigError("total_resources", "must be a non-negative vector of 5 resources")
        self.skeleton: object = object()
        self.prepared: Mapping[str, tuple[tuple[float, ...], tuple[float, ...], tuple[bool, ...]]] = {}
        """Element id → its fair share, demand share and ``blocked`` mask as Python tuples, for elements whose
        spec the builder made anew (`build_rows._respec`): exactly what `publish` would compute from the spec."""
        self.elements: dict[str, ElementSpec] = {}
        for element in elements:
            path = f"elements.{element.id}"
            if element.id in self.elements:
                raise ConfigError(path, "element id is given twice")
            if element.kind not in ("pool", "operation"):
                raise ConfigError(join_path(path, "kind"), "must be pool or operation")
            if element.preemption_mode not in ("normal", "graceful"):
                raise ConfigError(join_path(path, "preemption_mode"), "must be normal or graceful")
            self.elements[element.id] = element
        if ROOT_ID not in self.elements:
            self.elements[ROOT_ID] = ElementSpec(id=ROOT_ID, parent=None, fair_share=np.ones(RESOURCE_COUNT))
        self.children: dict[str, list[str]] = {element_id: [] for element_id in self.elements}
        for element in self.elements.values():
            if element.id == ROOT_ID:
                if element.parent is not None:
                    raise ConfigError(f"elements.{ROOT_ID}.parent", "the root has no parent")
                continue
            parent = self.elements.get(element.parent or "")
            if parent is None:
                raise ConfigError(f"elements.{element.id}.parent", f"unknown parent {element.parent!r}")
            if parent.is_operation:
                raise ConfigError(f"elements.{element.id}.parent", f"parent {parent.id!r} is an operation")
            self.children[parent.id].append(element.id)
        self.order: list[str] = []
        self.depth: dict[str, int] = {ROOT_ID: 0}
        stack = [ROOT_ID]
        while stack:
            element_id = stack.pop()
            self.order.append(element_id)
            for child in self.children[element_id]:
                self.depth[child] = self.depth[element_id] + 1
                stack.append(child)
        if len(self.order) != len(self.elements):
            unreachable = sorted(set(self.elements) - set(self.order))
            raise ConfigError(f"elements.{unreachable[0]}.parent", "element is not reachable from the root")
        self.effective: dict[str, EffectiveSettings] = {}
        self.delta: TreeDelta | None = None
        """Set by :meth:`with_operation_changes`: how this tree differs from the tree it was derived from."""
        self.respecced: tuple[weakref.ref[SchedulingTree], list[ElementSpec]] | None = None
        """Set by :meth:`with_shares` and :meth:`with_operation_changes` from a `SpecRows` hint: (the tree derived
        from, the specs that are not its very objects). When that tree is the one published last, `publish` looks
        only at these for elements with a new spec."""
        self.pool_satisfaction_used = False
        """Whether some pool's heap key is min(best child's, its own satisfaction) (`pool_satisfaction.py`)."""
        self._resolve_settings()

    def _resolve_settings(self) -> None:
        """Each element's effective settings, inherited top-down, and ``pool_satisfaction_used``."""
        config = self.config
        self.pool_satisfaction_used = False
        for element_id in self.order:
            spec = self.elements[element_id]
            parent = self.effective.get(spec.parent) if spec.parent is not None else None
            if parent is None:
                base = EffectiveSettings(
                    starvation_tolerance=config.fair_share_starvation_tolerance,
                    starvation_timeout=config.fair_share_starvation_timeout,
                    aggressive_starvation_enabled=config.enable_aggressive_starvation,
                    non_preemptible_threshold=config.tree_non_preemptible_threshold(),
                    allow_aggressive_preemption=True,
                    normal_preemption_allowed_by_ancestors=True,
                    use_pool_satisfaction=config.use_pool_satisfaction_for_scheduling,
                )
            else:
                base = parent
            settings = self.effective[element_id] = _settings_of(spec, base)
            if settings.use_pool_satisfaction and not spec.is_operation:
                self.pool_satisfaction_used = True

    def _derived(self, total_resources: Vector) -> SchedulingTree:
        """A new tree of this tree's name and config with ``total_resources`` checked; the caller sets the rest."""
        tree = object.__new__(SchedulingTree)
        tree.name = self.name
        tree.config = self.config
        total = np.asarray(total_resources, dtype=float)
        if total.shape != (RESOURCE_COUNT,) or np.any(total < 0):
            raise ConfigError("total_resources", "must be a non-negative vector of 5 resources")
        tree.total_resources = total
        tree.respecced = None
        return tree

    def with_shares(self, total_resources: Vector, elements: list[ElementSpec]) -> SchedulingTree:
        """A tree with this tree's structure and new element specs (same ids, same order as ``self.order``'s
        source list, same static fields; only shares, statuses, weights and FIFO indices may differ).

        The caller guarantees the structure is unchanged (``build.scheduling_tree_from_runtime`` checks that
        every static part is the very object of the previous build); validation, ordering and settings
        resolution are then shared instead of redone. When ``elements`` is a `SpecRows` derived from this tree
        (``base`` is this tree), the id map is this tree's, copied, with only ``replaced`` written into it.
        """
        tree = self._derived(total_resources)
        tree.skeleton = self.skeleton
        tree.prepared = {}
        if type(elements) is SpecRows and elements.base is self:
            specs = self.elements.copy()  # same keys in the same order: a C-level copy
            for element in elements.replaced:
                specs[element.id] = element
            if len(specs) != len(self.elements):
                raise ValueError(
                    f"replaced element {_first_new(elements.replaced, self.elements)!r} is not in the tree"
                )
            tree.elements = specs
            tree.respecced = (weakref.ref(self), elements.replaced)
        else:
            tree.elements = {element.id: element for element in elements}
            if ROOT_ID not in tree.elements:
                tree.elements[ROOT_ID] = self.elements[ROOT_ID]
        tree.children = self.children
        tree.order = self.order
        tree.depth = self.depth
        tree.effective = self.effective
        tree.pool_satisfaction_used = self.pool_satisfaction_used
        tree.delta = None
        return tree

    def with_operation_changes(
        self, total_resources: Vector, elements: list[ElementSpec], removed: set[str], added: list[str]
    ) -> SchedulingTree:
        """The tree a full build of ``elements`` gives, derived from this tree when only operations changed:
        ``removed`` (ids of this tree's operations that are gone or changed) and ``added`` (ids of new or
        changed operations, all in ``elements``); every other element has this tree's static settings (the
        builder guarantees it, see `build.scheduling_tree_from_runtime`). Only the added operations are
        validated and have their settings resolved; the parents whose operations changed get their children
        lists and their segment of ``order`` re-made, in the order `__init__` gives them. ``delta`` tells
        `publish` which elements changed, so it can keep every other published element."""
        tree = self._derived(total_resources)
        tree.skeleton = object()
        tree.prepared = {}
        hint = elements if type(elements) is SpecRows and elements.base is self else None
        specs = self._specs_of(elements, hint, removed)
        tree.elements = specs
        if hint is not None:  # every spec not in ``replaced`` is this tree's very object (the builder's rows)
            tree.respecced = (weakref.ref(self), hint.replaced)
        # ``.copy()``, not ``dict(...)``: it clones the table of a map with deleted entries (every removed operation
        # leaves one) in C, where ``dict(...)`` re-inserts every key (5-10x slower at 13,000 elements)
        children = self.children.copy()
        depth = self.depth.copy()
        effective = self.effective.copy()
        parents: set[str] = set()
        previous = self.elements
        for element_id in removed:
            spec = previous[element_id]
            if not spec.is_operation:
                raise ValueError(f"removed element {element_id!r} is not an operation")
            parents.add(spec.parent or "")
            del children[element_id], depth[element_id], effective[element_id]
        for element_id in added:
            parent = _added_operation_parent(specs, element_id, children)
            parents.add(parent.id)
            children[element_id] = []
            depth[element_id] = depth[parent.id] + 1
            effective[element_id] = _settings_of(specs[element_id], effective[parent.id])
        # the parents' children in ``elements`` order, as __init__ collects them (or as the builder gives them)
        known = None if hint is None else hint.children
        if known is not None and parents <= known.keys():
            fresh = {parent: list(known[parent]) for parent in parents}
        else:
            fresh = {parent: [] for parent in parents}
            for element in elements:
                listed = fresh.get(element.parent)  # type: ignore[arg-type]
                if listed is not None:
                    listed.append(element.id)
        tree.children = children
        tree.order = self._reordered(fresh, children, specs)
        tree.depth = depth
        tree.effective = effective
        tree.pool_satisfaction_used = self.pool_satisfaction_used  # the pools are this tree's
        tree.delta = TreeDelta(self.skeleton, removed, added, parents)
        return tree

    def _specs_of(
        self, elements: list[ElementSpec], hint: SpecRows | None, removed: set[str]
    ) -> dict[str, ElementSpec]:
        """Id → spec of ``elements`` (the builder's rows ``hint`` spare reading every id), with this tree's root
        when they have none; an id given twice is an error."""
        if hint is not None and hint.ids is not None and 2 * hint.tail >= len(elements):
            specs = _derived_map(self.elements, hint, removed)
        elif hint is not None and hint.ids is not None:
            specs = dict(zip(hint.ids, elements, strict=True))  # the builder's ids of these very specs
        else:
            specs = {element.id: element for element in elements}
        if len(specs) != len(elements):
            raise ConfigError(f"elements.{_first_repeat(elements)}", "element id is given twice")
        if ROOT_ID not in specs:
            specs[ROOT_ID] = self.elements[ROOT_ID]
        return specs

    def _reordered(
        self, fresh: dict[str, list[str]], children: dict[str, list[str]], specs: dict[str, ElementSpec]
    ) -> list[str]:
        """This tree's ``order`` with the operations of each ``fresh`` parent (its new children) re-laid, the
        children lists written into ``children``. Pools precede operations in a built tree: the operations form
        the segment right after the parent in ``order`` (children are visited last first); any other layout
        re-walks the whole order."""
        order = list(self.order)
        previous = self.elements
        for parent, listed in fresh.items():
            before = self.children[parent]
            old_ops = _operation_suffix(before, previous)
            new_ops = _operation_suffix(listed, specs)
            if (
                old_ops is None
                or new_ops is None
                or before[: len(before) - len(old_ops)] != listed[: len(listed) - len(new_ops)]
            ):
                break
            start = order.index(parent) + 1
            order[start : start + len(old_ops)] = reversed(new_ops)
            children[parent] = listed
        else:
            return order
        # unusual layout: the order of a full walk
        for parent, listed in fresh.items():
            children[parent] = listed
        order = []
        stack = [ROOT_ID]
        while stack:
            element_id = stack.pop()
            order.append(element_id)
            stack.extend(children[element_id])
        return order

    def ancestors(self, element_id: str) -> list[str]:
        """Proper ancestors from the parent up to and including the root."""
        out = []
        parent = self.elements[element_id].parent
        while parent is not None:
            out.append(parent)
            parent = self.elements[parent].parent
        return out

    def operations(self) -> list[str]:
        return [element_id for element_id in self.order if self.elements[element_id].is_operation]


def _pick(own: Any, inherited: Any) -> Any:
    return inherited if own is None else own


def _settings_of(spec: ElementSpec, base: EffectiveSettings) -> EffectiveSettings:
    """An element's effective settings: a pool's own values where set, else ``base`` (its parent's); an
    operation's own starvation and threshold values only where more conservative (``config.operation_preemption``)."""
    own_normal = spec.allow_normal_preemption is not False
    if spec.is_operation:
        tolerance = operation_starvation_tolerance(
            base.starvation_tolerance, spec.fair_share_starvation_tolerance
        )
        timeout = operation_starvation_timeout(base.starvation_timeout, spec.fair_share_starvation_timeout)
        threshold = operation_non_preemptible_threshold(
            base.non_preemptible_threshold, spec.non_preemptible_resource_usage_threshold
        )
    else:
        tolerance = _pick(spec.fair_share_starvation_tolerance, base.starvation_tolerance)
        timeout = _pick(spec.fair_share_starvation_timeout, base.starvation_timeout)
        threshold = base.non_preemptible_threshold
        if spec.non_preemptible_resource_usage_threshold is not None:
            threshold = np.asarray(spec.non_preemptible_resource_usage_threshold, dtype=float)
    return EffectiveSettings(
        starvation_tolerance=tolerance,
        starvation_timeout=timeout,
        aggressive_starvation_enabled=_pick(
            spec.enable_aggressive_starvation, base.aggressive_starvation_enabled
        ),
        non_preemptible_threshold=threshold,
        allow_aggressive_preemption=_pick(spec.allow_aggressive_preemption, base.allow_aggressive_preemption),
        normal_preemption_allowed_by_ancestors=base.normal_preemption_allowed_by_ancestors and own_normal,
        use_pool_satisfaction=_pick(spec.use_pool_satisfaction_for_scheduling, base.use_pool_satisfaction),
    )


def _added_operation_parent(
    specs: dict[str, ElementSpec], element_id: str, children: dict[str, Any]
) -> ElementSpec:
    """The parent of an operation added by `SchedulingTree.with_operation_changes`, after the checks `__init__`
    makes of it (an operation, new, a known preemption mode, under a known pool)."""
    spec = specs[element_id]
    path = f"elements.{element_id}"
    if spec.kind != "operation":
        raise ConfigError(join_path(path, "kind"), "an added element must be an operation")
    if element_id in children:
        raise ConfigError(path, "element id is given twice")
    if spec.preemption_mode not in ("normal", "graceful"):
        raise ConfigError(join_path(path, "preemption_mode"), "must be normal or graceful")
    parent = specs.get(spec.parent or "")
    if parent is None:
        raise ConfigError(join_path(path, "parent"), f"unknown parent {spec.parent!r}")
    if parent.is_operation:
        raise ConfigError(join_path(path, "parent"), f"parent {parent.id!r} is an operation")
    return parent


def _operation_suffix(listed: list[str], specs: Mapping[str, ElementSpec]) -> list[str] | None:
    """The operations at the end of a children list, or None when an operation precedes a pool."""
    split = len(listed)
    while split and specs[listed[split - 1]].is_operation:
        split -= 1
    suffix = listed[split:]
    if any(specs[element_id].is_operation for element_id in listed[:split]):
        return None
    return suffix


def _derived_map(
    previous: dict[str, ElementSpec], hint: SpecRows, removed: set[str]
) -> dict[str, ElementSpec]:
    """The id map of ``hint``'s specs (ids ``hint.ids``) from the ``previous`` tree's map, which lists the same
    ids in the same order up to row ``hint.tail``, without ``removed``: a copy (in C), the removed and the tail's
    ids dropped, the re-made specs written and the tail appended in its order."""
    specs = previous.copy()
    for element_id in removed:
        del specs[element_id]
    ids = hint.ids
    assert ids is not None
    tail = hint.tail
    tail_ids = ids[tail:]
    for element_id in tail_ids:
        specs.pop(element_id, None)
    for element in hint.replaced:
        if element.id in specs:
            specs[element.id] = element
    specs.update(zip(tail_ids, hint[tail:], strict=True))
    return specs


def _first_new(elements: list[ElementSpec], known: Mapping[str, ElementSpec]) -> str:
    return next((element.id for element in elements if element.id not in known), "")


def _first_repeat(elements: list[ElementSpec]) -> str:
    seen: set[str] = set()
    for element in elements:
        if element.id in seen:
            return element.id
        seen.add(element.id)
    return ""


@dataclass(frozen=True)
class TreeDelta:
    """How a tree made by `SchedulingTree.with_operation_changes` differs from the tree it was derived from (whose
    ``skeleton`` is ``base``): operations ``removed`` and ``added`` (a changed operation is in both) and the
    ``parents`` whose children lists changed."""

    base: object
    removed: set[str]
    added: list[str]
    parents: set[str]


def _names_nothing(resources: Any) -> bool:
    """Whether a resource map (a ``Resources`` model or a plain map) sets no resource at all."""
    specified = getattr(resources, "specified", None)
    if specified is not None:
        return not specified
    return isinstance(resources, Mapping) and not resources
