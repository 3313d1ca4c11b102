"""Preemption in the capacity hand-over (`pooltree.forecast.tail`): starving operations take jobs back.

Where a run stopped, the core's last fair-share update says what each operation is entitled to (its fair share,
a fraction of the tree's resources) and its starvation clock says since when it has been below it. The
hand-over keeps those shares (it computes none of its own) and, at the moment an operation's starvation timeout
passes while it still holds less than ``tolerance`` × its fair share and has jobs to start, preempts the newest
jobs of the operations furthest above their own fair shares, one at a time, starting the starving operation's
jobs in the freed capacity until it reaches its fair share or no operation is above its own. A preempted job
goes back to its operation's pending jobs (it starts again later, from the beginning).

Not modelled: operations that arrive or are activated after the stop have no fair share here (they neither
preempt nor are preempted), shares do not change as operations finish, aggressive starvation and the
preemptible-job thresholds are not applied, nodes are not seen (only totals).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

EPSILON = 1e-9


@dataclass(frozen=True)
class Starving:
    """An operation the hand-over lets preempt once its starvation timeout passes (``at``)."""

    at: float
    operation_id: str
    tree: str


def dominant_share(usage: Sequence[float], total: Sequence[float]) -> float:
    """The largest share of the tree's ``total`` that ``usage`` takes of any resource."""
    found = 0.0
    for used, whole in zip(usage, total, strict=True):
        if whole > EPSILON and used > 0:
            found = max(found, used / whole)
    return found


def fair_shares(core: Any, operation_ids: Iterable[str]) -> dict[str, float]:
    """Operation id → its dominant fair share in the core's last fair-share update (absent: no update saw it)."""
    result = getattr(core, "last_result", None)
    elements = getattr(result, "elements", None)
    if elements is None:
        return {}
    found = {}
    for operation_id in operation_ids:
        element = elements.get(operation_id)
        if element is not None and element.is_operation:
            found[operation_id] = float(max(element.fair_share, default=0.0))
    return found


def starving(
    core: Any,
    tree: str,
    shares: dict[str, float],
    usage: dict[str, Sequence[float]],
    total: Sequence[float],
    now: float,
    horizon: float,
) -> list[Starving]:
    """The operations of ``tree`` below ``tolerance`` × their fair share at ``now``, with when their timeout
    passes (their starvation clock, or ``now`` when it has not started), within ``horizon``."""
    found = []
    for operation_id, share in shares.items():
        if share <= EPSILON:
            continue
        view = core.operation_view(operation_id)
        tolerance = float(view.get("effective_fair_share_starvation_tolerance") or 1.0)
        if dominant_share(usage.get(operation_id, ()) or [0.0] * len(total), total) >= tolerance * share:
            continue
        since = view.get("below_fair_share_since")
        timeout = float(view.get("effective_fair_share_starvation_timeout") or 0.0)
        at = max(now, (now if since is None else float(since)) + timeout)
        if math.isfinite(at) and at <= horizon:
            found.append(Starving(at, operation_id, tree))
    found.sort(key=lambda item: (item.at, item.operation_id))
    return found
