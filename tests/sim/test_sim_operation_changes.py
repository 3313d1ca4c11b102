"""A busy simulation whose periods mostly change operations (arrivals, completions, activations from full pools)
under unchanged pools: the incremental input, build and publish give byte-identical outputs to a run that builds
the input, the scheduling tree and every published element from scratch each period."""

from __future__ import annotations

import filecmp
import random
from typing import Any

from tests.sim.simkit import job, run


def churn_document() -> dict[str, Any]:
    rng = random.Random(5)
    pools: dict[str, Any] = {}
    leaves = []
    for team in range(3):
        children = {}
        for index in range(3):
            name = f"t{team}-p{index}"
            leaves.append(name)
            children[name] = {"weight": 1 + index, "max_running_operation_count": 2}
            if index == 2:
                children[name]["mode"] = "fifo"
        pools[f"team{team}"] = {"pools": children, "max_running_operation_count": 5}
        if team == 0:
            pools["team0"]["strong_guarantee_resources"] = {"cpu": 12}
    operations = []
    for index in range(45):
        operations.append(
            {
                "id": f"op{index:02d}",
                "submit_time": f"{rng.uniform(0, 500):.1f}s",
                "spec": {"pool": rng.choice(leaves)},
                "tasks": [
                    {
                        "job_count": rng.randint(2, 12),
                        "resources": job(rng.choice([1, 2]), "1Gi"),
                        "duration": {
                            "distribution": "lognormal",
                            "median": f"{rng.randint(20, 90)}s",
                            "sigma": 0.4,
                        },
                    }
                ],
            }
        )
    return {
        "seed": 4,
        "until": "12m",
        "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
        "cluster": {
            "nodes": [
                {"address": "n", "count": 4, "resource_limits": {"user_slots": 8, "cpu": 8, "memory": "32Gi"}}
            ]
        },
        "pool_trees": {"physical": {"config": {"fair_share_starvation_timeout": "15s"}, "pools": pools}},
        "operations": operations,
    }


def test_operation_changes_give_the_outputs_of_fresh_builds(monkeypatch, tmp_path):
    import pooltree.strategy.update_steps as steps
    from pooltree.strategy.snapshot import SchedulingTree
    from pooltree.tree.projection import TreeProjection

    derived: list[int] = []
    original = SchedulingTree.with_operation_changes

    def counted(self: SchedulingTree, *args: Any) -> SchedulingTree:
        derived.append(1)
        return original(self, *args)

    monkeypatch.setattr(SchedulingTree, "with_operation_changes", counted)
    document = churn_document()
    cached = run(document, tmp_path / "cached")
    assert len(derived) >= 40  # the incremental path ran in most periods that changed operations
    read = steps.read_input
    build_tree = steps.build_scheduling_tree
    monkeypatch.setattr(  # every input read on a projection of its own, without the previous rows: a fresh read
        steps,
        "read_input",
        lambda pool_tree, resources, *, nodes, projection, previous, delta: read(
            pool_tree, resources, nodes=nodes, projection=TreeProjection(), previous=None, delta=delta
        ),
    )
    monkeypatch.setattr(  # every build on a projection of its own, without the previous rows: a fresh build
        steps,
        "build_scheduling_tree",
        lambda pool_tree, result, total, config, projection, previous, delta: build_tree(
            pool_tree, result, total, config, TreeProjection(), None, delta
        ),
    )
    derived.clear()
    fresh = run(document, tmp_path / "fresh")
    assert not derived
    for name in ("events.jsonl", "timeline.csv", "operations.csv"):
        assert filecmp.cmp(tmp_path / "cached" / name, tmp_path / "fresh" / name, shallow=False), name
    for summary in (cached, fresh):
        summary.pop("engine")
        summary["global"].pop("wall_time")
    assert cached == fresh
    assert cached["global"]["completed_operation_count"] >= 20
