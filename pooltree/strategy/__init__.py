"""Scheduling strategy: starvation, preemptible allocation lists and node heartbeat stages (yt-semantics §c–§e)."""

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
