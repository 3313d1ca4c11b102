"""`TreeChecks`: the rules of `operation_checks.py` and `necessary_resources.py` applied to one tree's operations
(`SchedulerCore`'s part): what they found at registration, and the limiting-ancestor check each period."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pooltree.strategy.elements import OperationController
from pooltree.strategy.necessary_resources import necessary_resources_violation, tree_necessary_resources
from pooltree.strategy.operation_checks import (
    LimitingAncestorWatch,
    job_resource_bounds,
    job_resource_limits_violation,
    limiting_ancestor,
    limiting_ancestor_check_enabled,
    limiting_ancestor_error,
    specified_limits,
)
from pooltree.tree.delta import RuntimeTree


class TreeChecks:
    """The operations one tree fails by its checks. ``pool_tree``, ``controllers`` and ``registration_order`` are
    the `SchedulerCore`'s own (read, never replaced)."""

    def __init__(
        self,
        pool_tree: RuntimeTree,
        controllers: Mapping[str, OperationController],
        registration_order: Mapping[str, int],
    ) -> None:
        self.pool_tree = pool_tree
        self.controllers = controllers
        self.registration_order = registration_order
        self.failures: dict[str, dict[str, Any]] = {}
        """Operations this tree fails at the next period (found at registration)."""
        self.ancestors = LimitingAncestorWatch()
        self.job_bounds: tuple[Any, tuple[Any, Any]] | None = None
        """(tree config, its ``min/max_job_resource_limits``), read again when the config object changes."""
        self.limited: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        """(key, pools with specified ``resource_limits``) of `limited_pools`."""

    def fail(self, operation_id: str, error: dict[str, Any]) -> None:
        """Fail the operation at the next period with ``error``."""
        self.failures[operation_id] = error

    def forget(self, operation_id: str) -> None:
        self.failures.pop(operation_id, None)
        self.ancestors.forget(operation_id)

    def _bounds(self) -> tuple[Any, Any]:
        config = self.pool_tree.config
        if self.job_bounds is None or self.job_bounds[0] is not config:
            self.job_bounds = (
                config,
                job_resource_bounds(config, f"pool_trees.{self.pool_tree.name}.config"),
            )
        return self.job_bounds[1]

    def check_materialized(self, operation_id: str, controller: OperationController) -> None:
        """The tree's ``min_job_resource_limits`` / ``max_job_resource_limits`` against each task's per-job needs,
        then its ``necessary_resources_for_operation`` against the operation's minimum needed resources."""
        necessary = tree_necessary_resources(
            self.pool_tree.config, f"pool_trees.{self.pool_tree.name}.config"
        )
        if necessary:
            error = necessary_resources_violation(
                self.pool_tree.name, operation_id, necessary, controller.min_needed_resources
            )
            if error is not None:
                self.failures[operation_id] = error
                return
        bounds = self._bounds()
        if bounds[0] is None and bounds[1] is None:
            return
        tasks = controller.pending_task_resources()
        if tasks is None:
            return
        error = job_resource_limits_violation(self.pool_tree.name, operation_id, tasks, bounds)
        if error is not None:
            self.failures[operation_id] = error

    def limited_pools(self) -> dict[str, Any]:
        """Pools with specified ``resource_limits``, read again only when the pools themselves change (the
        tree's ``structure_revision``: created, removed, a config swap), not every period."""
        pool_tree = self.pool_tree
        key = (pool_tree, pool_tree.structure_revision, pool_tree.config)
        if self.limited is None or self.limited[0] != key:
            pools = pool_tree.pools.items()
            found = {name: limits for name, pool in pools if (limits := specified_limits(pool)) is not None}
            self.limited = (key, found)
        return self.limited[1]

    def due(self, now: float) -> list[tuple[str, dict[str, Any]]]:
        """Operations failed by the tree's checks at ``now``: job resource limits restrictions found at
        registration, then operations with a limiting ancestor past the safe timeout (registration order)."""
        failed = [(op, error) for op, error in self.failures.items() if op in self.controllers]
        self.failures.clear()
        limited = self.limited_pools()
        if not limited:
            self.ancestors.activated.clear()
            self.ancestors.first_found.clear()
            return failed
        done = {op for op, _ in failed}
        config = self.pool_tree.config
        order = self.registration_order
        for operation_id in sorted(self.controllers, key=lambda op: (order.get(op, 0), op)):
            op = self.pool_tree.operations.get(operation_id)
            if operation_id in done or op is None or not op.running:
                continue
            if not limiting_ancestor_check_enabled(config, op.spec):
                self.ancestors.forget(operation_id)
                continue
            controller = self.controllers[operation_id]
            needed = controller.min_needed_resources if controller.pending_allocation_count > 0 else None
            chain = []
            pool = op.pool
            while pool is not None:
                if pool.name in limited:
                    chain.append((pool.name, limited[pool.name]))
                pool = pool.parent
            found = limiting_ancestor(chain, needed) if needed is not None and chain else None
            if self.ancestors.observe(operation_id, found is not None, now) and found is not None:
                name, violated = found
                failed.append((operation_id, limiting_ancestor_error(name, violated, limited[name], needed)))
        return failed
