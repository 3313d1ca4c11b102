"""An element's strategy fields for the orchid in two steps: its plain values, taken where the state is
(``TreeScheduler.element_fields``: numbers, strings, enum members, copies and immutable settings; the live service
takes them under its scheduling lock) and the view made of them (``fields_view``), at any time later and without the
state: ``TreeScheduler.element_view`` does both at once, the read snapshot's capture the first under the lock and the
second off it (``pooltree/server/live/views.py``): what the capture would touch in a loaded heap for the view's
arithmetic (the local satisfaction) it takes as the tuples it is made of."""

from __future__ import annotations

from typing import Any, NamedTuple

from pooltree.resources import RESOURCES
from pooltree.strategy.elements import _Element
from pooltree.strategy.model import PreemptionPriority, SchedulingStatus, StarvationStatus
from pooltree.strategy.shares import local_satisfaction_ratio, share_floats
from pooltree.strategy.snapshot import EffectiveSettings


class OperationFields(NamedTuple):
    """What an operation element adds: its preemptible lists' counts, preemptions, deactivation reasons (a copy),
    priority, preemption mode and timeouts, and the policies' fields (segments, GPU planning, SSD: maps made for
    the view)."""

    non_preemptible: int
    aggressively_preemptible: int
    preemptible: int
    preempted: int
    deactivation_reasons: dict[str, int]
    priority: PreemptionPriority
    preemption_mode: str
    preemption_timeout: float
    graceful_preemption_timeout: float
    policies: tuple[dict[str, Any], ...]


class ElementFields(NamedTuple):
    """One element's strategy fields as plain values (``TreeScheduler.element_fields``)."""

    status: SchedulingStatus
    starvation: StarvationStatus
    below_fair_share_since: float | None
    starving_since: float | None
    lowest_starving_ancestor: str | None
    lowest_aggressively_starving_ancestor: str | None
    settings: EffectiveSettings
    """Frozen: a publish replaces an element's settings, never changes them."""
    usage: tuple[float, ...]
    total: tuple[float, ...]
    fair_share: tuple[float, ...]
    blocked: tuple[bool, ...]
    """The tree's resources, the element's fair share and blocked resources as of the publish (tuples a publish
    replaces): with ``usage``, its local satisfaction (``BestLeaf.local_satisfaction``), made by the view."""
    operation: OperationFields | None
    """None for a pool, and for an operation element without its runtime."""


def lowest_starving_ancestors(element: _Element) -> tuple[str | None, str | None]:
    """The element's lowest starving and lowest aggressively starving ancestor (itself included; None: none), in
    one walk up its tree."""
    lowest = None
    cursor: _Element | None = element
    while cursor is not None:
        starvation = cursor.starvation
        if starvation != StarvationStatus.NON_STARVING:
            if lowest is None:
                lowest = cursor.id
            if starvation == StarvationStatus.AGGRESSIVELY_STARVING:
                return lowest, cursor.id
        cursor = cursor.parent
    return lowest, None


def fields_view(fields: ElementFields) -> dict[str, Any]:
    """The orchid's strategy fields of an element (starvation, status, preemption counts, reasons) from its
    ``fields``; a new map each call."""
    settings = fields.settings
    view: dict[str, Any] = {
        "scheduling_status": fields.status.value,
        "starvation_status": fields.starvation.value,
        "below_fair_share_since": fields.below_fair_share_since,
        "starving_since": fields.starving_since,
        "lowest_starving_ancestor": fields.lowest_starving_ancestor,
        "lowest_aggressively_starving_ancestor": fields.lowest_aggressively_starving_ancestor,
        "local_satisfaction_ratio": local_satisfaction_ratio(
            share_floats(fields.usage, fields.total), fields.fair_share, fields.blocked
        ),
        "effective_fair_share_starvation_tolerance": settings.starvation_tolerance,
        "effective_fair_share_starvation_timeout": settings.starvation_timeout,
        "effective_aggressive_starvation_enabled": settings.aggressive_starvation_enabled,
        "effective_aggressive_preemption_allowed": settings.allow_aggressive_preemption,
        "resource_usage": dict(zip(RESOURCES, fields.usage, strict=True)),
    }
    operation = fields.operation
    if operation is not None:
        view.update(
            {
                "preemptible_allocation_count": operation.preemptible,
                "aggressively_preemptible_allocation_count": operation.aggressively_preemptible,
                "non_preemptible_allocation_count": operation.non_preemptible,
                "running_allocation_count": operation.non_preemptible
                + operation.aggressively_preemptible
                + operation.preemptible,
                "preempted_allocation_count": operation.preempted,
                "deactivation_reasons": dict(operation.deactivation_reasons),
                "preemption_priority": operation.priority.name.lower(),
                "preemption_mode": operation.preemption_mode,
                "allocation_preemption_timeout": operation.preemption_timeout,
                "allocation_graceful_preemption_timeout": operation.graceful_preemption_timeout,
            }
        )
        for policy in operation.policies:
            view.update(policy)
    return view
