"""Scheduler-level registry across pool trees: which trees an operation runs in, its lifecycle, and activation.

An operation registers in the trees of its spec (``pool_trees``, else the default tree of ``//sys/pool_trees``),
with per-tree pool/weight/resource_limits from ``scheduling_options_per_pool_tree``. A pool with
``offloading_settings`` adds an extra registration in another tree. Registration is all-or-nothing: every tree
validates first, then every tree attaches.

The client-visible state is ``pending`` while any tree holds the operation in a pending queue and ``running`` once
every tree runs it (YTsaurus activates an operation in the strategy when it runs in all its trees).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pooltree.config import nodes_of_trees
from pooltree.errors import PooltreeError
from pooltree.tree.lifecycle import OperationLifecycle, OperationState
from pooltree.tree.pool_tree import (
    NO_SUCH_OPERATION_CODE,
    ParametersUpdate,
    PoolPlacement,
    PoolTree,
)
from pooltree.tree.values import _check_weight, _limits_vector, spec_option

_UNSET: Any = object()
POOL_TREES_ARE_UNSPECIFIED = 214
"""YTsaurus ``NScheduler::EErrorCode::PoolTreesAreUnspecified``: no ``pool_trees`` and no default tree."""
_STARTING, _PENDING, _RUNNING = OperationState.STARTING, OperationState.PENDING, OperationState.RUNNING


def _spec_value(spec: Any, name: str, default: Any = None) -> Any:
    """A spec option from an ``OperationSpec`` model or a plain map."""
    if spec is None:
        return default
    # dict first: the abstract Mapping check is slow and this runs several times per operation start.
    if type(spec) is dict or isinstance(spec, Mapping):
        value = spec.get(name, default)
    else:
        value = getattr(spec, name, default)
    return default if value is None else value


@dataclass(slots=True)
class TreeRegistration:
    """Per-tree runtime parameters an operation starts with (before the tree resolves the pool)."""

    tree: str
    pool: str | None
    weight: float | None
    resource_limits: Any
    offloading: bool = False


@dataclass(slots=True)
class Operation:
    """An operation as the scheduler sees it: identity, spec, lifecycle, and the trees it is registered in."""

    id: str
    user: str
    operation_type: str
    spec: Any
    lifecycle: OperationLifecycle
    trees: list[str] = field(default_factory=list)
    alerts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def state(self) -> OperationState:
        return self.lifecycle.state

    @property
    def suspended(self) -> bool:
        return self.lifecycle.suspended


class PoolTrees:
    """Every pool tree of the scheduler plus the operations registered in them."""

    def __init__(
        self,
        definitions: Mapping[str, Any],
        default_tree: str | None = None,
        *,
        user_default_parent_pools: Mapping[str, str] | None = None,
    ):
        self.user_default_parent_pools = dict(user_default_parent_pools or {})
        self.trees: dict[str, PoolTree] = {
            name: PoolTree(definition, user_default_parent_pools=self.user_default_parent_pools)
            for name, definition in definitions.items()
        }
        self.default_tree = self._check_default_tree(default_tree)
        self._operations: dict[str, Operation] = {}
        self._finished: dict[str, Operation] = {}

    def _check_default_tree(self, default_tree: str | None) -> str | None:
        if default_tree is not None and default_tree not in self.trees:
            raise PooltreeError(
                f'Default pool tree "{default_tree}" does not exist', attributes={"pool_tree": default_tree}
            )
        if default_tree is None and len(self.trees) == 1:
            return next(iter(self.trees))
        return default_tree

    # ------------------------------------------------------------------------------------------------- access

    @property
    def operations(self) -> Mapping[str, Operation]:
        return self._operations

    def operation(self, operation_id: str) -> Operation:
        op = self._operations.get(operation_id)
        if op is None:
            raise PooltreeError(
                f"No such operation {operation_id}",
                code=NO_SUCH_OPERATION_CODE,
                attributes={"operation_id": operation_id},
            )
        return op

    def tree(self, name: str) -> PoolTree:
        tree = self.trees.get(name)
        if tree is None:
            raise PooltreeError(f'Pool tree "{name}" not found', attributes={"pool_tree": name})
        return tree

    # ----------------------------------------------------------------------------------------- registration

    def registrations_for(self, spec: Any, user: str) -> list[TreeRegistration]:
        """The trees of a spec with per-tree options (``pool_trees`` or the default tree)."""
        trees = _spec_value(spec, "pool_trees")
        if not trees:
            if self.default_tree is None:
                raise PooltreeError(  # YTsaurus's words and its PoolTreesAreUnspecified code
                    "Failed to determine fair-share tree for operation since valid pool trees are not specified "
                    "and default fair-share tree is not configured",
                    code=POOL_TREES_ARE_UNSPECIFIED,
                    attributes={"user": user},
                )
            trees = [self.default_tree]
        per_tree = _spec_value(spec, "scheduling_options_per_pool_tree", {}) or {}
        registrations: list[TreeRegistration] = []
        for name in dict.fromkeys(trees):
            self.tree(name)
            options = per_tree.get(name) if isinstance(per_tree, Mapping) else None
            pool = _spec_value(options, "pool") or _spec_value(spec, "pool")
            weight = _spec_value(options, "weight", _spec_value(spec, "weight"))
            limits = _spec_value(options, "resource_limits", _spec_value(spec, "resource_limits"))
            registrations.append(TreeRegistration(name, pool, weight, limits))
        return registrations

    def _prepare(
        self, operation_id: str, spec: Any, user: str, revival: bool
    ) -> tuple[list[tuple[TreeRegistration, PoolPlacement, float | None, Any]], dict[str, str]]:
        """Every check of a start in every tree (and its offloading trees), nothing changed: the placements."""
        registrations = self.registrations_for(spec, user)
        is_gang = bool(spec_option(spec, "is_gang", False))
        prepared: list[tuple[TreeRegistration, PoolPlacement, float | None, Any]] = []
        for reg in registrations:
            weight = _check_weight(reg.weight, f"scheduling_options_per_pool_tree.{reg.tree}.weight")
            limits = _limits_vector(reg.resource_limits)
            placement = self.trees[reg.tree].prepare_registration(
                operation_id, user=user, pool=reg.pool, is_gang=is_gang, revival=revival
            )
            prepared.append((reg, placement, weight, limits))
        extra, offloading_alerts = self._offloading_registrations(operation_id, user, prepared, revival)
        prepared.extend(extra)
        return prepared, offloading_alerts

    def check_operation(self, operation_id: str, spec: Any = None, *, user: str) -> dict[str, str]:
        """What :meth:`register_operation` checks for a new start, with nothing registered (a dry run): the
        same errors, else tree → the pool the operation would run in."""
        prepared, _ = self._prepare(operation_id, spec, user, revival=False)
        return {reg.tree: placement.pool_name for reg, placement, _, _ in prepared}

    def register_operation(
        self,
        operation_id: str,
        spec: Any = None,
        *,
        user: str,
        operation_type: str = "vanilla",
        now: float = 0.0,
        revival: bool = False,
    ) -> Operation:
        """Start an operation: validate in every tree, attach everywhere, then move to pending or running.

        Raises ``TooManyOperationsError`` (code 202) and the other §f admission errors with nothing changed.
        ``revival=True`` re-registers an operation admitted before a scheduler restart: the start-time count and
        ephemeral-pool limits are not checked again (``PoolTree.prepare_registration``).
        """
        if operation_id in self._operations:
            raise PooltreeError(
                f"Operation {operation_id} already exists", attributes={"operation_id": operation_id}
            )
        prepared, offloading_alerts = self._prepare(operation_id, spec, user, revival)

        op = Operation(operation_id, user, operation_type, spec, OperationLifecycle.start(operation_id, now))
        for tree_name, message in offloading_alerts.items():
            op.alerts[f"offloading_failed:{tree_name}"] = {
                "message": message,
                "attributes": {"pool_tree": tree_name},
            }
        for reg, placement, weight, limits in prepared:
            self.trees[reg.tree].commit_registration(
                operation_id,
                placement,
                user=user,
                operation_type=operation_type,
                weight=weight,
                resource_limits=limits,
                spec=spec,
                now=now,
                offloading=reg.offloading,
            )
            op.trees.append(reg.tree)
        self._operations[operation_id] = op
        self._refresh_state(op, now)
        return op

    def _offloading_registrations(
        self,
        operation_id: str,
        user: str,
        prepared: list[tuple[TreeRegistration, PoolPlacement, float | None, Any]],
        revival: bool = False,
    ) -> tuple[list[tuple[TreeRegistration, PoolPlacement, float | None, Any]], dict[str, str]]:
        """Extra registrations from ``offloading_settings`` of the operation's pools (and their ancestors).

        An offloading tree the operation already uses is skipped; one whose validation fails is skipped with an
        operation alert (offloading is best effort, the operation still starts in its own trees).
        """
        used = {reg.tree for reg, *_ in prepared}
        extra: list[tuple[TreeRegistration, PoolPlacement, float | None, Any]] = []
        alerts: dict[str, str] = {}
        for _reg, placement, _weight, _limits in prepared:
            pool = placement.pool if placement.pool is not None else placement.parent
            while pool is not None and pool.config is None and not pool.is_root:
                pool = pool.parent
            settings = pool.config.offloading_settings if pool is not None and pool.config is not None else {}
            for tree_name, target in settings.items():
                if tree_name in used or tree_name not in self.trees:
                    continue
                try:
                    offload_placement = self.trees[tree_name].prepare_registration(
                        operation_id, user=user, pool=target.pool, revival=revival
                    )
                except PooltreeError as error:
                    alerts[tree_name] = error.message
                    continue
                used.add(tree_name)
                reg = TreeRegistration(tree_name, target.pool, target.weight, target.resource_limits, True)
                extra.append((reg, offload_placement, target.weight, _limits_vector(target.resource_limits)))
        return extra, alerts

    def _refresh_state(self, op: Operation, now: float) -> None:
        """Pending while any tree holds the operation; running once every tree runs it."""
        held = None
        for name in op.trees:
            tree_op = self.trees[name].operation(op.id)
            if not tree_op.running:
                held = tree_op
                break
        lifecycle = op.lifecycle
        state = lifecycle.state
        if held is not None:
            op.alerts["operation_pending"] = {
                "message": "Max running operation count violated",
                "attributes": dict(held.alert["attributes"]) if held.alert else {},
            }
            if state is _STARTING:
                lifecycle.move(_PENDING, now)
            return
        if op.alerts:
            op.alerts.pop("operation_pending", None)
        if state is _STARTING or state is _PENDING:
            lifecycle.move(_RUNNING, now)

    def _on_activated(self, operation_ids: Iterable[str], now: float) -> list[str]:
        """Refresh operations some tree just activated; return those that became running overall."""
        running: list[str] = []
        for operation_id in dict.fromkeys(operation_ids):
            op = self._operations.get(operation_id)
            if op is None:
                continue
            before = op.lifecycle.state
            self._refresh_state(op, now)
            if before is not OperationState.RUNNING and op.lifecycle.state is OperationState.RUNNING:
                running.append(operation_id)
        return running

    def unregister_operation(self, operation_id: str, now: float = 0.0) -> list[str]:
        """Remove an operation from every tree; returns operations that became running as a result."""
        op = self.operation(operation_id)
        activated: list[str] = []
        for name in op.trees:
            activated.extend(self.trees[name].unregister_operation(operation_id))
        del self._operations[operation_id]
        return self._on_activated(activated, now)

    def leave_trees(self, operation_id: str, names: Iterable[str], now: float = 0.0) -> list[str]:
        """Take an operation out of some of its trees (removed ones) and keep it in the others; returns operations
        that became running as a result."""
        op = self.operation(operation_id)
        activated: list[str] = []
        for name in names:
            if name in op.trees:
                activated.extend(self.trees[name].unregister_operation(operation_id))
                op.trees.remove(name)
        activated.append(operation_id)  # its state is refreshed from the trees it keeps
        return self._on_activated(activated, now)

    # --------------------------------------------------------------------------------------------- lifecycle

    def finish_operation(self, operation_id: str, final: OperationState | str, now: float) -> list[str]:
        """Complete, abort or fail an operation (through completing/aborting/failing), then unregister it.

        Returns the operations that became running because this one released its place.
        """
        op = self.operation(operation_id)
        op.lifecycle.finish(OperationState(final), now)
        activated: list[str] = []
        for name in op.trees:
            activated.extend(self.trees[name].unregister_operation(operation_id))
        op.trees = []
        op.alerts.pop("operation_pending", None)
        self._finished[operation_id] = op
        del self._operations[operation_id]
        return self._on_activated(activated, now)

    @property
    def finished_operations(self) -> Mapping[str, Operation]:
        """Operations that reached a final state (kept for get_operation after they leave the trees)."""
        return self._finished

    def complete_operation(self, operation_id: str, now: float) -> list[str]:
        return self.finish_operation(operation_id, OperationState.COMPLETED, now)

    def abort_operation(self, operation_id: str, now: float) -> list[str]:
        return self.finish_operation(operation_id, OperationState.ABORTED, now)

    def fail_operation(self, operation_id: str, now: float) -> list[str]:
        return self.finish_operation(operation_id, OperationState.FAILED, now)

    def suspend_operation(self, operation_id: str) -> None:
        """Suspended operations keep their counts and places but get no new allocations (demand = usage)."""
        self._set_suspended(operation_id, True)

    def resume_operation(self, operation_id: str) -> None:
        self._set_suspended(operation_id, False)

    def _set_suspended(self, operation_id: str, suspended: bool) -> None:
        op = self.operation(operation_id)
        op.lifecycle.set_suspended(suspended)
        for name in op.trees:
            self.trees[name].set_operation_suspended(operation_id, suspended)

    # ------------------------------------------------------------------------------------ runtime parameters

    def update_operation_parameters(
        self, operation_id: str, parameters: Mapping[str, Any], now: float
    ) -> list[str]:
        """``update_operation_parameters``: ``pool``/``weight``/``resource_limits`` for every tree of the
        operation, or per tree under ``scheduling_options_per_pool_tree``. Validated in every tree first.

        Returns operations that became running (the moved one and any it made room for).
        """
        return self.commit_operation_parameters(
            operation_id, self.prepare_operation_parameters(operation_id, parameters), now
        )

    def prepare_operation_parameters(
        self, operation_id: str, parameters: Mapping[str, Any]
    ) -> dict[str, ParametersUpdate]:
        """Validate an ``update_operation_parameters`` change in every tree of the operation without changing
        anything: tree → the prepared change (the live scheduler commits it to its store before applying it)."""
        op = self.operation(operation_id)
        if not isinstance(parameters, Mapping):
            raise PooltreeError(f"parameters must be a map, got {type(parameters).__name__}")
        known = {
            "pool",
            "weight",
            "resource_limits",
            "scheduling_options_per_pool_tree",
            "owners",
            "acl",
            "annotations",
        }
        for key in parameters:
            if key not in known:
                raise PooltreeError(
                    f"parameters.{key}: unknown runtime parameter; known: {', '.join(sorted(known))}",
                    attributes={"field": f"parameters.{key}"},
                )
        per_tree_raw = parameters.get("scheduling_options_per_pool_tree") or {}
        if not isinstance(per_tree_raw, Mapping):
            raise PooltreeError(
                "parameters.scheduling_options_per_pool_tree: expected a map of tree → options"
            )
        changes: dict[str, dict[str, Any]] = {}
        for name in op.trees:
            options = dict(per_tree_raw.get(name) or {})
            change: dict[str, Any] = {}
            for key in ("pool", "weight", "resource_limits"):
                if key in options:
                    change[key] = options[key]
                elif key in parameters and not self.trees[name].operation(operation_id).offloading:
                    change[key] = parameters[key]
            changes[name] = change
        for name in per_tree_raw:
            if name not in op.trees:
                raise PooltreeError(
                    f'parameters.scheduling_options_per_pool_tree.{name}: operation {operation_id} does not run in tree "{name}"',
                    attributes={"pool_tree": name, "operation_id": operation_id},
                )
        return {
            name: self.trees[name].prepare_parameters_update(operation_id, **change)
            for name, change in changes.items()
        }

    def commit_operation_parameters(
        self, operation_id: str, updates: Mapping[str, ParametersUpdate], now: float
    ) -> list[str]:
        """Apply what ``prepare_operation_parameters`` validated (nothing changed in between); returns operations
        that became running."""
        op = self.operation(operation_id)
        activated: list[str] = []
        for name, update in updates.items():
            activated.extend(self.trees[name].commit_parameters_update(update))
        result = self._on_activated(activated, now)
        self._refresh_state(op, now)
        return result

    # ------------------------------------------------------------------------------------------ live config

    def apply_config(
        self, definitions: Mapping[str, Any], default_tree: str | None = None, now: float = 0.0
    ) -> list[str]:
        """Apply new validated definitions for the existing trees, all-or-nothing.

        Trees cannot be added or removed while operations use them: a removed tree that still has operations is
        an error; new trees are added empty. Returns operations that became running.
        """
        self.check_config(definitions)
        staged: dict[str, PoolTree] = {}
        for name, definition in definitions.items():
            current = self.trees.get(name)
            if current is None:
                staged[name] = PoolTree(definition, user_default_parent_pools=self.user_default_parent_pools)
            else:
                staged[name] = current.staged_config(definition)
        new_default = default_tree if default_tree is not None else self.default_tree
        if new_default is not None and new_default not in staged:
            raise PooltreeError(
                f'Default pool tree "{new_default}" does not exist', attributes={"pool_tree": new_default}
            )
        activated: list[str] = []
        for name, tree in staged.items():
            current = self.trees.get(name)
            if current is not None:
                activated.extend(current.commit_staged(tree))
        self.trees = {name: self.trees.get(name) or staged[name] for name in staged}
        self.default_tree = (
            new_default if new_default is not None or len(self.trees) != 1 else next(iter(self.trees))
        )
        return self._on_activated(activated, now)

    def set_user_default_parent_pools(self, mapping: Mapping[str, str], now: float = 0.0) -> list[str]:
        """Replace the user → default parent pool map (YTsaurus's ``//sys/scheduler/user_to_default_pool``).

        As YTsaurus's strategy does on a new map, each tree's ephemeral pools in a default parent move under their
        user's new default parent pool (trees with ``use_user_default_parent_pool_map``; the others keep theirs).
        All-or-nothing; returns operations that became running.
        """
        mapping = dict(mapping)
        staged: dict[str, PoolTree] = {}
        for name, tree in self.trees.items():
            previous = tree.user_default_parent_pools
            tree.user_default_parent_pools = mapping
            try:
                staged[name] = tree.staged_config(tree.definition)
            finally:
                tree.user_default_parent_pools = previous
        self.user_default_parent_pools = mapping
        activated: list[str] = []
        for name, tree in staged.items():
            activated.extend(self.trees[name].commit_staged(tree))
            self.trees[name].user_default_parent_pools = dict(mapping)
        return self._on_activated(activated, now)

    def check_config(self, definitions: Mapping[str, Any]) -> None:
        """The part of ``apply_config`` that can refuse a change for the operations it would strand: a removed
        tree that still has operations. Changes nothing."""
        for name, tree in self.trees.items():
            if name not in definitions and tree.operations:
                ids = sorted(tree.operations)
                raise PooltreeError(
                    f'Cannot remove pool tree "{name}" since it has {len(ids)} operations; '
                    "finish or abort them first",
                    attributes={"pool_tree": name, "operation_count": len(ids), "operation_ids": ids[:10]},
                )

    def try_run_all_pending_operations(self, now: float = 0.0) -> list[str]:
        activated: list[str] = []
        for tree in self.trees.values():
            activated.extend(tree.try_run_all_pending_operations())
        return self._on_activated(activated, now)

    def node_sets(self, nodes: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
        """Node addresses of each tree, chosen by the trees' ``node_tag_filter`` (node address → tags).

        A node matching two trees is a ConfigError (trees must not share nodes); one matching none is unused.
        """
        return nodes_of_trees({name: tree.config.tag_filter for name, tree in self.trees.items()}, nodes)

    # ------------------------------------------------------------------------------------------------ orchid

    def operation_info(self, operation_id: str) -> dict[str, Any]:
        """State, suspended flag, events, alerts and per-tree placement of an operation."""
        op = self._operations.get(operation_id) or self._finished.get(operation_id)
        if op is None:
            self.operation(operation_id)
            raise AssertionError("unreachable")
        return {
            "id": op.id,
            "state": op.state.value,
            "suspended": op.suspended,
            "authenticated_user": op.user,
            "operation_type": op.operation_type,
            "start_time": op.lifecycle.start_time,
            "finish_time": op.lifecycle.finish_time,
            "events": op.lifecycle.events_as_dicts(),
            "alerts": {key: dict(value) for key, value in op.alerts.items()},
            "pool_trees": {name: self.trees[name].operation_orchid(op.id) for name in op.trees},
        }
