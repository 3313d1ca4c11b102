"""Alerts of the live scheduler, YTsaurus style: one place that says what is wrong, computed from current state.

Every alert is a YT error (``{code, message, attributes, inner_errors}``) whose ``attributes.alert_type`` names it.
They are recomputed from the scheduler's state whenever they are read (and at every fair-share update, which is
when time-based ones can start to hold), so each alert clears as soon as its cause goes. This module holds the
alert types and the pure pieces the simulator, the CLI and the live service share; what reads the live scheduler
(``SchedulerAlerts``, ``explain_pending``) is ``pooltree/server/live/alerts.py``. The alerts:

scheduler (``//sys/scheduler/@alerts``, orchid ``scheduler/alerts``)
  ``update_fair_share``: the fair-share update's pool configuration issues of a tree (guarantees overcommitted,
  29000; nested promised-guarantee pools, 29001; priority pools without a donor, 29002) and the tree's own alerts
  (an invalid default parent pool), as inner errors, as YTsaurus's ``UpdateFairShare`` alert wraps them.
  ``update_pools``: ``//sys/pool_trees/@default_tree`` names a tree that does not exist ("Error updating pool
  trees" / "Default tree is missing", as YTsaurus's scheduler says), or a changed tree set or ``node_tag_filter``
  would put a known node in several trees ("Cannot update fair-share trees since there is node that belongs to
  multiple trees"); either way the scheduler keeps the trees it had.
  ``pool_tree_without_nodes``: a tree that no exec node matches (its operations can never run).
  ``nodes_without_pool_tree``: exec nodes matching no tree (YTsaurus ``NodesWithoutPoolTree``).
  ``nodes_with_alerts``: exec nodes that report alerts of their own (e.g. ``reduced_job_isolation``: jobs run
  without bubblewrap or per-slot uids), each node's alerts as inner errors naming the node.
  ``unsupported_options``: pool tree and pool options pooltree accepts but does not implement (the config
  layer's ``support.unsupported_options``, the same alert ``pooltree fair-share`` prints).
  ``unrecognized_pool_tree_config_options``: option names in the tree config or its pools that pooltree does not
  know, kept and ignored as YTsaurus does, each with the closest known option (``support.unrecognized_options``;
  the tree option ``enable_unrecognized_alert: false`` silences the tree config's part, as in YTsaurus).
  ``store_trouble``: the store's health accessor reports an error.
  ``heartbeats_throttled``: node heartbeats arrived past the concurrent heartbeat limits within the last minute
  and had their scheduling skipped (``pooltree/server/live/throttle.py``): the scheduler is overloaded.
  ``forecast_worker_died``: the scheduling forecast's worker process died (killed, out of memory, crashed) and no
  forecast succeeded since, or did so less than 10 minutes ago (``pooltree/forecast/health.py``): deaths, deaths
  in a row, how the last one ended, seconds until the next restart.
  ``read_process_died``: the read process that owns the API port (``pooltree/reads``) died; the scheduler serves
  the port itself until a new one takes it over; the alert holds while it does and until 10 minutes after the death
  (``pooltree/reads/health.py``): deaths, deaths in a row, restarts, how the last one ended.
  ``collector_frozen_garbage``: the garbage collector's valve found reference cycles among the objects the freezing
  policy had frozen (``pooltree/server/gc_tuning.py``): a path of the scheduler makes cycles, which the policy keeps
  until a vent; holds 10 minutes after such a vent: objects found, their most common types, the vent's pause.
  The per-tree ones are also under orchid ``scheduler/pool_trees/<tree>/alerts``.

operation (its ``alerts`` attribute: a map alert type → error, as YTsaurus's operation ``@alerts``)
  ``operation_pending``: held by a running-operation count limit (pool, limit, pool_tree).
  ``no_online_node_to_schedule_job``: no exec node of the operation's trees can ever fit one job of a task
  (code 4410, YTsaurus's ``NoOnlineNodeToScheduleJob``, attributes ``task_name``, ``needed_resources``,
  ``pool_tree``). As YTsaurus's controller does once its cached maximum node resources are refreshed
  (``max_available_exec_node_resources_update_period``, 10 s), the operation fails with that error after
  ``AlertSettings.unschedulable_operation_timeout`` seconds of the alert holding, and only when the tree has at
  least ``safe_online_node_count`` nodes (so a cluster still starting its nodes does not fail operations).
  ``operation_starving``: starving in a tree for longer than ``AlertSettings.starving_operation_timeout``.
  ``unsupported_options``: spec options accepted but not implemented (``support.unsupported_options``).
  ``unrecognized_spec``: spec keys pooltree does not know (the ``unrecognized_spec`` attribute lists them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pooltree.config.support import UNRECOGNIZED_OPTIONS_ALERT, UNSUPPORTED_OPTIONS_ALERT
from pooltree.config.tags import TagFilter
from pooltree.errors import GENERIC_ERROR, PooltreeError, yt_error
from pooltree.resources import RESOURCES, resources_to_dict

if TYPE_CHECKING:
    from pooltree.tree.pool_tree import PoolTree

NO_ONLINE_NODE_TO_SCHEDULE_JOB = 4410
"""YTsaurus ``NControllerAgent::EErrorCode::NoOnlineNodeToScheduleJob``."""

UPDATE_FAIR_SHARE = "update_fair_share"
UPDATE_POOLS = "update_pools"
POOL_TREE_WITHOUT_NODES = "pool_tree_without_nodes"
NODES_WITHOUT_POOL_TREE = "nodes_without_pool_tree"
NODES_WITH_ALERTS = "nodes_with_alerts"
UNSUPPORTED_OPTIONS = UNSUPPORTED_OPTIONS_ALERT
UNRECOGNIZED_OPTIONS = UNRECOGNIZED_OPTIONS_ALERT
STORE_TROUBLE = "store_trouble"
HEARTBEATS_THROTTLED = "heartbeats_throttled"
FORECAST_WORKER_DIED = "forecast_worker_died"
READ_PROCESS_DIED = "read_process_died"
COLLECTOR_FROZEN_GARBAGE = "collector_frozen_garbage"
OPERATION_PENDING = "operation_pending"
NO_ONLINE_NODE = "no_online_node_to_schedule_job"
OPERATION_STARVING = "operation_starving"
UNRECOGNIZED_SPEC = "unrecognized_spec"

SCHEDULER_ALERT_TYPES = (
    UPDATE_FAIR_SHARE,
    UPDATE_POOLS,
    POOL_TREE_WITHOUT_NODES,
    NODES_WITHOUT_POOL_TREE,
    UNSUPPORTED_OPTIONS,
    UNRECOGNIZED_OPTIONS,
    STORE_TROUBLE,
    HEARTBEATS_THROTTLED,
    FORECAST_WORKER_DIED,
    READ_PROCESS_DIED,
)
OPERATION_ALERT_TYPES = (
    OPERATION_PENDING,
    NO_ONLINE_NODE,
    OPERATION_STARVING,
    UNSUPPORTED_OPTIONS,
    UNRECOGNIZED_SPEC,
)


@dataclass(frozen=True)
class AlertSettings:
    """Thresholds of the time-based alerts (seconds)."""

    starving_operation_timeout: float = 300.0
    unschedulable_operation_timeout: float = 10.0
    safe_online_node_count: int = 1


def alert(alert_type: str, message: str, attributes: Mapping[str, Any] | None = None, *, code: int = 1,
          inner: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:  # fmt: skip
    """One alert as a YT error carrying its type in ``attributes.alert_type``."""
    return yt_error(code, message, {"alert_type": alert_type, **dict(attributes or {})}, list(inner))


def _error_dict(error: PooltreeError) -> dict[str, Any]:
    return yt_error(error.code or GENERIC_ERROR, error.message, dict(error.attributes or {}))


# ---------------------------------------------------------------------- pure pieces (shared with the CLI)


def fair_share_issues(pool_tree: PoolTree, errors: Iterable[PooltreeError]) -> list[dict[str, Any]]:
    """The fair-share update's errors and the tree's own alerts as YT errors (what ``pooltree fair-share`` prints
    as the tree's alerts, see :func:`pooltree.orchid.tree_view`)."""
    issues = [_error_dict(error) for error in errors]
    issues.extend(
        yt_error(GENERIC_ERROR, message, {"alert_type": name}) for name, message in pool_tree.alerts.items()
    )
    return issues


def issue_text(issue: Mapping[str, Any]) -> str:
    """One line for a person: the tree's own alerts keep their ``name: message`` form."""
    name = issue.get("attributes", {}).get("alert_type")
    return f"{name}: {issue['message']}" if name else str(issue["message"])


def unschedulable_task(
    tasks: Mapping[str, np.ndarray], node_limits: Iterable[np.ndarray]
) -> tuple[str, np.ndarray] | None:
    """The first task (with pending jobs) whose one job fits no node's limits, or None (also when there are no
    nodes: that is the tree's alert, not the operation's)."""
    limits = [np.asarray(limit, dtype=float) for limit in node_limits]
    if not limits:
        return None
    stacked = np.vstack(limits)
    for name, needed in tasks.items():
        if not bool(np.any(np.all(stacked + 1e-9 >= needed, axis=1))):
            return name, needed
    return None


def below_min_spare(limits: np.ndarray, spare: np.ndarray) -> list[str]:
    """The resources in which a node, even idle, has less than the tree's ``min_spare_allocation_resources_on_node``
    (the strategy starts nothing on a node whose free resources miss the spare in a resource it has): such a node
    can never run a job of that tree, whatever the job needs."""
    return [
        RESOURCES[i]
        for i in range(len(RESOURCES))
        if limits[i] > 0 and limits[i] + 1e-9 < spare[i]  # the strategy's rule at zero usage
    ]


@dataclass
class NodeGroup:
    """Nodes of one tree with the same tags and resource limits."""

    tags: frozenset[str]
    limits: np.ndarray
    count: int


class NodeFleet:
    """The exec nodes grouped by (tree, tags, resource limits): whether a job fits "some node", the largest node
    and the counts depend only on these, so an alert check costs the distinct kinds of nodes (a handful on a
    cluster of thousands) instead of every node once per operation."""

    def __init__(self, nodes: Iterable[Any]) -> None:
        self._trees: dict[str, dict[tuple[frozenset[str], bytes], NodeGroup]] = {}
        self._matches: dict[tuple[str, frozenset[str]], bool] = {}
        for node in nodes:
            limits = np.asarray(node.resource_limits, dtype=float)
            for tree in node.trees:
                groups = self._trees.setdefault(tree, {})
                key = (node.tags, limits.tobytes())
                group = groups.get(key)
                if group is None:
                    groups[key] = NodeGroup(node.tags, limits, 1)
                else:
                    group.count += 1

    def in_tree(self, tree: str) -> list[NodeGroup]:
        return list(self._trees.get(tree, {}).values())

    def matches(self, tag_filter: TagFilter, tags: frozenset[str]) -> bool:
        key = (tag_filter.text, tags)
        known = self._matches.get(key)
        if known is None:
            known = self._matches[key] = tag_filter.matches(tags)
        return known


def no_node_fits_error(
    tree: str,
    task_name: str,
    needed: np.ndarray,
    node_limits: list[np.ndarray],
    node_count: int,
    below_spare_count: int,
    spare: np.ndarray,
    tag_filter_text: str,
) -> dict[str, Any]:
    """The ``no_online_node_to_schedule_job`` error of ``tree``: ``node_limits`` are the limits of its nodes
    matching the operation's tag filter (each kind once or each node: only the largest and which fall below the
    spare matter), ``node_count`` how many nodes they are, ``below_spare_count`` how many of them are below
    ``spare`` (``min_spare_allocation_resources_on_node``)."""
    largest = np.max(np.vstack(node_limits), axis=0) if node_limits else None
    attributes: dict[str, Any] = {
        "task_name": task_name,
        "needed_resources": resources_to_dict(needed),
        "pool_tree": tree,
        "node_count": node_count,
    }
    if largest is not None:
        attributes["max_node_resources"] = resources_to_dict(largest)
        short = [RESOURCES[i] for i in range(len(RESOURCES)) if needed[i] > largest[i] + 1e-9]
        attributes["unsatisfied_resources"] = short
    if tag_filter_text:
        attributes["scheduling_tag_filter"] = tag_filter_text
    inner: list[dict[str, Any]] = []
    if below_spare_count > 0:
        attributes["min_spare_allocation_resources_on_node"] = resources_to_dict(spare)
        attributes["nodes_below_min_spare"] = below_spare_count
        if below_spare_count == node_count:
            short = sorted({r for limits in node_limits for r in below_min_spare(limits, spare)})
            inner.append(
                yt_error(
                    GENERIC_ERROR,
                    f'Every node of tree "{tree}" has less {", ".join(short)} than the tree\'s '
                    "min_spare_allocation_resources_on_node even when idle, so none can start a job",
                    {"pool_tree": tree, "resources": short},
                )
            )
    return yt_error(
        NO_ONLINE_NODE_TO_SCHEDULE_JOB,
        "No online node can satisfy the resource demand",
        {"alert_type": NO_ONLINE_NODE, **attributes},
        inner,
    )


def starving_for(view: Mapping[str, Any] | None, now: float) -> float | None:
    """Seconds the element has been starving (strategy view), or None when it is not starving."""
    if not view or view.get("starvation_status") in (None, "non_starving"):
        return None
    since = view.get("starving_since")
    return max(now - float(since), 0.0) if since is not None else None


def default_tree_missing(default_tree: str, trees: Iterable[str]) -> dict[str, Any]:
    """YTsaurus's ``update_pools`` alert when ``//sys/pool_trees/@default_tree`` names no pool tree: the
    scheduler refuses the pool trees update and keeps the trees it had."""
    missing = yt_error(GENERIC_ERROR, "Default tree is missing", {"default_tree": default_tree})
    return alert(
        UPDATE_POOLS,
        "Error updating pool trees",
        {"default_tree": default_tree, "pool_trees": sorted(trees)},
        inner=[missing],
    )


def nodes_in_several_trees(
    filters: Mapping[str, Any], nodes: Mapping[str, Iterable[str]]
) -> dict[str, Any] | None:
    """YTsaurus's ``update_pools`` alert when a known node would match several trees' ``node_tag_filter``
    (``filters``: tree → parsed filter; ``nodes``: address → tags): the scheduler refuses the pool trees update and
    keeps the trees it had (``CheckTreesConfiguration``). None when every node matches at most one tree."""
    inner = []
    for address, tags in sorted(nodes.items()):
        tag_set = frozenset(tags)
        matched = sorted(name for name, tag_filter in filters.items() if tag_filter.matches(tag_set))
        if len(matched) > 1:
            inner.append(
                yt_error(
                    GENERIC_ERROR,
                    "Cannot update fair-share trees since there is node that belongs to multiple trees",
                    {"node_address": address, "matched_trees": matched},
                )
            )
    if not inner:
        return None
    return alert(UPDATE_POOLS, "Error updating pool trees", {"pool_trees": sorted(filters)}, inner=inner)


# ---------------------------------------------------------------------- why an operation's allocations wait


def count_limit_reason(placement: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``max_running_operation_count`` reason of an operation's placement in a tree
    (``PoolTreeViews.operation_orchid``) when a pool's running-operation count holds it there, else None."""
    if "pending_pool" not in placement:
        return None
    return {
        "reason": "max_running_operation_count",
        "message": placement["pending_reason"],
        "pool": placement["pending_pool"],
        "queue_position": placement["pending_position"] + 1,
    }
