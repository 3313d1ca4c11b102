"""Change notification of controllers' pending work (issue 16), instead of polling every operation each period.

A controller that keeps a ``pending_watchers`` list (`OperationControllerBase` does) adds ``key`` to each
``into`` set of its ``(into, key)`` pairs whenever its pending work (pending allocation count, needed and min
needed resources) is set anew, which is also when its ``pending_revision`` moves. ``TreeScheduler`` registers the
pending work of its change log (`change_log.py`), which the publish's checks, the core's fair-share input and its
default segment's view each read from where they last read. A controller whose list is ``None`` (the
`OperationController` protocol's member allows it) may change its pending work without telling anyone: the log
holds the operation among the polled ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pooltree.strategy.elements import OperationController


def watch_pending(controller: OperationController, into: set[str], key: str) -> bool:
    """Have ``controller`` add ``key`` to ``into`` whenever its pending work moves; ``False`` when it cannot
    (its ``pending_watchers`` is ``None``): the caller must then poll it."""
    watchers = controller.pending_watchers
    if watchers is None:
        return False
    watchers.append((into, key))
    return True


def unwatch_pending(controller: OperationController, into: set[str], key: str) -> None:
    """Undo `watch_pending` (the controller no longer holds ``into``)."""
    watchers = controller.pending_watchers
    if watchers is not None:
        watchers[:] = [entry for entry in watchers if entry[0] is not into or entry[1] != key]
