"""What the Scheduling page shows of the orchid's GPU plan and scheduling segments (pure functions of the orchid's
``gpu_assignment_plan`` and ``scheduling_segments`` maps)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def gpu_plan_summary(info: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The scheduling page's GPU plan (``policy_kind: gpu``) from the orchid's ``gpu_assignment_plan``: per module
    its nodes and full-host gangs, per node its planned and running assignments; None when the policy is off."""
    if not info or info.get("mode", "noop") == "noop":
        return None
    nodes = []
    for address, node in sorted((info.get("nodes") or {}).items()):
        assignments = node.get("assignments", [])
        nodes.append(
            {
                "address": address,
                "module": node.get("scheduling_module"),
                "assigned_gpu": node.get("assigned_resource_usage", {}).get("gpu", 0.0),
                "gpu": node.get("resource_limits", {}).get("gpu", 0.0),
                "running": sum(1 for a in assignments if a.get("allocation_id")),
                "planned": sum(1 for a in assignments if not a.get("allocation_id")),
                "preemptible": sum(1 for a in assignments if a.get("preemptible")),
                "operations": sorted({a["operation_id"] for a in assignments}),
                "to_preempt": len(node.get("allocations_to_preempt", [])),
            }
        )
    gangs = [
        {
            "id": op_id,
            "module": op.get("scheduling_module"),
            "waiting": op.get("waiting_for_assignments_since"),
        }
        for op_id, op in sorted((info.get("operations") or {}).items())
        if op.get("full_host_module_bound")
    ]
    return {
        "mode": info.get("mode"),
        "policy_kind": info.get("policy_kind"),
        "modules": info.get("modules", {}),
        "statistics": info.get("statistics", {}),
        "nodes": nodes,
        "gangs": gangs,
    }


def segments_summary(info: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The scheduling page's segments table from the orchid's ``scheduling_segments`` (None when they are off)."""
    if not info or info.get("mode", "disabled") == "disabled":
        return None
    fair = info.get("fair_resource_amount_per_segment", {})
    current = info.get("current_resource_amount_per_segment", {})
    capacity = info.get("total_capacity_per_module", {})
    remaining = info.get("remaining_capacity_per_module", {})
    nodes: dict[tuple[str, str | None], int] = {}
    for node in (info.get("nodes") or {}).values():
        segment = node.get("scheduling_segment")
        key = (segment, node.get("scheduling_segment_module") if segment != "default" else None)
        nodes[key] = nodes.get(key, 0) + 1
    unsatisfied = set(info.get("unsatisfied_segments", []))
    rows = []
    for segment in sorted(set(fair) | set(current)):
        if isinstance(fair.get(segment), Mapping) or isinstance(current.get(segment), Mapping):
            modules = sorted(set(fair.get(segment, {})) | set(current.get(segment, {})) - {"None"})
            for module in modules:
                rows.append(
                    {
                        "segment": segment,
                        "module": module,
                        "fair": fair.get(segment, {}).get(module, 0.0),
                        "current": current.get(segment, {}).get(module, 0.0),
                        "capacity": capacity.get(module),
                        "remaining": remaining.get(module),
                        "nodes": nodes.get((segment, module), 0),
                        "unsatisfied": f"{segment}@{module}" in unsatisfied,
                    }
                )
        else:
            rows.append(
                {
                    "segment": segment,
                    "module": None,
                    "fair": fair.get(segment, 0.0),
                    "current": current.get(segment, 0.0),
                    "capacity": None,
                    "remaining": None,
                    "nodes": nodes.get((segment, None), 0),
                    "unsatisfied": segment in unsatisfied,
                }
            )
    return {
        "mode": info.get("mode"),
        "module_type": info.get("module_type"),
        "scheduling_segment_modules": info.get("scheduling_segment_modules", []),
        "rows": rows,
        "balanced": info.get("balanced", True),
        "unsatisfied": sorted(unsatisfied),
        "imbalanced_since": info.get("imbalanced_since"),
        "moved": len(info.get("moved_nodes", [])),
        "errors": info.get("errors", []),
    }
