"""`InputResources`: each operation's (usage, needed) for the fair-share input, and which of them may have moved
since the last input (`SchedulerCore`'s part; the period's ``PeriodDelta.resources``, `pooltree.tree.delta`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pooltree.resources import Vector
from pooltree.strategy.watch import unwatch_pending, watch_pending


class InputResources:
    """(usage, needed) of the operations of one tree, the same tuple object while both are unchanged (the input
    then skips rewriting the operation's model element), and the operations whose answer may have moved.

    ``controllers`` and ``strategy`` are the `SchedulerCore`'s own (read, never replaced)."""

    def __init__(self, controllers: Mapping[str, Any], strategy: Any) -> None:
        self.controllers = controllers
        self.strategy = strategy
        self.cache: dict[str, tuple[Any, int, Any, Any, tuple[Vector, Vector]]] = {}
        """Operation id → (runtime, its ``usage_serial``, the controller's ``pending_revision`` or, for a
        controller without one, its needed resources as floats, the controller, the (usage, needed) handed to
        the fair-share input) of the last input build."""
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

    def forget(self, operation_id: str) -> None:
        """Drop the operation's cached answer (it holds the controller and the runtime)."""
        self.cache.pop(operation_id, None)

    def take_changed(self) -> set[str]:
        """The operations whose answer may have moved since the last call (notified or polled); the next call
        answers from here on."""
        dirty = self.dirty
        changed = dirty.union(self.polled) if self.polled else set(dirty)
        dirty.clear()
        return changed

    def resources(self, operation_id: str) -> tuple[Vector, Vector] | None:
        """(usage, needed) of one operation for the fair-share input: the same tuple object as last time while
        both are unchanged.

        Usage is unchanged while the runtime's ``usage_serial`` is (the strategy moves it with every change);
        needed resources while the controller's ``pending_revision`` is (`OperationControllerBase` moves it
        whenever its pending work is set anew). A controller without a revision may change its pending work
        without the strategy hearing of it: its needed resources are read every time and compared as floats.
        """
        cached = self.cache.get(operation_id)
        if cached is not None:
            runtime, serial, revision, controller, found = cached
            if (
                (runtime is None or runtime.usage_serial == serial)
                and self.controllers.get(operation_id) is controller
                and self.strategy.operations.get(operation_id) is runtime
            ):
                if type(revision) is int:
                    if controller.pending_revision == revision:
                        return found
                else:
                    needed = controller.needed_resources
                    values = (
                        needed.tolist()
                        if type(needed) is np.ndarray
                        else np.asarray(needed, dtype=float).tolist()
                    )
                    if values == revision:
                        return found
        controller = self.controllers.get(operation_id)
        if controller is None:
            return None
        runtime = self.strategy.operations.get(operation_id)
        revision = getattr(controller, "pending_revision", None)
        needed = controller.needed_resources
        if type(revision) is not int:
            revision = (
                needed.tolist() if type(needed) is np.ndarray else np.asarray(needed, dtype=float).tolist()
            )
        serial = -1 if runtime is None else runtime.usage_serial
        found = (self.strategy.operation_usage(operation_id), np.asarray(needed, dtype=float))
        self.cache[operation_id] = (runtime, serial, revision, controller, found)
        return found
