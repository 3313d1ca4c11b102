"""A small in-memory cluster with a fake clock for strategy scenario tests.

Fair shares are given by the test (phase by phase, as the seeds' examples state them); the kit builds the
`SchedulingTree`, publishes it, sends node heartbeats and plays the node side: a preempted allocation is
reported finished at the node's next heartbeat (interruptible map jobs complete with half their input done).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pooltree.config import OperationSpec
from pooltree.controllers.operations import (
    MapController,
    OperationControllerBase,
    TaskSpec,
    VanillaController,
)
from pooltree.resources import vector
from pooltree.strategy import (
    ROOT_ID,
    ElementSpec,
    FinishedAllocation,
    HeartbeatResult,
    NodeHeartbeat,
    SchedulingTree,
    StrategyConfig,
    TreeScheduler,
)

GiB = 1024.0**3


def register_vanilla(
    core: Any,
    op_id: str,
    pool: str,
    tasks: list[TaskSpec],
    *,
    now: float = 0.0,
    spec: dict[str, Any] | None = None,
) -> None:
    """Register a vanilla operation of ``tasks`` in ``pool`` with a ``SchedulerCore`` (``spec``: more options)."""
    core.register_operation(
        op_id,
        VanillaController(op_id, tasks),
        user="u",
        operation_type="vanilla",
        pool=pool,
        spec=OperationSpec.parse({"pool": pool, **(spec or {})}, "spec"),
        now=now,
    )


def cpu_share(cpu: float, total_cpu: float = 100.0) -> np.ndarray:
    """A share vector where cpu and user_slots move together (1 slot per cpu), memory proportional."""
    share = cpu / total_cpu
    return np.array([share, share, 0.0, share, 0.0])


@dataclass
class Kit:
    node_count: int = 10
    node_cpu: float = 10.0
    config: StrategyConfig = field(default_factory=StrategyConfig)
    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    fair_share: dict[str, np.ndarray] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.node_limits = vector(user_slots=self.node_cpu, cpu=self.node_cpu, memory=self.node_cpu * GiB)
        self.total = self.node_limits * self.node_count
        self.scheduler = TreeScheduler(self._tree(), event_sink=self.events.append)
        self.pending_finish: dict[str, list[FinishedAllocation]] = {}
        for index in range(self.node_count):
            self.scheduler.add_node(self.address(index), self.node_limits)

    @staticmethod
    def address(index: int) -> str:
        return f"node-{index:02d}"

    def pool(self, name: str, parent: str = ROOT_ID, **options: Any) -> None:
        self.pools[name] = {"parent": parent, **options}

    def operation(
        self,
        op_id: str,
        pool: str,
        *,
        jobs: int,
        cpu: float = 1.0,
        kind: str = "map",
        interruptible: bool = False,
        gang_size: int | None = None,
        **options: Any,
    ) -> OperationControllerBase:
        task = TaskSpec(
            "main",
            jobs,
            vector(user_slots=1, cpu=cpu, memory=cpu * GiB),
            interruptible=interruptible,
            gang_size=gang_size,
        )
        cls = VanillaController if kind == "vanilla" else MapController
        controller = cls(op_id, [task], interruption_signal=options.get("interruption_signal"))
        self.ops[op_id] = {"pool": pool, "controller": controller, **options}
        self.scheduler.register_operation(op_id, controller)
        return controller

    def _tree(self) -> SchedulingTree:
        elements = []
        for name, options in self.pools.items():
            options = dict(options)
            parent = options.pop("parent")
            elements.append(
                ElementSpec(
                    id=name, parent=parent, fair_share=self.fair_share.get(name, np.zeros(5)), **options
                )
            )
        for op_id, options in self.ops.items():
            options = dict(options)
            pool = options.pop("pool")
            options.pop("controller")
            elements.append(
                ElementSpec(
                    id=op_id,
                    parent=pool,
                    kind="operation",
                    fair_share=self.fair_share.get(op_id, np.zeros(5)),
                    **options,
                )
            )
        return SchedulingTree(self.total, elements, self.config)

    def publish(self, now: float) -> None:
        self.scheduler.publish(self._tree(), now)

    def set_fair_share(self, cpu_by_element: dict[str, float]) -> None:
        """Fair shares in cpu units (converted to share vectors of the cluster)."""
        for name, cpu in cpu_by_element.items():
            self.fair_share[name] = cpu_share(cpu, float(self.total[1]))

    def heartbeat(self, index: int, now: float, *, limits: np.ndarray | None = None) -> HeartbeatResult:
        address = self.address(index)
        finished = self.pending_finish.pop(address, [])
        result = self.scheduler.process_heartbeat(
            NodeHeartbeat(address, self.node_limits if limits is None else limits, finished=finished), now
        )
        for record in result.allocations_to_preempt:
            if record.interruptible:
                done = FinishedAllocation(record.allocation_id, "completed", processed_fraction=0.5)
            else:
                done = FinishedAllocation(record.allocation_id, "aborted")
            self.pending_finish.setdefault(address, []).append(done)
        return result

    def round(self, now: float) -> list[HeartbeatResult]:
        """Publish the fair share at ``now`` and send one heartbeat from every node."""
        self.publish(now)
        return [self.heartbeat(index, now) for index in range(self.node_count)]

    def usage_cpu(self, element_id: str) -> float:
        return float(self.scheduler.element_usage(element_id)[1])

    def running_count(self, op_id: str) -> int:
        return len(self.scheduler.operations[op_id].lists)
