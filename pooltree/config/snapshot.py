"""The snapshot file of PRODUCT.md §2: one moment of a cluster (nodes, pool trees, operations, update clock).

Every vector here is a read-only numpy array in :data:`pooltree.resources.RESOURCES` order. Times are float
seconds (ISO-8601 inputs become seconds since the Unix epoch, UTC when no zone is given).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from pooltree.config.documents import load_document
from pooltree.config.operation import OperationSpec
from pooltree.config.pool_trees import PoolTreeDefinition, parse_pool_trees, resolve_default_tree
from pooltree.config.tags import nodes_of_trees
from pooltree.errors import ConfigError, join_path
from pooltree.resources import RESOURCES, Vector, parse_resources, resources_to_dict

SNAPSHOT_KEYS = (
    "cluster",
    "default_pool_tree",
    "pool_trees",
    "operations",
    "fair_share_update",
    "default_tentative_pool_trees",
)
OPERATION_KEYS = frozenset(
    {"id", "type", "user", "start_time", "spec", "resource_usage", "resource_demand", "jobs"}
)
OPERATION_TYPES = frozenset(
    {"map", "reduce", "map_reduce", "sort", "merge", "erase", "join_reduce", "remote_copy", "vanilla"}
)
DEFAULT_USER = "root"


def _frozen(vector: Vector) -> Vector:
    array = np.array(vector, dtype=float)
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class NodeGroup:
    """``count`` identical exec nodes with ``resource_limits`` each and the same tags."""

    address: str
    count: int
    resource_limits: Vector
    tags: frozenset[str]

    @property
    def total_resources(self) -> Vector:
        return _frozen(self.resource_limits * self.count)


@dataclass(frozen=True)
class Cluster:
    """Either explicit ``total_resources`` (shared by every tree) or node groups split by ``node_tag_filter``."""

    total_resources: Vector | None
    nodes: tuple[NodeGroup, ...] = ()


@dataclass(frozen=True)
class JobGroup:
    """Jobs of one shape: ``running`` of them hold ``resources`` each, ``pending`` more wait to start."""

    resources: Vector
    running: int
    pending: int


@dataclass(frozen=True)
class SnapshotOperation:
    """An operation at the snapshot moment, with its spec and its usage/demand in every tree it runs in."""

    id: str
    type: str
    user: str
    start_time: float
    spec: OperationSpec
    resource_usage: Vector
    resource_demand: Vector
    pool_trees: tuple[str, ...]
    """Trees the operation runs in (spec ``pool_trees`` or the default tree)."""
    pools: dict[str, str]
    """Tree → pool name the spec asks for (the runtime may make it ephemeral)."""
    jobs: tuple[JobGroup, ...] = ()


@dataclass(frozen=True)
class FairShareUpdateState:
    """The update clock and the integral pools' accumulated volumes (resource × seconds)."""

    now: float
    previous_update_time: float | None = None
    accumulated_resource_volume: dict[str, Vector] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """A parsed, validated snapshot."""

    cluster: Cluster
    default_pool_tree: str
    pool_trees: dict[str, PoolTreeDefinition]
    operations: tuple[SnapshotOperation, ...]
    fair_share_update: FairShareUpdateState | None
    tree_total_resources: dict[str, Vector]
    """Total resources per tree (nodes summed by ``node_tag_filter``, or ``cluster.total_resources``)."""
    tree_nodes: dict[str, tuple[str, ...]]
    """Node group addresses per tree (empty when the cluster gives ``total_resources``)."""
    default_tentative_pool_trees: tuple[str, ...] = ()
    """The scheduler's ``default_tentative_pool_trees`` (spec ``use_default_tentative_pool_trees``)."""

    def operations_in_tree(self, tree: str) -> tuple[SnapshotOperation, ...]:
        return tuple(operation for operation in self.operations if tree in operation.pool_trees)


def parse_time(value: Any, path: str) -> float:
    """Seconds from a number or an ISO-8601 string (UTC when the string has no zone)."""
    if isinstance(value, bool):
        raise ConfigError(path, f"expected seconds or an ISO-8601 time, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ConfigError(path, f"time must be finite, got {value!r}")
        return float(value)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise ConfigError(path, f"cannot parse time {value!r} (use seconds or ISO-8601)") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    raise ConfigError(path, f"expected seconds or an ISO-8601 time, got {type(value).__name__}")


def _count(value: Any, path: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(path, f"expected an integer ≥ {minimum}, got {value!r}")
    return value


def _map(value: Any, path: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"expected {what}, got {type(value).__name__}")
    return value


def _check_keys(value: Mapping[str, Any], allowed: Iterable[str], path: str) -> None:
    allowed = tuple(allowed)
    for key in value:
        if key not in allowed:
            raise ConfigError(
                join_path(path, str(key)), f"unknown key {key!r}; expected one of {', '.join(allowed)}"
            )


def parse_cluster(document: Any, path: str = "cluster") -> Cluster:
    """``cluster: {total_resources: {...}}`` or ``cluster: {nodes: [{address, count, resource_limits, tags}]}``."""
    document = _map(document, path, "a map with total_resources or nodes")
    _check_keys(document, ("total_resources", "nodes"), path)
    has_total = document.get("total_resources") is not None
    has_nodes = document.get("nodes") is not None
    if has_total == has_nodes:
        raise ConfigError(path, "give exactly one of total_resources and nodes")
    if has_total:
        total = parse_resources(document["total_resources"], join_path(path, "total_resources"))
        return Cluster(_frozen(total))
    nodes_path = join_path(path, "nodes")
    if not isinstance(document["nodes"], list):
        raise ConfigError(nodes_path, f"expected a list of nodes, got {type(document['nodes']).__name__}")
    groups: list[NodeGroup] = []
    seen: set[str] = set()
    for index, node in enumerate(document["nodes"]):
        node_path = join_path(nodes_path, index)
        node = _map(node, node_path, "a node map")
        _check_keys(node, ("address", "count", "resource_limits", "tags"), node_path)
        address = node.get("address", f"node-{index + 1}")
        if not isinstance(address, str) or not address:
            raise ConfigError(
                join_path(node_path, "address"), f"expected a non-empty string, got {address!r}"
            )
        if address in seen:
            raise ConfigError(join_path(node_path, "address"), f"duplicate node address {address!r}")
        seen.add(address)
        count = _count(node.get("count", 1), join_path(node_path, "count"), minimum=1)
        limits = parse_resources(node.get("resource_limits"), join_path(node_path, "resource_limits"))
        tags = node.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(tag, str) and tag for tag in tags):
            raise ConfigError(
                join_path(node_path, "tags"), f"expected a list of non-empty tag strings, got {tags!r}"
            )
        groups.append(NodeGroup(address, count, _frozen(limits), frozenset(tags)))
    return Cluster(None, tuple(groups))


def _tree_resources(
    cluster: Cluster, trees: Mapping[str, PoolTreeDefinition]
) -> tuple[dict[str, Vector], dict[str, tuple[str, ...]]]:
    if cluster.total_resources is not None:
        return {name: cluster.total_resources for name in trees}, {name: () for name in trees}
    try:
        assignment = nodes_of_trees(
            {name: tree.config.tag_filter for name, tree in trees.items()},
            {group.address: group.tags for group in cluster.nodes},
        )
    except ConfigError as error:
        address = error.attributes.get("node")
        index = next(i for i, group in enumerate(cluster.nodes) if group.address == address)
        raise ConfigError(f"cluster.nodes[{index}].tags", error.reason, attributes=error.attributes) from None
    by_address = {group.address: group for group in cluster.nodes}
    totals: dict[str, Vector] = {}
    for name, addresses in assignment.items():
        total = np.zeros(len(RESOURCES))
        for address in addresses:
            total += by_address[address].total_resources
        totals[name] = _frozen(total)
    return totals, {name: tuple(addresses) for name, addresses in assignment.items()}


def _usage_and_demand(document: Mapping[str, Any], path: str) -> tuple[Vector, Vector, tuple[JobGroup, ...]]:
    if document.get("jobs") is not None:
        for key in ("resource_usage", "resource_demand"):
            if document.get(key) is not None:
                raise ConfigError(
                    join_path(path, key), "give either jobs or resource_usage/resource_demand, not both"
                )
        jobs_path = join_path(path, "jobs")
        if not isinstance(document["jobs"], list):
            raise ConfigError(
                jobs_path, f"expected a list of job groups, got {type(document['jobs']).__name__}"
            )
        usage = np.zeros(len(RESOURCES))
        demand = np.zeros(len(RESOURCES))
        groups: list[JobGroup] = []
        for index, job in enumerate(document["jobs"]):
            job_path = join_path(jobs_path, index)
            job = _map(job, job_path, "a job group map")
            _check_keys(job, ("resources", "running", "pending"), job_path)
            resources = parse_resources(job.get("resources"), join_path(job_path, "resources"))
            running = _count(job.get("running", 0), join_path(job_path, "running"))
            pending = _count(job.get("pending", 0), join_path(job_path, "pending"))
            usage += resources * running
            demand += resources * (running + pending)
            groups.append(JobGroup(_frozen(resources), running, pending))
        return _frozen(usage), _frozen(demand), tuple(groups)
    usage = parse_resources(document.get("resource_usage"), join_path(path, "resource_usage"))
    demand_given = document.get("resource_demand")
    demand = (
        parse_resources(demand_given, join_path(path, "resource_demand"))
        if demand_given is not None
        else usage
    )
    for index, name in enumerate(RESOURCES):
        if demand[index] < usage[index]:
            shown_demand = resources_to_dict(demand)[name]
            shown_usage = resources_to_dict(usage)[name]
            raise ConfigError(
                join_path(join_path(path, "resource_demand"), name),
                f"resource_demand is less than resource_usage ({shown_demand} < {shown_usage}); demand includes usage",
            )
    return _frozen(usage), _frozen(demand), ()


def _pool_owner(trees: Mapping[str, PoolTreeDefinition], pool: str, exclude: str) -> str | None:
    return next((name for name, tree in trees.items() if name != exclude and pool in tree.pools), None)


def parse_operation(
    document: Any,
    path: str,
    *,
    operation_id: str,
    trees: Mapping[str, PoolTreeDefinition],
    default_tree: str,
) -> SnapshotOperation:
    """One entry of ``operations`` (its id already chosen); checks trees and pools against ``trees``."""
    document = _map(document, path, "an operation map")
    _check_keys(document, sorted(OPERATION_KEYS), path)
    operation_type = document.get("type", "map")
    if operation_type not in OPERATION_TYPES:
        raise ConfigError(
            join_path(path, "type"),
            f"unknown operation type {operation_type!r}; known: {', '.join(sorted(OPERATION_TYPES))}",
        )
    user = document.get("user", DEFAULT_USER)
    if not isinstance(user, str) or not user:
        raise ConfigError(join_path(path, "user"), f"expected a non-empty user name, got {user!r}")
    start_time = parse_time(document.get("start_time", 0), join_path(path, "start_time"))
    spec_path = join_path(path, "spec")
    spec = OperationSpec.parse(document.get("spec"), spec_path)
    for tree in spec.scheduling_options_per_pool_tree:
        if tree not in trees:
            raise ConfigError(
                join_path(join_path(spec_path, "scheduling_options_per_pool_tree"), tree),
                f'unknown pool tree "{tree}" (trees: {", ".join(trees)})',
            )
    if spec.pool_trees is not None:
        for index, tree in enumerate(spec.pool_trees):
            if tree not in trees:
                raise ConfigError(
                    join_path(join_path(spec_path, "pool_trees"), index),
                    f'unknown pool tree "{tree}" (trees: {", ".join(trees)})',
                )
    operation_trees = spec.pool_trees_or(default_tree)
    pools: dict[str, str] = {}
    for tree in operation_trees:
        pool = spec.pool_for_tree(tree, user)
        options = spec.scheduling_options_per_pool_tree.get(tree)
        if options is not None and options.pool is not None:
            pool_path = join_path(
                join_path(join_path(spec_path, "scheduling_options_per_pool_tree"), tree), "pool"
            )
        else:
            pool_path = join_path(spec_path, "pool") if spec.pool is not None else join_path(path, "user")
        if pool not in trees[tree].pools and "$" not in pool:
            owner = _pool_owner(trees, pool, tree)
            if owner is not None:
                raise ConfigError(
                    pool_path,
                    f'pool "{pool}" is a configured pool of tree "{owner}", not of tree "{tree}" where the operation '
                    f"runs; set pool_trees or scheduling_options_per_pool_tree.{tree}.pool",
                )
        pools[tree] = pool
    usage, demand, jobs = _usage_and_demand(document, path)
    return SnapshotOperation(
        operation_id, operation_type, user, start_time, spec, usage, demand, operation_trees, pools, jobs
    )


def _operation_ids(documents: list[Any], path: str) -> list[str]:
    """Explicit ids (unique) and generated ``op-N`` ids (N = position, skipping explicit ones)."""
    explicit: dict[str, int] = {}
    for index, document in enumerate(documents):
        if isinstance(document, Mapping) and document.get("id") is not None:
            operation_id = document["id"]
            id_path = join_path(join_path(path, index), "id")
            if not isinstance(operation_id, str) or not operation_id:
                raise ConfigError(id_path, f"expected a non-empty string, got {operation_id!r}")
            if operation_id in explicit:
                raise ConfigError(
                    id_path,
                    f'duplicate operation id "{operation_id}" (also {join_path(path, explicit[operation_id])})',
                )
            explicit[operation_id] = index
    ids: list[str] = []
    number = 0
    for index, document in enumerate(documents):
        if isinstance(document, Mapping) and document.get("id") is not None:
            ids.append(document["id"])
            continue
        number = max(number + 1, index + 1)
        while f"op-{number}" in explicit:
            number += 1
        ids.append(f"op-{number}")
    return ids


def parse_fair_share_update(
    document: Any, trees: Mapping[str, PoolTreeDefinition], path: str = "fair_share_update"
) -> FairShareUpdateState:
    document = _map(document, path, "a map with now, previous_update_time, accumulated_resource_volume")
    _check_keys(document, ("now", "previous_update_time", "accumulated_resource_volume"), path)
    if document.get("now") is None:
        raise ConfigError(join_path(path, "now"), "required: the time of this update in seconds")
    now = parse_time(document["now"], join_path(path, "now"))
    previous = document.get("previous_update_time")
    previous_time = None
    if previous is not None:
        previous_time = parse_time(previous, join_path(path, "previous_update_time"))
        if previous_time > now:
            raise ConfigError(
                join_path(path, "previous_update_time"),
                f"previous update time {previous_time:g} is after now {now:g}",
            )
    volumes: dict[str, Vector] = {}
    volume_path = join_path(path, "accumulated_resource_volume")
    raw = document.get("accumulated_resource_volume") or {}
    for pool, value in _map(raw, volume_path, "a map of pool → resource volume").items():
        pool_path = join_path(volume_path, str(pool))
        if not any(pool in tree.pools for tree in trees.values()):
            raise ConfigError(pool_path, f'unknown pool "{pool}"')
        volumes[str(pool)] = _frozen(parse_resources(value, pool_path))
    return FairShareUpdateState(now, previous_time, volumes)


def parse_snapshot(document: Any, *, extra_keys: Iterable[str] = ()) -> Snapshot:
    """Validate a snapshot document; ``extra_keys`` are top-level keys the caller handles itself (ignored here)."""
    document = _map(document, "", "a snapshot map")
    _check_keys(document, (*SNAPSHOT_KEYS, *extra_keys), "")
    if document.get("cluster") is None:
        raise ConfigError("cluster", "required: total_resources or nodes of the cluster")
    cluster = parse_cluster(document["cluster"])
    trees = parse_pool_trees(document.get("pool_trees"))
    if not trees:
        raise ConfigError("pool_trees", "at least one pool tree is required")
    default_tree = resolve_default_tree(trees, document.get("default_pool_tree"))
    assert default_tree is not None
    totals, tree_nodes = _tree_resources(cluster, trees)
    raw_operations = document.get("operations") or []
    if not isinstance(raw_operations, list):
        raise ConfigError("operations", f"expected a list of operations, got {type(raw_operations).__name__}")
    ids = _operation_ids(raw_operations, "operations")
    operations = tuple(
        parse_operation(
            raw,
            join_path("operations", index),
            operation_id=ids[index],
            trees=trees,
            default_tree=default_tree,
        )
        for index, raw in enumerate(raw_operations)
    )
    update = None
    if document.get("fair_share_update") is not None:
        update = parse_fair_share_update(document["fair_share_update"], trees)
    default_tentative = document.get("default_tentative_pool_trees") or []
    if isinstance(default_tentative, str) or not isinstance(default_tentative, list):
        raise ConfigError("default_tentative_pool_trees", "expected a list of pool tree names")
    for index, name in enumerate(default_tentative):
        if not isinstance(name, str) or not name:
            raise ConfigError(f"default_tentative_pool_trees[{index}]", "expected a pool tree name")
    return Snapshot(
        cluster, default_tree, trees, operations, update, totals, tree_nodes, tuple(default_tentative)
    )


def load_snapshot(path: str | Path) -> Snapshot:
    """Read a snapshot file (.yaml/.yml, .json or .yson) and validate it."""
    return parse_snapshot(load_document(path))
