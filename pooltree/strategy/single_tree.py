"""The spec's ``schedule_in_single_tree``: an operation given several pool trees runs in one of them.

YTsaurus (``ChooseBestSingleTreeForOperation``, when the operation materializes; the scheduler's
``enable_schedule_in_single_tree``, true by default, gates it cluster-wide): among the operation's trees where it
is running (not pending behind a running-operation limit), a tree without resources is "empty"; for the others,
with the operation's pool's demand share and estimated guarantee share from the tree's last fair-share update (zero
when the pool is not there yet, e.g. an ephemeral pool), the reserve is

    reserve = estimated_guarantee_share - (pool demand share + operation's needed resources / tree total)

and its smallest component over the resources the tree has is the tree's score; the best score wins (the first
such tree in the spec's order on a tie). With the spec's ``consider_guarantees_for_single_tree`` a tree where the
pool's estimated guarantee share is (nearly) zero is not a candidate, and finding no candidate fails the operation
with "Found no best single non-empty tree for operation"; without it, no candidate means the first empty tree.
The other trees are erased: the operation leaves them (YTsaurus's ``runtime_parameters/erased_trees``).

pooltree makes the choice when the operation starts (its controller knows its needed resources then; YTsaurus
materializes right after), from the trees' last published updates, with a dry run of the registration telling
running from pending, so nothing is registered in a tree it then leaves. The live service and the simulator both
call :func:`choose_tree`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.errors import ConfigError, PooltreeError
from pooltree.resources import RESOURCE_COUNT, Vector
from pooltree.tree.pool_tree import PoolTree

NEAR_ZERO_SHARE = 1e-8
"""A share this small counts as zero (YTsaurus compares the estimated guarantee share with a small epsilon)."""

NO_SINGLE_TREE = "Found no best single non-empty tree for operation"


@dataclass(frozen=True)
class SingleTreeCandidate:
    """What the choice reads of one of the operation's trees."""

    tree: str
    running: bool
    total_resources: Vector
    pool_demand_share: Vector
    pool_estimated_guarantee_share: Vector


def _spec_flag(spec: Any, name: str) -> bool:
    """A boolean spec option (kept raw in the model's extras); ConfigError naming it when it is not a boolean."""
    if spec is None:
        return False
    if isinstance(spec, Mapping):
        value = spec.get(name)
    else:
        value = getattr(spec, name, None)
        if value is None:
            value = (getattr(spec, "model_extra", None) or {}).get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(f"spec.{name}", f"expected a boolean, got {value!r}")
    return value


def schedules_in_single_tree(spec: Any) -> bool:
    """The spec's ``schedule_in_single_tree`` (default false)."""
    return _spec_flag(spec, "schedule_in_single_tree")


def considers_guarantees(spec: Any) -> bool:
    """The spec's ``consider_guarantees_for_single_tree`` (default false)."""
    return _spec_flag(spec, "consider_guarantees_for_single_tree")


def reserve_ratio(candidate: SingleTreeCandidate, new_demand: Vector) -> float:
    """The tree's score: the smallest component of the reserve share over the resources the tree has."""
    total = np.asarray(candidate.total_resources, dtype=float)
    positive = total > 0
    new_share = np.zeros(RESOURCE_COUNT)
    np.divide(np.asarray(new_demand, dtype=float), total, out=new_share, where=positive)
    reserve = np.asarray(candidate.pool_estimated_guarantee_share, dtype=float) - (
        np.asarray(candidate.pool_demand_share, dtype=float) + new_share
    )
    return float(np.min(reserve[positive]))


def choose_single_tree(
    operation_id: str,
    candidates: Sequence[SingleTreeCandidate],
    new_demand: Vector,
    *,
    consider_guarantees: bool,
) -> str:
    """YTsaurus's choice of the one tree (see the module docstring); PooltreeError when there is none."""
    best: str | None = None
    best_ratio = -float("inf")
    empty: list[str] = []
    zero_guarantee: list[str] = []
    for candidate in candidates:
        if not candidate.running:
            continue
        if not np.any(np.asarray(candidate.total_resources, dtype=float) > 0):
            empty.append(candidate.tree)
            continue
        guarantee = np.asarray(candidate.pool_estimated_guarantee_share, dtype=float)
        if consider_guarantees and np.all(guarantee <= NEAR_ZERO_SHARE):
            zero_guarantee.append(candidate.tree)
            continue
        ratio = reserve_ratio(candidate, new_demand)
        if best is None or ratio > best_ratio:
            best, best_ratio = candidate.tree, ratio
    if best is not None:
        return best
    if consider_guarantees or not empty:
        raise PooltreeError(
            NO_SINGLE_TREE,
            attributes={
                "operation_id": operation_id,
                "empty_candidate_trees": empty,
                "zero_guarantee_candidate_trees": zero_guarantee,
            },
        )
    return empty[0]


def _would_run(pool_tree: PoolTree, placement: Any, operation_type: str) -> bool:
    """Whether a registration at ``placement`` would run at once (not wait behind a running-operation limit)."""
    pool = placement.pool
    if pool is None:  # a new ephemeral pool: its own count is zero, its ancestors decide
        parent = placement.parent
        return parent is None or pool_tree.lowest_violating_pool(parent) is None
    if operation_type == "vanilla" and pool.effective_lightweight_operations_enabled:
        return True
    return pool_tree.lowest_violating_pool(pool) is None


def candidate_of(
    core: Any, operation_id: str, *, user: str, pool: str | None, operation_type: str, is_gang: bool = False
) -> SingleTreeCandidate:
    """What ``choose_single_tree`` reads of one tree's ``SchedulerCore``: a dry run of the registration (its
    admission errors raise as they would at registration) and the pool's shares in the last published update."""
    pool_tree = core.pool_tree
    placement = pool_tree.prepare_registration(operation_id, user=user, pool=pool, is_gang=is_gang)
    demand = np.zeros(RESOURCE_COUNT)
    guarantee = np.zeros(RESOURCE_COUNT)
    result = core.last_result
    elements = getattr(result, "elements", None)
    if elements is not None and placement.pool_name in elements:
        share = elements[placement.pool_name]
        demand = np.asarray(share.demand_share, dtype=float)
        guarantee = np.asarray(share.estimated_guarantee_share, dtype=float)
    return SingleTreeCandidate(
        pool_tree.name,
        _would_run(pool_tree, placement, operation_type),
        np.asarray(core.total_resources, dtype=float),
        demand,
        guarantee,
    )


def choose_tree(
    cores: Mapping[str, Any],
    trees: Sequence[str],
    operation_id: str,
    spec: Any,
    *,
    user: str,
    operation_type: str,
    new_demand: Vector,
    pool_of: Mapping[str, str | None],
) -> str:
    """The tree an operation with ``schedule_in_single_tree`` runs in, out of ``trees`` (each a key of ``cores``;
    ``pool_of`` names the operation's pool per tree, None for the default)."""
    is_gang = _spec_flag(spec, "is_gang")
    candidates = [
        candidate_of(
            cores[tree],
            operation_id,
            user=user,
            pool=pool_of.get(tree),
            operation_type=operation_type,
            is_gang=is_gang,
        )
        for tree in trees
    ]
    return choose_single_tree(
        operation_id, candidates, new_demand, consider_guarantees=considers_guarantees(spec)
    )


def restrict_to_single_tree(
    registry: Any,
    cores: Mapping[str, Any],
    operation_id: str,
    spec: Any,
    *,
    user: str,
    operation_type: str,
    new_demand: Vector,
) -> tuple[Any, list[str]]:
    """For the live service: the spec to register (``pool_trees`` cut to the chosen tree) and the erased trees;
    the spec itself and no erased tree when ``schedule_in_single_tree`` is off or there is one tree. ``registry``
    is the service's ``PoolTrees`` (it resolves the spec's trees and per-tree pools)."""
    if not schedules_in_single_tree(spec):
        return spec, []
    registrations = registry.registrations_for(spec, user)
    if len(registrations) < 2:
        return spec, []
    trees = [registration.tree for registration in registrations]
    chosen = choose_tree(
        cores,
        trees,
        operation_id,
        spec,
        user=user,
        operation_type=operation_type,
        new_demand=new_demand,
        pool_of={registration.tree: registration.pool for registration in registrations},
    )
    if isinstance(spec, Mapping):
        restricted: Any = {**spec, "pool_trees": [chosen]}
    else:
        restricted = spec.model_copy(update={"pool_trees": (chosen,)})
    return restricted, [tree for tree in trees if tree != chosen]
