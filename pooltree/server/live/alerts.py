"""The alerts that read the live scheduler: ``SchedulerAlerts`` (one per ``LiveScheduler``, its ``alert_center``:
``//sys/scheduler/@alerts``, the per-tree and per-operation alerts, the operations to fail as unschedulable, the
counts for ``/metrics``) and ``explain_pending`` (why an operation's allocations wait in a tree).

The alert types, their YT error shape and the pure pieces both build on (``alert``, ``NodeFleet``,
``no_node_fits_error``, ``count_limit_reason``, ...) are in ``pooltree/alerts.py``, which the simulator, the CLI and
the strategy use without the live service; its docstring lists every alert and when it holds.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pooltree.alerts import (
    HEARTBEATS_THROTTLED,
    NO_ONLINE_NODE,
    NODES_WITH_ALERTS,
    NODES_WITHOUT_POOL_TREE,
    OPERATION_ALERT_TYPES,
    OPERATION_PENDING,
    OPERATION_STARVING,
    POOL_TREE_WITHOUT_NODES,
    SCHEDULER_ALERT_TYPES,
    STORE_TROUBLE,
    UNRECOGNIZED_SPEC,
    UNSUPPORTED_OPTIONS,
    UPDATE_FAIR_SHARE,
    AlertSettings,
    NodeFleet,
    alert,
    below_min_spare,
    count_limit_reason,
    fair_share_issues,
    no_node_fits_error,
    starving_for,
    unschedulable_task,
)
from pooltree.config.support import (
    unrecognized_options,
    unrecognized_options_alert,
    unsupported_options,
    unsupported_options_alert,
)
from pooltree.config.tags import TagFilter
from pooltree.errors import ConfigError, PooltreeError
from pooltree.resources import RESOURCES
from pooltree.strategy.node_limits import NODES_WITH_INSUFFICIENT_RESOURCE_LIMITS, insufficient_node_limits

if TYPE_CHECKING:
    from pooltree.server.live import LiveOperation, LiveScheduler
    from pooltree.tree.pool_tree import PoolTree


READ_VERDICTS = 4096
"""Verdicts of ``SchedulerAlerts._read_verdict`` kept per grouping of the nodes (past it, they are found anew)."""


UNLOCKED_READS = 3
"""Times ``SchedulerAlerts.counts`` reads an operation's alerts without the lock before it takes the lock."""


class SchedulerAlerts:
    """Alerts of one ``LiveScheduler``; every method expects the scheduler's lock to be held, but ``counts`` and an
    operation's alerts of a read (``operation_alerts`` of a queued operation, as ``get_operation`` reads it)."""

    def __init__(self, scheduler: LiveScheduler, settings: AlertSettings | None = None) -> None:
        self.scheduler = scheduler
        self.settings = settings or AlertSettings()
        self.unschedulable_since: dict[str, float] = {}
        """operation id → when it was first seen that no node fits it (cleared when a node fits)."""
        self._unsupported: dict[str, tuple[Any, list[dict[str, Any]]]] = {}
        self._ranks_view: Any = None
        self._ranks: dict[str | None, dict[str, int]] = {}
        self.store_health: Any = None
        """A callable returning None (healthy) or an error message / mapping; set by the service."""
        self.forecast_alert: Any = None
        """A callable of the scheduler's time returning the forecast worker's alert or None; set by the service."""
        self.read_process_alert: Any = None
        """A callable of the wall-clock time returning the read process's alert or None (``pooltree/reads``)."""
        self.collector_alert: Any = None
        """A callable returning the collector valve's alert or None (``pooltree/server/gc_tuning.py``)."""
        self.fleet_revision = 0
        """Moved whenever a node joins, leaves or changes its limits, tags or trees (``fleet_moved``)."""
        self._fleet: tuple[int, NodeFleet] | None = None
        """The nodes grouped at ``fleet_revision`` (a start's alert check read every node before: ~1 ms with 1,000)."""
        self._read_verdicts: tuple[NodeFleet, dict[Hashable, dict[str, Any] | None]] | None = None
        """``_unfit``'s verdicts for reads against the grouped nodes (``fleet()``), by what else they read: dropped
        with that grouping (``READ_VERDICTS`` at most)."""

    def fleet_moved(self) -> None:
        """A node joined, left or changed what ``NodeFleet`` groups it by: the next alert check groups anew."""
        self.fleet_revision += 1

    def fleet(self) -> NodeFleet:
        """The scheduler's nodes grouped by kind, built once per ``fleet_revision``."""
        cached = self._fleet
        revision = self.fleet_revision
        if cached is not None and cached[0] == revision:
            return cached[1]
        fleet = NodeFleet(list(self.scheduler.nodes.values()))
        self._fleet = (
            revision,
            fleet,
        )  # a move while grouping left the revision ahead: grouped again next time
        return fleet

    # -- trees

    def tree_alerts(self, tree: str) -> list[dict[str, Any]]:
        scheduler = self.scheduler
        core = scheduler.cores.get(tree)
        if core is None:
            return []
        alerts: list[dict[str, Any]] = []
        result = core.last_result
        issues = fair_share_issues(core.pool_tree, result.errors if result is not None else ())
        if issues:
            alerts.append(
                alert(
                    UPDATE_FAIR_SHARE,
                    f'Found pool configuration issues during fair share update in tree "{tree}"',
                    {"pool_tree": tree},
                    inner=issues,
                )
            )
        if not any(tree in node.trees for node in scheduler.nodes.values()):
            alerts.append(
                alert(
                    POOL_TREE_WITHOUT_NODES,
                    f'Pool tree "{tree}" has no exec nodes: its operations cannot run',
                    {"pool_tree": tree, "node_tag_filter": core.pool_tree.config.tag_filter.text},
                )
            )
        small = insufficient_node_limits(tree, core.pool_tree.config, core.nodes_view)
        if small is not None:
            alerts.append(alert(NODES_WITH_INSUFFICIENT_RESOURCE_LIMITS, *small))
        alerts.extend(self._option_alerts(tree, core.pool_tree.definition))
        return alerts

    def _option_alerts(self, tree: str, definition: Any) -> list[dict[str, Any]]:
        """The tree's ``unsupported_options`` and ``unrecognized_pool_tree_config_options`` alerts, computed once
        per tree definition (a config change makes a new definition object)."""
        cached = self._unsupported.get(tree)
        if cached is None or cached[0] is not definition:
            found = [
                alert
                for alert in (
                    unsupported_options_alert(unsupported_options([definition])),
                    unrecognized_options_alert(unrecognized_options([definition])),
                )
                if alert is not None
            ]
            for alert in found:
                alert["attributes"]["pool_tree"] = tree
            cached = (definition, found)
            self._unsupported[tree] = cached
        return copy.deepcopy(cached[1])

    def sibling_ranks(self, view: Mapping[str, Any], parent: str | None) -> dict[str, int]:
        """0-based position of each operation of ``parent`` by satisfaction ratio in one published view, kept
        while that view is current (a page explaining every operation of a pool sorts it once)."""
        if self._ranks_view is not view:
            self._ranks_view = view
            self._ranks = {}
        found = self._ranks.get(parent)
        if found is None:
            ordered = sorted(
                (float(v.get("satisfaction_ratio", 0.0)), op_id)
                for op_id, v in view.get("operations", {}).items()
                if v.get("parent") == parent
            )
            found = {op_id: index for index, (_, op_id) in enumerate(ordered)}
            self._ranks[parent] = found
        return found

    # -- the whole scheduler

    def scheduler_alerts(self) -> list[dict[str, Any]]:
        scheduler = self.scheduler
        alerts: list[dict[str, Any]] = []
        for tree in sorted(scheduler.cores):
            alerts.extend(self.tree_alerts(tree))
        orphans = sorted(address for address, node in scheduler.nodes.items() if not node.trees)
        if orphans and scheduler.cores:
            alerts.append(
                alert(
                    NODES_WITHOUT_POOL_TREE,
                    "Found nodes that do not match any pool tree",
                    {"node_addresses": orphans, "node_count": len(orphans)},
                )
            )
        alerted = sorted(address for address, node in scheduler.nodes.items() if node.alerts)
        if alerted:
            inner = [
                {**error, "attributes": {**error.get("attributes", {}), "node_address": address}}
                for address in alerted
                for error in scheduler.nodes[address].alerts
            ]
            alerts.append(
                alert(
                    NODES_WITH_ALERTS,
                    "Found nodes with alerts",
                    {"node_addresses": alerted, "node_count": len(alerted)},
                    inner=inner,
                )
            )
        if scheduler.pool_trees_error is not None:
            alerts.append(scheduler.pool_trees_error)
        trouble = self._store_trouble()
        if trouble is not None:
            alerts.append(trouble)
        forecast = self.forecast_alert(scheduler.now) if self.forecast_alert is not None else None
        if forecast is not None:
            alerts.append(forecast)
        reads = self.read_process_alert(time.time()) if self.read_process_alert is not None else None
        if reads is not None:
            alerts.append(reads)
        collector = self.collector_alert() if self.collector_alert is not None else None
        if collector is not None:
            alerts.append(collector)
        throttle = scheduler.heartbeat_throttle
        if throttle.recently_throttled(scheduler.now):
            settings = throttle.settings
            alerts.append(
                alert(
                    HEARTBEATS_THROTTLED,
                    "Node heartbeats are throttled: the scheduler is overloaded and skipped their scheduling",
                    {
                        "throttled_by_soft_limit": throttle.throttled["soft"],
                        "throttled_by_hard_limit": throttle.throttled["hard"],
                        "throttled_by_queue_wait": throttle.throttled["queued"],
                        "soft_concurrent_heartbeat_limit": settings.soft_limit,
                        "hard_concurrent_heartbeat_limit": settings.hard_limit,
                        "concurrent_heartbeats": throttle.last_in_flight_at_throttle,
                        "last_throttled_time": throttle.last_throttled,
                    },
                )
            )
        return alerts

    def _store_trouble(self) -> dict[str, Any] | None:
        health = self.store_health
        if health is None:
            return None
        try:
            problem = health()
        except Exception as error:  # a failing health check is itself trouble
            problem = f"{type(error).__name__}: {error}"
        if not problem:
            return None
        if isinstance(problem, Mapping):
            message = str(problem.get("message", "Store is unhealthy"))
            attributes = {k: v for k, v in problem.items() if k != "message"}
        else:
            message, attributes = str(problem), {}
        return alert(STORE_TROUBLE, f"Store trouble: {message}", attributes)

    # -- operations

    def operation_alerts(self, op: LiveOperation, now: float) -> dict[str, dict[str, Any]]:
        """The operation's ``alerts`` attribute (alert type → YT error)."""
        scheduler = self.scheduler
        alerts: dict[str, dict[str, Any]] = {}
        registered = scheduler.registry.operations.get(op.id)
        if registered is not None:
            for key, value in registered.alerts.items():
                kind = OPERATION_PENDING if key == OPERATION_PENDING else key
                alerts[key] = alert(kind, value.get("message", key), value.get("attributes"))
        unfit = self._unfit(op)
        if unfit is not None:
            alerts[NO_ONLINE_NODE] = unfit
        for tree in op.trees:
            seconds = starving_for(scheduler.strategy_views.get(tree, {}).get(op.id), now)
            if seconds is not None and seconds >= self.settings.starving_operation_timeout:
                alerts[OPERATION_STARVING] = alert(
                    OPERATION_STARVING,
                    f'Operation has been starving for {seconds:.0f} s in tree "{tree}"',
                    {
                        "pool_tree": tree,
                        "pool": op.pools.get(tree),
                        "starving_seconds": round(seconds, 1),
                        "threshold_seconds": self.settings.starving_operation_timeout,
                    },
                )
                break
        if op.spec_alerts is None:  # the spec never changes: its alerts are found once
            op.spec_alerts = self._spec_alerts(op)
        for key, value in op.spec_alerts.items():
            alerts[key] = copy.deepcopy(value)
        return alerts

    @staticmethod
    def _spec_alerts(op: LiveOperation) -> dict[str, dict[str, Any]]:
        """The alerts ``op``'s spec alone raises: options pooltree accepts but does not implement, and options it
        does not know (with the known option a typo misspells)."""
        alerts: dict[str, dict[str, Any]] = {}
        unsupported = unsupported_options_alert(unsupported_options([], [(op.id, op.model)]))
        if unsupported is not None:
            alerts[UNSUPPORTED_OPTIONS] = unsupported
        unrecognized = op.model.unrecognized_spec()
        if unrecognized:
            attributes: dict[str, Any] = {"unrecognized_spec": unrecognized}
            closest = {
                entry["path"].removeprefix(f"operations.{op.id}."): entry["closest"]
                for entry in unrecognized_options([], [(op.id, op.model)])
                if "closest" in entry
            }
            if closest:
                attributes["closest_known_options"] = closest  # a typo names the option it misspells
            alerts[UNRECOGNIZED_SPEC] = alert(
                UNRECOGNIZED_SPEC,
                "Operation spec has options the scheduler does not know; they have no effect",
                attributes,
            )
        return alerts

    def _unfit(
        self,
        op: LiveOperation,
        fleet: NodeFleet | None = None,
        verdicts: dict[Hashable, dict[str, Any] | None] | None = None,
    ) -> dict[str, Any] | None:
        """The ``no_online_node_to_schedule_job`` error when no node of some tree of ``op`` fits a pending job.
        ``fleet``: the nodes grouped once for many operations (``operations_to_fail``); else grouped here.
        ``verdicts``: the answers already found against ``fleet``, by what they depend on (the operation's trees,
        tag filter and pending tasks' needs): operations of one spec are judged once (the answer is shared, and
        not to be changed)."""
        if op.is_final or op.controller.pending_allocation_count == 0:
            return None
        tasks = op.controller.pending_task_resources()
        key: tuple[Any, ...] = (
            tuple(op.trees),
            op.model.scheduling_tag_filter,
            tuple((name, tuple(needed.tolist())) for name, needed in tasks.items()),
        )
        if verdicts is None and fleet is None:
            return self._read_verdict(op, tasks, key)
        if verdicts is None:
            return self._unfit_tasks(op, tasks, fleet)
        if key not in verdicts:
            verdicts[key] = self._unfit_tasks(op, tasks, fleet)
        return verdicts[key]

    def _read_verdict(
        self, op: LiveOperation, tasks: dict[str, np.ndarray], key: tuple[Any, ...]
    ) -> dict[str, Any] | None:
        """``_unfit`` of a read (an operation's ``alerts``: every ``get_operation`` of a live operation builds
        them, ~a quarter of its map's cost beside 1,000 nodes), found once per grouping of the nodes
        (``fleet()``) and per what else it reads (``key``: trees, tag filter, pending tasks' needs; the settings'
        ``safe_online_node_count`` and each tree's ``min_spare_allocation_resources_on_node``). The answer is a
        copy: the kept one is not to be changed."""
        fleet = self.fleet()
        kept = self._read_verdicts
        if kept is None or kept[0] is not fleet or len(kept[1]) >= READ_VERDICTS:
            kept = self._read_verdicts = (fleet, {})
        key = (
            *key,
            self.settings.safe_online_node_count,
            tuple(tuple(self._min_spare(tree).tolist()) for tree in op.trees),
        )
        verdicts = kept[1]
        if key not in verdicts:
            verdicts[key] = self._unfit_tasks(op, tasks, fleet)
        found = verdicts[key]
        return None if found is None else copy.deepcopy(found)

    def _unfit_tasks(
        self, op: LiveOperation, tasks: dict[str, np.ndarray], fleet: NodeFleet | None
    ) -> dict[str, Any] | None:
        """``_unfit`` for ``op`` with pending ``tasks`` (reads only its trees and tag filter)."""
        try:
            tag_filter = TagFilter.parse(op.model.scheduling_tag_filter or "", "spec.scheduling_tag_filter")
        except ConfigError:
            tag_filter = TagFilter("")
        if fleet is None:
            fleet = self.fleet()
        for tree in op.trees:
            groups = fleet.in_tree(tree)
            in_tree = sum(group.count for group in groups)
            if in_tree < max(self.settings.safe_online_node_count, 1):
                continue
            matching = [group for group in groups if fleet.matches(tag_filter, group.tags)]
            node_count = sum(group.count for group in matching)
            spare = self._min_spare(tree)
            usable = [group for group in matching if not below_min_spare(group.limits, spare)]
            usable_count = sum(group.count for group in usable)
            found = unschedulable_task(tasks, [group.limits for group in usable]) if usable else None
            if not usable:
                found = next(iter(tasks.items()), None)
            if found is None:
                continue
            name, needed = found
            return no_node_fits_error(
                tree,
                name,
                needed,
                [group.limits for group in matching],
                node_count,
                node_count - usable_count,
                spare,
                tag_filter.text,
            )
        return None

    def _min_spare(self, tree: str) -> np.ndarray:
        """The tree's ``min_spare_allocation_resources_on_node`` (zeros for a tree without a core yet)."""
        core = self.scheduler.cores.get(tree)
        if core is None:
            return np.zeros(len(RESOURCES))
        return np.asarray(core.strategy.config.min_spare_allocation_resources_on_node, dtype=float)

    def operations_to_fail(self, now: float, tree: str) -> list[tuple[str, dict[str, Any]]]:
        """Operations of ``tree`` no node has fit for ``unschedulable_operation_timeout``: (id, the error to fail
        them with). Called after each fair-share update of ``tree``."""
        failing: list[tuple[str, dict[str, Any]]] = []
        fleet = self.fleet()  # once for every operation, and kept while no node moves (`fleet_revision`)
        verdicts: dict[Hashable, dict[str, Any] | None] = {}  # operations of one spec judged once
        for op in list(self.scheduler.operations.values()):
            if tree not in op.trees:
                continue
            unfit = None if op.is_final or op.state == "pending" else self._unfit(op, fleet, verdicts)
            if unfit is None:
                self.unschedulable_since.pop(op.id, None)
                continue
            since = self.unschedulable_since.setdefault(op.id, now)
            if now - since >= self.settings.unschedulable_operation_timeout:
                error = dict(unfit)
                error["attributes"] = {k: v for k, v in unfit["attributes"].items() if k != "alert_type"}
                failing.append((op.id, error))
        for stale in [i for i in self.unschedulable_since if i not in self.scheduler.operations]:
            del self.unschedulable_since[stale]
        return failing

    # -- counts for /metrics

    def counts(self, now: float, scheduler_alerts: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
        """(scope, alert type) → how many alerts hold now (scope ``scheduler`` or ``operation``), for ``/metrics``:
        the scheduler's ``scheduler_alerts`` (those of the read snapshot), the operations' read without the lock
        (``_operation_alert_types``)."""
        counts: dict[tuple[str, str], int] = {("scheduler", kind): 0 for kind in SCHEDULER_ALERT_TYPES}
        counts.update({("operation", kind): 0 for kind in OPERATION_ALERT_TYPES})
        for item in scheduler_alerts:
            key = ("scheduler", item["attributes"]["alert_type"])
            counts[key] = counts.get(key, 0) + 1
        for op in list(self.scheduler.operations.values()):
            for kind in self._operation_alert_types(op, now):
                key = ("operation", kind)
                counts[key] = counts.get(key, 0) + 1
        return counts

    def _operation_alert_types(self, op: LiveOperation, now: float) -> list[str]:
        """The types of ``op``'s alerts read without the scheduling lock, as ``get_operation`` reads a queued
        operation's: read again (up to ``UNLOCKED_READS`` times) when the operation changed while read, and only
        then under the lock."""
        for _ in range(UNLOCKED_READS):
            try:
                return list(self.operation_alerts(op, now))
            except (RuntimeError, KeyError, ValueError, PooltreeError):  # changed while read
                continue
        with self.scheduler.lock:
            return list(self.operation_alerts(op, now))


# ---------------------------------------------------------------------- why an operation's allocations wait


def explain_pending(
    scheduler: LiveScheduler,
    op: LiveOperation,
    tree: str,
    placement: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Why ``op`` has pending allocations in ``tree`` (None when it has none): the first reason that holds of
    the running-operation count limit (pool, limit, queue position), no node fitting a job, the scheduling tag
    filter matching no node, a resource limit of the operation or a pool on its path (pool, resource, usage,
    limit), its fair share reached (with its position among the pool's operations by satisfaction), or no node
    with enough free resources now. ``placement``: its ``operation_orchid`` in ``tree`` when the caller has
    built it already (else built here). Expects the scheduler's lock to be held."""
    if op.is_final or (op.controller.pending_allocation_count == 0 and op.state != "pending"):
        return None
    pool_tree = scheduler.registry.trees.get(tree)
    if pool_tree is not None and op.id in scheduler.registry.operations:
        if placement is None:
            try:
                placement = pool_tree.operation_orchid(op.id)
            except PooltreeError:
                placement = {}
        held = count_limit_reason(placement)
        if held is not None:
            return held
    tag_filter_text = op.model.scheduling_tag_filter or ""
    in_tree = [node for node in scheduler.nodes.values() if tree in node.trees]
    if tag_filter_text:
        try:
            tag_filter = TagFilter.parse(tag_filter_text, "spec.scheduling_tag_filter")
        except ConfigError:
            tag_filter = TagFilter("")
        if in_tree and not any(tag_filter.matches(node.tags) for node in in_tree):
            return {
                "reason": "scheduling_tag_filter",
                "message": f'No node of tree "{tree}" has tags matching "{tag_filter_text}"',
                "scheduling_tag_filter": tag_filter_text,
            }
    unfit = scheduler.alert_center._unfit(op)
    if unfit is not None and unfit["attributes"].get("pool_tree") == tree:
        attributes = unfit["attributes"]
        return {
            "reason": "no_node_fits",
            "message": f'No node can fit a job of task "{attributes["task_name"]}" '
            f"(short of {', '.join(attributes.get('unsatisfied_resources', [])) or 'matching nodes'})",
            "task_name": attributes["task_name"],
            "needed_resources": attributes["needed_resources"],
        }
    view = scheduler.views.get(tree, {})
    op_view = view.get("operations", {}).get(op.id)
    if op_view is None:
        return {"reason": "not_published", "message": "Waiting for the next fair-share update"}
    needed = op.controller.min_needed_resources
    limited = _limiting_element(pool_tree, view, op.id, needed)
    if limited is not None:
        return limited
    if float(op_view.get("usage_ratio", 0.0)) + 1e-9 >= float(op_view.get("fair_share_ratio", 0.0)):
        parent = op_view.get("parent")
        ranks = scheduler.alert_center.sibling_ranks(view, parent)
        position = ranks.get(op.id, 0) + 1
        siblings = ranks
        return {
            "reason": "fair_share_reached",
            "message": (
                f"Usage {op_view.get('usage_ratio', 0.0):.1%} has reached the fair share "
                f"{op_view.get('fair_share_ratio', 0.0):.1%} (strong guarantee "
                f"{_dominant(op_view, 'strong_guarantee'):.1%}, weight {op_view.get('weight', 1.0):g}); "
                f'position {position} of {len(siblings)} in pool "{parent}" by satisfaction'
            ),
            "pool": parent,
            "queue_position": position,
        }
    core = scheduler.cores.get(tree)
    nodes = list(core.strategy.nodes.values()) if core is not None else []
    if not any(bool(np.all(node.resource_limits - node.usage + 1e-9 >= needed)) for node in nodes):
        return {
            "reason": "no_free_resources",
            "message": "Below its fair share, but no node has enough free resources now "
            "(waiting for jobs to finish or for preemption once starving)",
        }
    return {"reason": "waiting_for_heartbeat", "message": "Waiting for a node heartbeat to start allocations"}


def _dominant(view: Mapping[str, Any], part: str) -> float:
    detailed = view.get("detailed_fair_share", {}).get(part, {})
    return max((float(v) for v in detailed.values()), default=0.0)


def _limiting_element(
    pool_tree: PoolTree | None, view: Mapping[str, Any], operation_id: str, needed: np.ndarray
) -> dict[str, Any] | None:
    """The operation itself or the lowest pool on its path whose configured ``resource_limits`` one more job
    would exceed (usage from the last fair-share view)."""
    if pool_tree is None:
        return None
    try:
        tree_op = pool_tree.operation(operation_id)
    except PooltreeError:
        return None
    operations = view.get("operations", {})
    pools = view.get("pools", {})
    chain: list[tuple[str | None, Any, Mapping[str, Any]]] = [
        (None, np.asarray(tree_op.resource_limits, dtype=float), operations.get(operation_id, {}))
    ]
    pool = tree_op.pool
    while pool is not None:
        config = pool.config
        if config is not None:
            chain.append(
                (pool.name, np.asarray(config.resource_limits.vector, dtype=float), pools.get(pool.name, {}))
            )
        pool = pool.parent
    for name, limits, element in chain:
        usage = element.get("resource_usage") or {}
        for index, resource in enumerate(RESOURCES):
            limit = float(limits[index])
            if not np.isfinite(limit) or needed[index] <= 0:
                continue
            used = float(usage.get(resource, 0.0))
            if used + float(needed[index]) > limit + 1e-9:
                who = "the operation" if name is None else f'pool "{name}"'
                return {
                    "reason": "resource_limits",
                    "message": (
                        f"Resource limit of {who} reached: {resource} usage {used:g} + {float(needed[index]):g} "
                        f"needed > limit {limit:g}"
                    ),
                    "pool": name,
                    "resource": resource,
                    "usage": used,
                    "limit": limit,
                }
    return None
