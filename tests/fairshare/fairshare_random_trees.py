"""Deterministic random pool trees for the fair-share regression test (golden results in golden/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from pooltree.fairshare import (
    DetailedFairShare,
    FairShareResult,
    IntegralGuarantees,
    Operation,
    Pool,
    UpdateSettings,
    UpdateState,
    update_fair_share,
)
from pooltree.resources import vector

CASES = 32  # the last two are scaled-down copies of the benchmark tree
ELEMENT_FIELDS = [
    "id",
    "is_operation",
    "parent",
    "resource_usage",
    "resource_demand",
    "usage_share",
    "demand_share",
    "limits_share",
    "resource_limits",
    "strong_guarantee_share",
    "inferred_strong_guarantee_resources",
    "effective_strong_guarantee_resources",
    "estimated_guarantee_share",
    "proposed_integral_share",
    "fair_share",
    "detailed_fair_share",
    "limited_demand_share",
    "promised_guarantee_fair_share",
    "dominant_resource",
    "weight",
    "satisfaction_ratio",
    "local_satisfaction_ratio",
    "scheduling_status",
    "fifo_index",
    "burst_ratio",
    "resource_flow_ratio",
    "total_burst_ratio",
    "total_resource_flow_ratio",
    "accumulated_resource_volume",
    "integral_pool_capacity",
]
DETAILED_FIELDS = ("strong_guarantee", "integral_guarantee", "weight_proportional", "total")
TOTAL = vector(user_slots=200, cpu=100, gpu=8, memory=1000, network=100)


def _operation(rng: np.random.Generator, name: str) -> Operation:
    per_job = np.array(
        [1.0, rng.choice([0.5, 1.0, 4.0]), rng.choice([0.0, 0.0, 1.0]), rng.choice([5, 20, 60]), 0.0]
    )
    jobs = int(rng.integers(0, 40))
    running = int(rng.integers(0, jobs + 1))
    op = Operation(
        name,
        usage=per_job * running,
        demand=per_job * jobs,
        weight=[None, None, 1.0, 2.0, 0.0][int(rng.integers(5))],
        start_time=float(rng.integers(0, 50)),
        pending_allocation_count=jobs - running,
        schedulable=bool(rng.random() > 0.1),
        is_gang=bool(rng.random() < 0.15),
        apply_specified_resource_limits_to_demand=bool(rng.random() < 0.2),
        starvation_tolerance=float(rng.choice([0.8, 1.0, 0.5])),
    )
    if rng.random() < 0.2:
        op.specified_resource_limits = vector(
            user_slots=np.inf, cpu=float(rng.choice([2.0, 10.0])), gpu=np.inf, memory=np.inf, network=np.inf
        )
    if rng.random() < 0.1:
        op.max_share_ratio = 0.1
    return op


def _pool(
    rng: np.random.Generator, name: str, depth: int, integral_ok: bool, fanout: tuple[int, int] = (0, 5)
) -> Pool:
    fifo = depth <= 1 and rng.random() < 0.25
    pool = Pool(
        name,
        weight=[None, 0.5, 1.0, 3.0][int(rng.integers(4))],
        mode="fifo" if fifo else "fair_share",
        max_share_ratio=float(rng.choice([1.0, 1.0, 0.6])),
        starvation_tolerance=float(rng.choice([0.8, 0.9])),
        allow_gang_step_function=bool(rng.random() < 0.7),
    )
    if fifo:
        pool.fifo_sort_parameters = [
            ("weight", "start_time"),
            ("pending_allocation_count",),
            ("start_time",),
        ][int(rng.integers(3))]
    if rng.random() < 0.4:
        pool.strong_guarantee_resources = vector(cpu=float(rng.choice([5.0, 15.0, 30.0])))
        names = {"cpu"}
        if rng.random() < 0.3:
            pool.strong_guarantee_resources[3] = float(rng.choice([50.0, 200.0]))
            names.add("memory")
        pool.specified_guarantee_resources = frozenset(names)
    if rng.random() < 0.15:
        pool.specified_resource_limits = vector(
            user_slots=np.inf, cpu=float(rng.choice([10.0, 40.0])), gpu=np.inf, memory=np.inf, network=np.inf
        )
    if integral_ok and rng.random() < 0.25:
        kind = "burst" if rng.random() < 0.5 else "relaxed"
        pool.integral_guarantees = IntegralGuarantees(
            kind,
            burst_guarantee_resources=vector(cpu=float(rng.choice([5.0, 20.0])))
            if kind == "burst"
            else vector(),
            resource_flow=vector(cpu=float(rng.choice([1.0, 5.0]))),
            can_accept_free_volume=bool(rng.random() < 0.7),
        )
        pool.strong_guarantee_resources = vector()
        pool.specified_guarantee_resources = frozenset()
    elif rng.random() < 0.1:
        pool.integral_guarantees = IntegralGuarantees(should_distribute_free_volume_among_children=True)
    if rng.random() < 0.1:
        pool.compute_promised_guarantee_fair_share = True
    for k in range(int(rng.integers(*fanout))):
        child = f"{name}.{k}"
        if depth > 0 and not fifo and rng.random() < 0.5:
            pool.children.append(
                _pool(
                    rng, child, depth - 1, integral_ok and pool.integral_guarantees.guarantee_type == "none"
                )
            )
        else:
            pool.children.append(_operation(rng, child))
    return pool


def _bench_tree(pools: int, operations: int, seed: int) -> tuple[Pool, np.ndarray]:
    path = Path(__file__).resolve().parents[2] / "bench" / "fair_share.py"
    spec = importlib.util.spec_from_file_location("pooltree_bench_fair_share", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_tree(pools, operations, seed)


def case(seed: int) -> tuple[Pool, np.ndarray, UpdateSettings]:
    """Random tree, totals and settings of regression case ``seed``."""
    if seed >= 30:
        root, total = _bench_tree(60 + 40 * (seed - 30), 500, seed)
        return root, total, UpdateSettings(enable_step_function_for_gang_operations=True)
    return random_case(seed)


def random_case(seed: int) -> tuple[Pool, np.ndarray, UpdateSettings]:
    """A random tree (pools with every option, operations with gangs and limits), totals and settings."""
    rng = np.random.default_rng(1000 + seed)
    root = _pool(rng, "<Root>", 3, True, (3, 8))
    root.weight = None
    root.integral_guarantees = IntegralGuarantees()
    root.compute_promised_guarantee_fair_share = False
    root.mode = "fair_share"
    total = TOTAL * float(rng.choice([1.0, 0.5, 2.0]))
    if seed % 10 == 9:
        total = total.copy()
        total[2] = 0.0
    settings = UpdateSettings(
        infer_weight_from_guarantees_share_multiplier=[None, 1.0, 2.0][seed % 3],
        enable_step_function_for_gang_operations=seed % 2 == 0,
        fifo_pool_scheduling_order="fifo" if seed % 4 == 3 else "satisfaction",
    )
    return root, total, settings


def run_case(seed: int, *, random_only: bool = False) -> list[FairShareResult]:
    """Three consecutive updates (state carried, so integral volumes accumulate) of case ``seed``."""
    root, total, settings = random_case(seed) if random_only else case(seed)
    state = UpdateState()
    results = []
    for step in range(3):
        result = update_fair_share(root, total, settings, 100.0 * step, state)
        state = result.state
        results.append(result)
    return results


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [float(v) if np.isfinite(v) else str(float(v)) for v in value]
    if isinstance(value, DetailedFairShare):
        return {name: _plain(getattr(value, name)) for name in DETAILED_FIELDS}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float | np.floating):
        v = float(value)
        return v if np.isfinite(v) else str(v)
    if isinstance(value, np.integer | np.bool_):
        return value.item()
    return value


def snapshot(result: FairShareResult) -> dict[str, Any]:
    """JSON-able form of a result: every element field, the next state and the alert codes/attributes."""
    return {
        "elements": {
            eid: {name: _plain(getattr(r, name)) for name in ELEMENT_FIELDS}
            for eid, r in result.elements.items()
        },
        "state": {
            "previous_update_time": result.state.previous_update_time,
            "accumulated_resource_volume": _plain(result.state.accumulated_resource_volume),
            "last_integral_share_ratio": _plain(result.state.last_integral_share_ratio),
        },
        "errors": [
            {"message": str(e), "code": e.code, "attributes": _plain(e.attributes)} for e in result.errors
        ],
    }
