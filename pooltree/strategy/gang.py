"""Gang operations' incarnation switch: every running job restarts in its own allocation (YTsaurus's rule).

YTsaurus splits a gang operation's all-or-nothing behaviour in two. The scheduler's strategy reads spec
``is_gang`` (the step fair-share function, FIFO truncation, ``allow_aggressive_preemption_for_gang_operations``,
where gang operations may run; ``pooltree/fairshare`` and ``build.py``) and schedules and preempts a gang's
allocations one by one like any other: it neither waits until all of them fit nor preempts them together. The
controller agent's gang controller (a vanilla operation with a task that sets ``gang_options``) does the rest:
when a job with a gang rank fails, is aborted (preempted, lost with its node, over its time limit) or is
interrupted, the operation switches to a new incarnation: every running job is aborted with reason
``operation_incarnation_changed`` and a new job of the new incarnation starts in the same allocation
(``RestartAllRunningJobsPreservingAllocations``); completed jobs run again. The allocations keep their
resources, so no other operation can take them in between.

pooltree's controller decides the switch (``VanillaController.take_incarnation_switch``) when it hears of the
lost job, as YTsaurus's does; :meth:`GangRestarts.switch_incarnation` then restarts the jobs. An allocation is
one job here, so a restart replaces the allocation object: the old one is stopped at once (timeout 0, in the
node's answer) and a new one with the new job takes its place in the operation's start order and on the same
node, with its usage accounted without a gap.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pooltree.resources import RESOURCES
from pooltree.strategy.best_leaf import BestLeaf
from pooltree.strategy.elements import OperationRuntime
from pooltree.strategy.model import (
    AbortReason,
    Allocation,
    ExecNode,
    HeartbeatResult,
    PreemptionRecord,
    SchedulingStage,
)
from pooltree.strategy.shares import add_floats as _add_list
from pooltree.strategy.state import StrategyState

INCARNATION_SWITCH_STAGE = "incarnation_switch"
"""``stage`` of the ``allocation_started`` event of a job restarted in its allocation."""


class GangRestarts:
    """The incarnation switch of gang operations; see the module docstring."""

    def __init__(self, state: StrategyState, heaps: BestLeaf) -> None:
        self.state = state
        self.heaps = heaps

    def switch_incarnation(
        self,
        runtime: OperationRuntime,
        trigger: Allocation,
        now: float,
        result: HeartbeatResult | None = None,
    ) -> None:
        """Restart every running job of the operation in its allocation (the controller switched incarnation).

        Answers go into ``result`` for the heartbeat's own node and are queued for the other nodes' next
        heartbeats. Allocations already being stopped, and those on nodes that left, are not restarted.
        """
        controller = runtime.controller
        restart = controller.restart_job
        explanation = (
            f"Operation {runtime.id} switched to a new incarnation: its gang job {trigger.id} "
            f"{'was ' + trigger.preemption.reason.value if trigger.preemption is not None else 'ended'}; "
            "every running job restarts in its allocation"
        )
        state = self.state
        element = state.elements.get(runtime.id)
        for old in list(runtime.lists):
            node = state.nodes.get(old.node_address)
            if node is None or old.preempted:
                continue
            target = (
                result
                if result is not None and result.address == node.address
                else state.queued_for(node.address)
            )
            self._stop(old, target, explanation, now)
            new = restart(old, now)
            # the new job does not fit the allocation: it waits as pending, the allocation ends
            if new is None:
                node.usage -= old.resources
                state.release(old, runtime, element)
                continue
            self._start_in_place(runtime, element, node, old, new, target, now)
        if element is not None and element.op is runtime:
            self.heaps.refresh_leaf(element)

    def _stop(self, old: Allocation, target: HeartbeatResult, explanation: str, now: float) -> None:
        """The old job is stopped at once (``operation_incarnation_changed``, timeout 0), in ``target``'s answer."""
        record = PreemptionRecord(
            allocation_id=old.id,
            operation_id=old.operation_id,
            node_address=old.node_address,
            reason=AbortReason.OPERATION_INCARNATION_CHANGED,
            timeout=0.0,
            explanation=explanation,
            stage=SchedulingStage.PREEMPTIVE_NORMAL,
            time=now,
            interruption_signal=old.interruption_signal,
            interruptible=False,
            allocation_status=old.preemption_status,
        )
        old.preemption = record
        old.restarted = True
        target.allocations_to_preempt.append(record)
        self.state.emit({"event": "allocation_preempted", **record.to_dict()})

    def _start_in_place(
        self,
        runtime: OperationRuntime,
        element: Any,
        node: ExecNode,
        old: Allocation,
        new: Allocation,
        target: HeartbeatResult,
        now: float,
    ) -> None:
        """The new incarnation's job takes the old one's place: on its node, in the operation's start order, with
        its usage accounted without a gap."""
        state = self.state
        new.node_address = node.address
        if new.interruption_signal is None and element is not None:
            new.interruption_signal = element.spec.interruption_signal
        delta = new.resources - old.resources
        node.usage += delta
        node.allocations[new.id] = new
        state.allocations[new.id] = new
        runtime.lists_settled = False
        runtime.lists.replace(old, new)
        if np.any(delta != 0):
            state.account(runtime, element, delta.tolist(), _add_list)
        target.allocations_to_start.append(new)
        state.emit(
            {
                "event": "allocation_started",
                "time": now,
                "allocation_id": new.id,
                "operation_id": new.operation_id,
                "node": node.address,
                "stage": INCARNATION_SWITCH_STAGE,
                "resources": {name: float(new.resources[i]) for i, name in enumerate(RESOURCES)},
            }
        )
