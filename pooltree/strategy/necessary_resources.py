"""The tree's ``necessary_resources_for_operation``: resources every operation of the tree must ask for.

YTsaurus (``CheckOperationNecessaryResourceDemand``, run for each of the operation's trees when it materializes):
an operation whose aggregated initial minimum needed resources (the componentwise minimum over its tasks' per-job
resources when it starts) are zero in a resource the tree lists fails with "Operation has zero demand for resources
which are necessary in tree ..." (attribute ``necessary_resources_with_zero_demand``). A GPU tree that lists
``gpu`` thus refuses CPU-only operations instead of letting them hold its nodes' CPUs. pooltree applies it where
the tree's ``min/max_job_resource_limits`` are checked (`TreeChecks.check_materialized`, `strategy/tree_checks.py`), so the operation
fails through the same path (`SchedulerCore.enforce_time_limits`) in the simulator and the live service.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pooltree.config.tree import parse_necessary_resources
from pooltree.errors import join_path
from pooltree.resources import RESOURCES, Vector

OPTION = "necessary_resources_for_operation"


def tree_necessary_resources(tree_config: Any, path: str = "config") -> tuple[str, ...]:
    """The tree config's ``necessary_resources_for_operation`` (kept raw in the model's extras)."""
    raw = (
        tree_config.get(OPTION)
        if isinstance(tree_config, Mapping)
        else (getattr(tree_config, "model_extra", None) or {}).get(OPTION)
    )
    return parse_necessary_resources(raw, join_path(path, OPTION))


def necessary_resources_violation(
    tree_name: str, operation_id: str, necessary: tuple[str, ...], min_needed: Vector
) -> dict[str, Any] | None:
    """YTsaurus's error when the operation's minimum needed resources are zero in a necessary resource."""
    zero = [name for name in necessary if float(min_needed[RESOURCES.index(name)]) == 0.0]
    if not zero:
        return None
    return {
        "code": 1,
        "message": f"Operation has zero demand for resources which are necessary in tree {tree_name!r}",
        "attributes": {"operation_id": operation_id, "necessary_resources_with_zero_demand": zero},
    }
