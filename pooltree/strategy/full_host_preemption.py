"""The tree's ``default_gpu_full_host_preemption``: a last preemptive stage that clears a whole host for a full-host
GPU operation of the default segment that has waited too long.

YTsaurus (its classic policy, ``PreemptiveDefaultGpuFullHost``): with ``default_gpu_full_host_preemption: {enable:
true, timeout, max_preemption_penalty}``, an operation is a *default GPU full-host* operation when its spec names
no ``scheduling_segment`` other than ``default`` and its minimum needed allocation asked for exactly 8 GPUs when it
first did (a whole host). Such an operation that starves and has been below its fair share for longer than
``timeout`` has the preemption priority ``default_gpu_full_host`` instead of ``normal`` / ``aggressive``: the
usual preemptive stages (and the SSD ones) leave it out, and a stage of its own runs after ``preemptive_normal``:

- its victims are every allocation of the node, whatever its preemption status (minimum level
  ``ssd_non_preemptible``);
- the stage preempts nothing on a node whose only allocation is a non-preemptible (or aggressively preemptible)
  one of another default GPU full-host operation, nor on a node where the *progress penalty* exceeds
  ``max_preemption_penalty``: the sum over the node's allocations below the ``preemptible`` level of their
  running time × their GPUs (GPU-seconds of work that would be lost);
- a victim is protected only by its operation's graceful preemption mode or, with
  ``allow_preemption_from_starving_operations: false``, by its operation starving (YTsaurus's newest
  ``FindPreemptionBlockingAncestor``, which has no ancestor checks; the stage exists only there);
- victims get the abort reason ``default_gpu_full_host_preemption``.

pooltree measures an allocation's progress from its start (YTsaurus from its preemptible-progress start, reset when
a job reports progress); the durations' defaults are pooltree's (``config/full_host_preemption.py``).

This module is pure; :class:`FullHostPreemption` is the strategy's (``TreeScheduler.full_host``), configured by
``SchedulerCore`` and asked by ``preemption.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pooltree.config.full_host_preemption import DefaultGpuFullHostPreemptionConfig
from pooltree.resources import GPU
from pooltree.strategy.elements import StarvationState, _Element
from pooltree.strategy.model import (
    Allocation,
    ExecNode,
    PreemptionLevel,
    PreemptionPriority,
    PreemptionStatus,
    SchedulingStage,
)
from pooltree.strategy.snapshot import StrategyConfig
from pooltree.strategy.starving_victims import starvation_blocks
from pooltree.tree.delta import RuntimeTree

FULL_HOST_GPUS = 8
"""GPUs of a full-host allocation (YTsaurus's ``FullHostGpuAllocationGpuDemand``)."""

STAGE = (
    SchedulingStage.PREEMPTIVE_DEFAULT_GPU_FULL_HOST,
    PreemptionPriority.DEFAULT_GPU_FULL_HOST,
    PreemptionLevel.SSD_NON_PREEMPTIBLE,
)
_SOURCES = (PreemptionPriority.AGGRESSIVE, PreemptionPriority.NORMAL)


def _segment(spec: Any) -> Any:
    if spec is None:
        return None
    if isinstance(spec, Mapping):
        return spec.get("scheduling_segment")
    return getattr(spec, "scheduling_segment", None)


class FullHostPreemption:
    """The default GPU full-host operations of one tree and the stage's rules."""

    def __init__(self) -> None:
        self.config = DefaultGpuFullHostPreemptionConfig()
        self.operations: set[str] = set()
        """Default GPU full-host operations (decided when first seen, from their then min needed GPUs)."""
        self._seen: set[str] = set()

    @property
    def enabled(self) -> bool:
        return self.config.enable

    def configure(self, config: DefaultGpuFullHostPreemptionConfig) -> None:
        self.config = config

    def seen(self, operation_id: str) -> bool:
        return operation_id in self._seen

    def observe(self, operation_id: str, spec: Any, min_needed_gpu: float) -> None:
        """Classify an operation the first time it is seen (YTsaurus: its initial min needed resources)."""
        if operation_id in self._seen:
            return
        self._seen.add(operation_id)
        if _segment(spec) in (None, "default") and min_needed_gpu == FULL_HOST_GPUS:
            self.operations.add(operation_id)

    def forget(self, operation_id: str) -> None:
        self._seen.discard(operation_id)
        self.operations.discard(operation_id)

    def is_eligible(self, operation_id: str, starvation: Mapping[str, StarvationState], now: float) -> bool:
        """A default GPU full-host operation below its fair share for longer than ``timeout``."""
        if not self.config.enable or operation_id not in self.operations:
            return False
        state = starvation.get(operation_id)
        since = state.below_fair_share_since if state is not None else None
        return since is not None and since + self.config.timeout < now

    def stages(self, usual: tuple[Any, ...]) -> tuple[Any, ...]:
        return (*usual, STAGE) if self.config.enable else usual

    def sources(self, priority: PreemptionPriority) -> tuple[PreemptionPriority, ...]:
        """The operations' own priorities a stage target draws its candidates from."""
        return _SOURCES if priority == PreemptionPriority.DEFAULT_GPU_FULL_HOST else (priority,)

    def eligible(
        self,
        operation_id: str,
        target: PreemptionPriority,
        starvation: Mapping[str, StarvationState],
        now: float,
    ) -> bool:
        """Whether a starving operation is a candidate of ``target``: an eligible one only of this stage."""
        if not self.config.enable:
            return True
        return self.is_eligible(operation_id, starvation, now) == (
            target == PreemptionPriority.DEFAULT_GPU_FULL_HOST
        )

    def priority(
        self,
        operation_id: str,
        own: PreemptionPriority,
        starvation: Mapping[str, StarvationState],
        now: float,
    ) -> PreemptionPriority:
        if own != PreemptionPriority.NONE and self.is_eligible(operation_id, starvation, now):
            return PreemptionPriority.DEFAULT_GPU_FULL_HOST
        return own

    def may_preempt(
        self,
        node: ExecNode,
        now: float,
        elements: Mapping[str, _Element],
        level_of: Callable[[Allocation, _Element], PreemptionLevel],
    ) -> bool:
        """YTsaurus's ``CanUseDefaultGpuFullHostPreemption``: not when the node's only allocation is a protected one
        of another default GPU full-host operation, nor when the lost non-preemptible progress (running time ×
        GPUs of the allocations below the ``preemptible`` level) exceeds ``max_preemption_penalty``."""
        running = [
            (allocation, element)
            for allocation in node.allocations.values()
            if not allocation.preempted
            and (element := elements.get(allocation.operation_id)) is not None
            and element.op is not None
        ]
        if len(running) == 1:
            allocation, element = running[0]
            if element.id in self.operations and allocation.preemption_status != PreemptionStatus.PREEMPTIBLE:
                return False
        penalty = 0.0
        for allocation, element in running:
            if level_of(allocation, element) < PreemptionLevel.PREEMPTIBLE:
                penalty += max(0.0, now - allocation.start_time) * float(allocation.amounts[GPU])
        return penalty <= self.config.max_preemption_penalty


def full_host_blocker(config: StrategyConfig, element: _Element) -> _Element | None:
    """The stage's preemption-blocking element of a victim's operation: graceful mode, or its own starvation when
    the tree sets ``allow_preemption_from_starving_operations: false``."""
    if element.spec.preemption_mode == "graceful":
        return element
    if config.allow_preemption_from_starving_operations is False and starvation_blocks(
        config, element, element
    ):
        return element
    return None


def observe_operations(
    full_host: FullHostPreemption, pool_tree: RuntimeTree, controllers: Mapping[str, Any]
) -> None:
    """Classify the tree's operations not seen yet (at each fair-share update while the option is on)."""
    for operation_id, controller in controllers.items():
        if not full_host.seen(operation_id):
            op = pool_tree.operations.get(operation_id)
            full_host.observe(
                operation_id, op.spec if op is not None else None, float(controller.min_needed_resources[GPU])
            )
