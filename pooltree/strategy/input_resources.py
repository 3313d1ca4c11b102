"""`InputResources`: each operation's (usage, needed) for the fair-share input, and which of them may have moved
since the last input (`SchedulerCore`'s part; the period's ``PeriodDelta.resources``, `pooltree.tree.delta`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pooltree.resources import Vector
from pooltree.strategy.watch import unwatch_pending, watch_pending


class InputResources:
    """(usage, needed) of the operations of one tree for the fair-share input, and the operations whose answer may
    have moved since the last input (the period's ``PeriodDelta.resources``): only those are asked, and the input
    writes an answer into the operation's model element only when its values moved.

    ``controllers`` and ``strategy`` are the `SchedulerCore`'s own (read, never replaced)."""

    def __init__(self, controllers: Mapping[str, Any], strategy: Any) -> None:
        self.controllers = controllers
        self.strategy = strategy
        self.dirty: set[str] = set()
        """Operations whose (usage, needed) may have moved since the last fair-share input was built: the strategy
        adds those whose usage moves (``usage_watch``), the controllers those whose pending work moves
        (`watch_pending`), and the core those whose controller it attaches or detaches. The input re-reads only
        these (and ``polled``), not every running operation. The controllers and the strategy hold this very
        set: it is emptied, never replaced."""
        self.polled: set[str] = set()
        """Operations whose controllers cannot notify (no ``pending_watchers``): re-read for every input."""
        strategy.usage_watch = self.dirty

    def watch(self, operation_id: str, controller: Any) -> None:
        """From now on the controller tells the input when its pending work moves (or is polled, if it cannot)."""
        self.dirty.add(operation_id)
        if not watch_pending(controller, self.dirty, operation_id):
            self.polled.add(operation_id)

    def unwatch(self, operation_id: str, controller: Any) -> None:
        """The controller leaves: it no longer notifies, and the next input reads the operation anew."""
        unwatch_pending(controller, self.dirty, operation_id)
        self.polled.discard(operation_id)
        self.dirty.add(operation_id)

    def take_changed(self) -> set[str]:
        """The operations whose answer may have moved since the last call (notified or polled); the next call
        answers from here on."""
        dirty = self.dirty
        changed = dirty.union(self.polled) if self.polled else set(dirty)
        dirty.clear()
        return changed

    def resources(self, operation_id: str) -> tuple[Vector, Vector] | None:
        """(usage, needed) of one operation for the fair-share input (None: no controller)."""
        controller = self.controllers.get(operation_id)
        if controller is None:
            return None
        return self.strategy.operation_usage(operation_id), np.asarray(
            controller.needed_resources, dtype=float
        )
