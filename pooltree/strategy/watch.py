"""Change notification of controllers' pending work (issue 16), instead of polling every operation each period.

A controller that keeps a ``pending_watchers`` list (`OperationControllerBase` does) adds ``key`` to each
``into`` set of its ``(into, key)`` pairs whenever its pending work (pending allocation count, needed and min
needed resources) is set anew, which is also when its ``pending_revision`` moves. ``SchedulerCore`` (for the
fair-share input) and ``TreeScheduler`` (for the publish's activity check) each keep such a set and visit only
the operations in it. A controller without the list (the `OperationController` protocol does not require it) may
change its pending work without telling anyone: its watchers put the operation among the ones they poll.
"""

from __future__ import annotations

from typing import Any


def watch_pending(controller: Any, into: set[str], key: str) -> bool:
    """Have ``controller`` add ``key`` to ``into`` whenever its pending work moves; ``False`` when it cannot
    (no ``pending_watchers`` list): the caller must then poll it."""
    watchers = getattr(controller, "pending_watchers", None)
    if type(watchers) is not list:
        return False
    watchers.append((into, key))
    return True


def unwatch_pending(controller: Any, into: set[str], key: str) -> None:
    """Undo `watch_pending` (the controller no longer holds ``into``)."""
    watchers = getattr(controller, "pending_watchers", None)
    if type(watchers) is list:
        watchers[:] = [entry for entry in watchers if entry[0] is not into or entry[1] != key]
