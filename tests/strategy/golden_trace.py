"""A seeded, feature-rich heartbeat scenario whose full event sequence is compared to a recorded golden file.

The trace was recorded before the hot path was optimised; any change in which allocations start, which are
preempted, in what order, with which reasons, texts and timeouts, or in the orchid fields shows up as a diff.
Run ``POOLTREE_RECORD_GOLDEN=1 .venv/bin/python -m pytest tests/strategy/test_golden_trace.py`` to re-record
(only when a behaviour change is intended, and say so in the commit).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from pooltree.controllers.operations import MapController, TaskSpec, VanillaController
from pooltree.resources import vector
from pooltree.strategy import (
    ROOT_ID,
    ElementSpec,
    FinishedAllocation,
    NodeHeartbeat,
    SchedulingTree,
    StrategyConfig,
    TreeScheduler,
)

GiB = 1024.0**3


def _ssd(tags: frozenset[str]) -> bool:
    return "ssd" in tags


class GoldenScenario:
    """Nodes with tags, nested/FIFO/limited pools, map and vanilla (graceful) operations, random fair shares."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        rng = self.rng
        self.config = StrategyConfig(
            fair_share_starvation_timeout=3.0,
            fair_share_aggressive_starvation_timeout=6.0,
            preemptive_scheduling_backoff=1.0,
            allocation_preemption_timeout=2.0,
            allocation_graceful_preemption_timeout=4.0,
            max_unpreemptible_running_allocation_count=None,
        )
        self.events: list[dict[str, Any]] = []
        self.node_limits: dict[str, np.ndarray] = {}
        self.node_tags: dict[str, frozenset[str]] = {}
        for index in range(12):
            cpu = rng.choice([8.0, 16.0])
            address = f"n{index:02d}"
            self.node_limits[address] = vector(user_slots=cpu, cpu=cpu, memory=cpu * 4 * GiB, network=100)
            self.node_tags[address] = frozenset({"ssd"}) if index % 3 == 0 else frozenset()
        self.total = sum(self.node_limits.values(), start=np.zeros(5))
        self.pools: list[ElementSpec] = [
            ElementSpec(id="prod", parent=ROOT_ID, enable_aggressive_starvation=True),
            ElementSpec(id="prod-a", parent="prod"),
            ElementSpec(id="prod-b", parent="prod", allow_aggressive_preemption=False),
            ElementSpec(id="fifo", parent=ROOT_ID, fifo=True),
            ElementSpec(
                id="limited",
                parent=ROOT_ID,
                specified_resource_limits=np.array([np.inf, 20.0, np.inf, np.inf, np.inf]),
            ),
            ElementSpec(
                id="guarded",
                parent=ROOT_ID,
                allow_normal_preemption=False,
                non_preemptible_resource_usage_threshold=np.array([3.0, np.inf, np.inf, np.inf, np.inf]),
            ),
            ElementSpec(id="research", parent=ROOT_ID, fair_share_starvation_tolerance=1.0),
        ]
        self.limited_cpu = 20.0
        self.shares: dict[str, np.ndarray] = {}
        self.ops: dict[str, dict[str, Any]] = {}
        self.controllers: dict[str, Any] = {}
        self.scheduler = TreeScheduler(self._tree({}), event_sink=self.events.append)
        self.pending_finish: dict[str, list[FinishedAllocation]] = {}
        self.usage_bumps: dict[str, dict[str, np.ndarray]] = {}
        self.serial = 0

    def add_operation(self, now: float) -> None:
        rng = self.rng
        self.serial += 1
        op_id = f"op{self.serial:03d}"
        pool = rng.choice([p.id for p in self.pools if p.id not in ("prod",)])
        cpu = rng.choice([1.0, 1.0, 2.0, 3.0, 4.0])
        jobs = rng.randint(3, 40)
        vanilla = rng.random() < 0.25
        interruptible = rng.random() < 0.4
        task = TaskSpec(
            "main", jobs, vector(user_slots=1, cpu=cpu, memory=cpu * 2 * GiB), interruptible=interruptible
        )
        signal = "SIGINT" if rng.random() < 0.2 else None
        cls = VanillaController if vanilla else MapController
        controller = cls(op_id, [task], interruption_signal=signal)
        options: dict[str, Any] = {"pool": pool, "start_time": now, "fifo_index": self.serial}
        if vanilla and rng.random() < 0.5:
            options["preemption_mode"] = "graceful"
        if rng.random() < 0.15:
            options["scheduling_tag_filter"] = _ssd
        if rng.random() < 0.1:
            options["specified_resource_limits"] = np.array([np.inf, 6.0, np.inf, np.inf, np.inf])
        self.ops[op_id] = options
        self.controllers[op_id] = controller
        self.scheduler.register_operation(op_id, controller)

    def _fair_shares(self) -> dict[str, np.ndarray]:
        """Random positive weights over operations with demand; pools sum their children."""
        rng = self.rng
        live = [op_id for op_id in self.ops if not self.controllers[op_id].is_completed]
        weights = {op_id: rng.choice([0.0, 0.5, 1.0, 2.0, 4.0]) for op_id in live}
        norm = sum(weights.values()) or 1.0
        shares: dict[str, np.ndarray] = {}
        for op_id, weight in weights.items():
            fraction = weight / norm
            shares[op_id] = np.array([fraction, fraction, 0.0, fraction, 0.0])
        for op_id in live:
            parent = self.ops[op_id]["pool"]
            while parent != ROOT_ID:
                shares[parent] = shares.get(parent, np.zeros(5)) + shares[op_id]
                parent = next(p.parent for p in self.pools if p.id == parent)
        return shares

    def _tree(self, shares: dict[str, np.ndarray]) -> SchedulingTree:
        elements = [
            ElementSpec(**{**pool.__dict__, "fair_share": shares.get(pool.id, np.zeros(5))})
            for pool in self.pools
        ]
        elements[4].specified_resource_limits = np.array([np.inf, self.limited_cpu, np.inf, np.inf, np.inf])
        for op_id, options in self.ops.items():
            elements.append(
                ElementSpec(
                    id=op_id,
                    parent=options["pool"],
                    kind="operation",
                    fair_share=shares.get(op_id, np.zeros(5)),
                    **{k: v for k, v in options.items() if k != "pool"},
                )
            )
        return SchedulingTree(self.total, elements, self.config)

    def heartbeat(self, address: str, now: float) -> dict[str, Any]:
        rng = self.rng
        node = self.scheduler.nodes.get(address)
        finished = self.pending_finish.pop(address, [])
        done = {f.allocation_id for f in finished}
        running: dict[str, np.ndarray] | None = None
        if node is not None:
            for allocation in sorted(node.allocations.values(), key=lambda a: a.id):
                if allocation.id in done or allocation.preempted:
                    continue
                roll = rng.random()
                if roll < 0.08:
                    finished.append(FinishedAllocation(allocation.id, "completed"))
                elif roll < 0.1:
                    finished.append(FinishedAllocation(allocation.id, "failed"))
            if rng.random() < 0.2:
                running = {}
                for allocation in node.allocations.values():
                    if allocation.id in {f.allocation_id for f in finished}:
                        continue
                    usage = allocation.resources.copy()
                    if not allocation.preempted and rng.random() < 0.3:
                        usage[1] = max(0.5, usage[1] - 0.5)
                    running[allocation.id] = usage
        limits = self.node_limits[address]
        if rng.random() < 0.03:
            limits = limits * 0.5  # the node shrank for this heartbeat: overcommit
        result = self.scheduler.process_heartbeat(
            NodeHeartbeat(address, limits, self.node_tags[address], running=running, finished=finished),
            now,
        )
        for record in result.allocations_to_preempt:
            if record.interruptible:
                self.pending_finish.setdefault(address, []).append(
                    FinishedAllocation(record.allocation_id, "completed", processed_fraction=0.25)
                )
            else:
                self.pending_finish.setdefault(address, []).append(
                    FinishedAllocation(record.allocation_id, "aborted")
                )
        return {
            "heartbeat": address,
            "time": now,
            "start": [a.id for a in result.allocations_to_start],
            "preempt": [r.to_dict() for r in result.allocations_to_preempt],
            "preemptive": result.preemptive_scheduling_performed,
            "with_preemption": result.scheduled_with_preemption,
            "attempts": result.schedule_attempts,
        }

    def run_step(self, step: int) -> list[dict[str, Any]]:
        """One time unit: maybe new operations and fair shares, a publish, heartbeats of a random node subset."""
        rng = self.rng
        trace: list[dict[str, Any]] = []
        now = float(step)
        if step % 4 == 0 or rng.random() < 0.1:
            for _ in range(rng.randint(0, 3)):
                self.add_operation(now)
            self.shares = self._fair_shares()
            self.limited_cpu = rng.choice([8.0, 20.0, 30.0])
        self.scheduler.publish(self._tree(self.shares), now)
        addresses = list(self.node_limits)
        rng.shuffle(addresses)
        for address in addresses[: rng.randint(6, 12)]:
            trace.append(self.heartbeat(address, now + rng.random() * 0.5))
        trace.extend(self.events)
        self.events.clear()
        if step % 10 == 9:
            trace.append({"views": {op_id: self.scheduler.element_view(op_id) for op_id in self.ops}})
        return trace

    def run(self, steps: int) -> list[dict[str, Any]]:
        trace: list[dict[str, Any]] = []
        for step in range(steps):
            trace.extend(self.run_step(step))
        return trace


def golden_trace(seed: int, steps: int) -> list[dict[str, Any]]:
    return GoldenScenario(seed).run(steps)


def _load_bench() -> Any:
    """bench/scheduling.py as a module (the benchmark's own scenario builder, without an event sink)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "scheduling.py"
    spec = importlib.util.spec_from_file_location("pooltree_bench_scheduling", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_shaped_trace(nodes: int, operations: int, pools: int, starving_pools: int) -> list[dict[str, Any]]:
    """The benchmark's fill and steady-state phases at a small scale, every heartbeat's decisions recorded."""
    bench = _load_bench()
    trace: list[dict[str, Any]] = []
    for phase in bench.phases(nodes, operations, pools, starving_pools):
        for result in phase:
            trace.append(
                {
                    "heartbeat": result.address,
                    "start": [
                        [a.id, a.node_address, a.resources.tolist()] for a in result.allocations_to_start
                    ],
                    "preempt": [r.to_dict() for r in result.allocations_to_preempt],
                    "with_preemption": result.scheduled_with_preemption,
                    "attempts": result.schedule_attempts,
                }
            )
    return trace
