"""Scheduling strategy: starvation, preemptible allocation lists and node heartbeat stages (yt-semantics §c–§e).

- `TreeScheduler` (scheduler.py): the pure per-tree strategy driven by `publish(SchedulingTree, now)` and
  `process_heartbeat(NodeHeartbeat, now)`.
- `SchedulingTree` / `ElementSpec` / `StrategyConfig` (snapshot.py): its input; `scheduling_tree_from_runtime`
  (build.py) makes one from the pool tree runtime and a fair-share result.
- `SchedulerCore` (core.py): the facade the simulator and live service drive (import from pooltree.strategy.core).
"""

from pooltree.strategy.model import (
    AbortReason,
    Allocation,
    DeactivationReason,
    ExecNode,
    FinishedAllocation,
    HeartbeatResult,
    NodeHeartbeat,
    PreemptionLevel,
    PreemptionPriority,
    PreemptionRecord,
    PreemptionStatus,
    SchedulingStage,
    SchedulingStatus,
    StarvationStatus,
)
from pooltree.strategy.preemptible import PreemptibleLists
from pooltree.strategy.scheduler import OperationController, TreeScheduler
from pooltree.strategy.snapshot import ROOT_ID, ElementSpec, SchedulingTree, StrategyConfig

__all__ = [
    "ROOT_ID",
    "AbortReason",
    "Allocation",
    "DeactivationReason",
    "ElementSpec",
    "ExecNode",
    "FinishedAllocation",
    "HeartbeatResult",
    "NodeHeartbeat",
    "OperationController",
    "PreemptibleLists",
    "PreemptionLevel",
    "PreemptionPriority",
    "PreemptionRecord",
    "PreemptionStatus",
    "SchedulingStage",
    "SchedulingStatus",
    "SchedulingTree",
    "StarvationStatus",
    "StrategyConfig",
    "TreeScheduler",
]
