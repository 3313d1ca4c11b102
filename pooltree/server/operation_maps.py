"""An operation's attribute map as ``get_operation`` answers it (the parts that need no command state): the map
from its values (``attribute_map``), a stored operation's (``stored_attributes``), a live one's effective values in
a tree (``effective_values``), the spec without its secrets."""

from __future__ import annotations

from typing import Any

from pooltree.errors import PooltreeError
from pooltree.resources import resources_to_dict
from pooltree.server.live import LiveScheduler
from pooltree.server.operation_listing import Brief, brief_attributes, stored_brief
from pooltree.server.operation_times import iso_time
from pooltree.server.store import OperationRecord

SCHEDULING_INFO_KEYS = (
    "fair_share_ratio",
    "usage_ratio",
    "demand_ratio",
    "weight",
    "starvation_status",
    "scheduling_status",
    "satisfaction_ratio",
    "dominant_resource",
    "detailed_fair_share",
    "resource_usage",
    "resource_demand",
    "resource_limits",
    "effective_fair_share_starvation_tolerance",
    "effective_fair_share_starvation_timeout",
    "effective_aggressive_starvation_enabled",
    "effective_aggressive_preemption_allowed",
)
"""What ``progress/scheduling_info_per_pool_tree/<tree>`` shows of the operation's element, as YTsaurus names it."""


def without_secrets(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as answered to clients: ``secure_vault`` reaches only the job's environment (as in YTsaurus)."""
    if "secure_vault" not in spec:
        return spec
    return {key: value for key, value in spec.items() if key != "secure_vault"}


def error_result(error: dict[str, Any] | None, state: str) -> dict[str, Any]:
    if error is not None:
        return {"error": error}
    if state == "aborted":
        return {"error": {"code": 1, "message": "Operation aborted", "attributes": {}, "inner_errors": []}}
    return {"error": {"code": 0, "message": "", "attributes": {}, "inner_errors": []}}


def effective_values(scheduler: LiveScheduler, tree: str, operation_id: str) -> dict[str, Any]:
    """The operation element's effective values in ``tree`` (lock held): YTsaurus's
    ``scheduling_info_per_pool_tree`` fields beyond the shares (limits, demand, starvation settings)."""
    core = scheduler.cores.get(tree)
    if core is None:
        return {}
    out: dict[str, Any] = {}
    try:
        view = core.strategy.element_view(operation_id)
    except (PooltreeError, KeyError):
        view = {}
    for key in SCHEDULING_INFO_KEYS:
        if key in view:
            out[key] = view[key]
    result = core.last_result
    element = result.elements.get(operation_id) if result is not None else None
    if element is not None:
        for key in ("resource_limits", "resource_demand"):
            value = getattr(element, key, None)
            if value is not None:
                out[key] = resources_to_dict(value, drop_infinite=True)
        if getattr(element, "dominant_resource", None) is not None:
            out["dominant_resource"] = element.dominant_resource
        if getattr(element, "satisfaction_ratio", None) is not None:
            out["satisfaction_ratio"] = float(element.satisfaction_ratio)
    return out


def stored_attributes(record: OperationRecord) -> dict[str, Any]:
    doc = record.document
    return attribute_map(
        stored_brief(record),
        dict(doc.get("unrecognized_spec") or {}),
        doc.get("error"),
        list(doc.get("state_events") or []),
        {k: v for k, v in (doc.get("alerts") or {}).items() if k != "operation_pending"},
        list((record.spec.get("tasks") or {}).keys()) if isinstance(record.spec.get("tasks"), dict) else [],
        {},
    )


def attribute_map(
    brief: Brief,
    unrecognized: dict[str, Any],
    error: dict[str, Any] | None,
    events: list[dict[str, Any]],
    alerts: dict[str, Any],
    task_names: list[str],
    scheduling_info: dict[str, Any],
) -> dict[str, Any]:
    """An operation's attribute map as ``get_operation`` answers it: its brief (``brief_attributes``) and the rest."""
    attributes = brief_attributes(brief)
    spec = brief.spec
    annotations = spec.get("annotations") if isinstance(spec.get("annotations"), dict) else {}
    attributes["runtime_parameters"] = {
        "owners": [],
        "acl": [],
        "annotations": annotations,
        **brief.runtime_parameters,
    }
    attributes.update(
        {
            "spec": without_secrets(spec),
            "full_spec": without_secrets(spec),
            "provided_spec": without_secrets(spec),
            "unrecognized_spec": unrecognized,
            "progress": {
                "jobs": dict(brief.jobs),
                "build_time": iso_time(brief.build_time),
                "scheduling_info_per_pool_tree": scheduling_info,
            },
            "events": [{"state": e["state"], "time": iso_time(e["time"])} for e in events],
            "alerts": alerts,
            "task_names": task_names,
        }
    )
    if brief.state in ("completed", "failed", "aborted"):
        attributes["result"] = error_result(error, brief.state)
    return attributes
