"""`InputResources`: each operation's (usage, needed) for the fair-share input, and which of them may have moved
since the last input: the strategy's change log (`change_log.py`) read as `FAIR_SHARE_INPUT` (`SchedulerCore`'s
part; the period's ``PeriodDelta.resources``, `pooltree.tree.delta`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pooltree.resources import Vector
from pooltree.strategy.change_log import FAIR_SHARE_INPUT, PENDING_WORK, USAGE, ChangeLog


class InputResources:
    """(usage, needed) of the operations of one tree for the fair-share input, and the operations whose answer may
    have moved since the last input (the period's ``PeriodDelta.resources``): only those are asked, and the input
    writes an answer into the operation's model element only when its values moved.

    ``controllers`` and ``strategy`` are the `SchedulerCore`'s own (read, never replaced). What moved is the
    strategy's change log, both kinds: usage (the strategy writes it, registrations included) and pending work
    (the controllers write it; the core when it attaches another controller)."""

    def __init__(self, controllers: Mapping[str, Any], strategy: Any) -> None:
        self.controllers = controllers
        self.strategy = strategy
        self.log: ChangeLog = strategy.state.changes
        self.log.follow(FAIR_SHARE_INPUT, (USAGE, PENDING_WORK))

    def attached(self, operation_id: str) -> None:
        """The core holds another controller of the operation: the next input reads it anew."""
        self.log.pending.add(operation_id)

    def changed(self) -> tuple[set[str], int]:
        """The operations whose answer may have moved since the last input took them in (notified or polled),
        and the generation to hand `taken` once the input has read them (an input that fails does not: the next
        one reads them again)."""
        return self.log.read(FAIR_SHARE_INPUT)

    def taken(self, generation: int) -> None:
        """The input read the operations `changed` answered with ``generation``."""
        self.log.commit(FAIR_SHARE_INPUT, generation)

    def resources(self, operation_id: str) -> tuple[Vector, Vector] | None:
        """(usage, needed) of one operation for the fair-share input (None: no controller)."""
        controller = self.controllers.get(operation_id)
        if controller is None:
            return None
        return self.strategy.operation_usage(operation_id), np.asarray(
            controller.needed_resources, dtype=float
        )
