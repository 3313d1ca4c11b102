"""Properties over random small scenarios: skipping is exact, runs are deterministic, accounting is consistent."""

from __future__ import annotations

import filecmp
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.sim.simkit import events, run

POOLS = ["gold", "silver", "bronze"]

operation = st.fixed_dictionaries(
    {
        "pool": st.sampled_from(POOLS),
        "vanilla": st.booleans(),
        "graceful": st.booleans(),
        "interruptible": st.booleans(),
        "jobs": st.integers(1, 12),
        "cpu": st.sampled_from([1, 2, 3]),
        "submit": st.integers(0, 120),
        "duration": st.integers(20, 200),
        "memory": st.sampled_from([None, "400Mi", "900Mi"]),
    }
)


def document(ops: list[dict[str, Any]], failure: int | None, seed: int) -> dict[str, Any]:
    operations = []
    for index, op in enumerate(ops):
        task: dict[str, Any] = {
            "job_count": op["jobs"],
            "resources": {"cpu": op["cpu"], "memory": "1Gi", "user_slots": 1},
            "interruptible": op["interruptible"],
        }
        if op["memory"] is not None:
            task.update(
                memory_limit="1Gi",
                memory_usage={"distribution": "lognormal", "median": op["memory"], "sigma": 0.3},
            )
        entry: dict[str, Any] = {
            "id": f"op{index}",
            "submit_time": op["submit"],
            "spec": {"pool": op["pool"]},
            "tasks": [task],
        }
        if op["vanilla"]:
            entry.update(type="vanilla", lifetime=f"{op['duration'] * 2}s")
            entry["spec"]["preemption_mode"] = "graceful" if op["graceful"] else "normal"
        else:
            task["duration"] = {"distribution": "lognormal", "median": f"{op['duration']}s", "sigma": 0.4}
        operations.append(entry)
    return {
        "seed": seed,
        "until": "4m",
        "scheduler": {
            "fair_share_update_period": "2s",
            "node_heartbeat_jitter": "300ms",
            "interruption_delay": "2s",
        },
        "cluster": {
            "nodes": [
                {"address": "n", "count": 3, "resource_limits": {"cpu": 6, "memory": "6Gi", "user_slots": 6}}
            ]
        },
        "pool_trees": {
            "physical": {
                "config": {
                    "fair_share_starvation_timeout": "10s",
                    "allocation_graceful_preemption_timeout": "30s",
                },
                "pools": {
                    "gold": {"strong_guarantee_resources": {"cpu": 9}},
                    "silver": {"weight": 3},
                    "bronze": {"weight": 1, "max_running_operation_count": 1},
                },
            }
        },
        "node_failures": [] if failure is None else [{"address": "n-1", "at": failure, "duration": "40s"}],
        "operations": operations,
    }


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    ops=st.lists(operation, min_size=1, max_size=4),
    failure=st.one_of(st.none(), st.integers(10, 200)),
    seed=st.integers(0, 10_000),
)
def test_skipping_is_exact_and_accounting_consistent(ops, failure, seed):
    doc = document(ops, failure, seed)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        fast = run(doc, base / "fast")
        naive = run(doc, base / "naive", skip_idle_heartbeats=False, skip_unchanged_fair_share_updates=False)
        for name in ("events.jsonl", "timeline.csv", "operations.csv"):
            assert filecmp.cmp(base / "fast" / name, base / "naive" / name, shallow=False), name
        log = events(base / "fast")
    for summary in (fast, naive):
        summary.pop("engine")
        summary["global"].pop("wall_time")
    assert fast == naive
    started = {e["allocation_id"]: e for e in log if e["event"] == "allocation_started"}
    ended = [
        e for e in log if e["event"] in ("allocation_finished", "allocation_aborted", "allocation_failed")
    ]
    assert len({e["allocation_id"] for e in ended}) == len(ended)
    assert all(
        e["allocation_id"] in started and e["time"] >= started[e["allocation_id"]]["time"] for e in ended
    )
    for op in fast["operations"]:
        assert op["completed_job_count"] >= 0
        if op["state"] == "completed" and op["type"] == "map":
            assert op["completed_job_count"] >= op["job_count"]
    # node capacity: after each instant (a heartbeat starts with preemption first, then preempts its victims),
    # the accounted usage of running, non-preempted allocations never exceeds a node's 6 cpu
    usage: dict[str, float] = {}
    live: dict[str, tuple[str, float]] = {}
    for index, e in enumerate(log):
        if e["event"] == "allocation_started":
            live[e["allocation_id"]] = (e["node"], e["resources"]["cpu"])
            usage[e["node"]] = usage.get(e["node"], 0.0) + e["resources"]["cpu"]
        elif e["event"] in (
            "allocation_preempted",
            "allocation_finished",
            "allocation_aborted",
            "allocation_failed",
        ):
            held = live.pop(e["allocation_id"], None)
            if held is not None:
                usage[held[0]] -= held[1]
        if index + 1 == len(log) or log[index + 1]["time"] != e["time"]:
            assert all(value <= 6 + 1e-9 for value in usage.values()), (e["time"], usage)
