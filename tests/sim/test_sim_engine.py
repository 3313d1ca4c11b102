"""Engine behaviour: determinism, exact heartbeat/update skipping, job kinds, interruption, memory, node failures."""

from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Any

import pytest

from tests.sim.simkit import events, job, run


def mixed_document(**overrides: Any) -> dict[str, Any]:
    """Small but busy: guarantees, a graceful vanilla clique, interruptible maps, memory overdrafts, a node failure."""
    document: dict[str, Any] = {
        "seed": 11,
        "until": "30m",
        "scheduler": {"node_heartbeat_jitter": "200ms", "interruption_delay": "3s"},
        "cluster": {
            "nodes": [
                {"address": "n", "count": 4, "resource_limits": {"user_slots": 8, "cpu": 8, "memory": "16Gi"}}
            ]
        },
        "pool_trees": {
            "physical": {
                "config": {
                    "fair_share_starvation_timeout": "20s",
                    "allocation_graceful_preemption_timeout": "2m",
                },
                "pools": {
                    "prod": {"strong_guarantee_resources": {"cpu": 16}},
                    "chyt": {"strong_guarantee_resources": {"cpu": 8}},
                    "adhoc": {"weight": 2, "mode": "fifo"},
                },
            }
        },
        "node_failures": [{"address": "n-1", "at": "400s", "duration": "3m"}],
        "operations": [
            {
                "id": "fill",
                "submit_time": 0,
                "spec": {"pool": "adhoc"},
                "tasks": [
                    {
                        "job_count": 100,
                        "resources": job(1, "1Gi"),
                        "duration": {"distribution": "lognormal", "median": "3m", "sigma": 0.5},
                    }
                ],
            },
            {
                "id": "clique",
                "type": "vanilla",
                "submit_time": "30s",
                "lifetime": "20m",
                "spec": {"pool": "chyt", "preemption_mode": "graceful", "interruption_signal": "SIGINT"},
                "tasks": [
                    {"name": "instances", "job_count": 4, "resources": job(4, "4Gi"), "interruptible": True}
                ],
            },
            {
                "id": "prod-1",
                "submit_time": "120s",
                "spec": {"pool": "prod"},
                "tasks": [
                    {
                        "job_count": 60,
                        "resources": job(1, "1Gi"),
                        "duration": {"distribution": "uniform", "min": "1m", "max": "4m"},
                        "interruptible": True,
                        "memory_limit": "1Gi",
                        "memory_usage": {"distribution": "lognormal", "median": "700Mi", "sigma": 0.25},
                    }
                ],
            },
            {
                "id": "late",
                "submit_time": "12m",
                "spec": {"pool": "adhoc"},
                "tasks": [{"job_count": 20, "resources": job(2, "2Gi"), "duration": "2m"}],
            },
        ],
    }
    document.update(overrides)
    return document


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("mixed")
    return run(mixed_document(), out), out


def _comparable(summary: dict) -> dict:
    summary = dict(summary)
    summary.pop("engine")
    summary["global"] = {k: v for k, v in summary["global"].items() if k != "wall_time"}
    return summary


def test_same_seed_gives_identical_outputs(mixed, tmp_path):
    summary, out = mixed
    again = run(mixed_document(), tmp_path)
    assert filecmp.cmp(out / "events.jsonl", tmp_path / "events.jsonl", shallow=False)
    assert filecmp.cmp(out / "timeline.csv", tmp_path / "timeline.csv", shallow=False)
    assert filecmp.cmp(out / "operations.csv", tmp_path / "operations.csv", shallow=False)
    assert _comparable(summary) == _comparable(again)
    assert summary["global"]["wall_time"] >= 0


def test_another_seed_changes_the_run(mixed, tmp_path):
    summary, _ = mixed
    other = run(mixed_document(seed=12, until="30m"), tmp_path)
    assert _comparable(other) != _comparable(summary)


def crowded_document(until: str = "30m") -> dict[str, Any]:
    """Every job peaks above its reserve: nodes run out of memory and abort jobs with resource_overdraft."""
    return mixed_document(
        operations=[
            {
                "id": "hungry",
                "submit_time": 0,
                "spec": {"pool": "prod"},
                "tasks": [
                    {
                        "job_count": 80,
                        "resources": {"cpu": 0.5, "user_slots": 1},
                        "duration": "2m",
                        "memory_limit": "3Gi",
                        "memory_usage": {"distribution": "uniform", "min": "2500Mi", "max": "2900Mi"},
                    }
                ],
            },
            {
                "id": "other",
                "submit_time": "90s",
                "spec": {"pool": "adhoc"},
                "tasks": [{"job_count": 30, "resources": job(1, "1Gi"), "duration": "1m"}],
            },
        ],
        node_failures=[{"address": "n-2", "at": "150s", "duration": "1m"}],
        until=until,
    )


@pytest.mark.parametrize(
    "make", [lambda: mixed_document(until="10m"), lambda: crowded_document("6m")], ids=["mixed", "crowded"]
)
def test_skipping_heartbeats_and_updates_is_exact(make, tmp_path):
    document = make()
    skipping = run(document, tmp_path / "skip")
    naive = run(
        document, tmp_path / "naive", skip_idle_heartbeats=False, skip_unchanged_fair_share_updates=False
    )
    assert skipping["engine"]["heartbeats_skipped"] > 0
    assert skipping["engine"]["fair_share_updates_skipped"] > 0
    assert naive["engine"]["heartbeats_skipped"] == 0
    assert naive["engine"]["fair_share_updates_skipped"] == 0
    assert skipping["engine"]["heartbeats_processed"] < naive["engine"]["heartbeats_processed"]
    for name in ("events.jsonl", "timeline.csv", "operations.csv"):
        assert filecmp.cmp(tmp_path / "skip" / name, tmp_path / "naive" / name, shallow=False), name
    assert _comparable(skipping) == _comparable(naive)
    assert skipping["global"]["preempted_allocation_count"] > 0


def test_map_jobs_run_to_completion(mixed):
    summary, out = mixed
    ops = {o["id"]: o for o in summary["operations"]}
    for op_id in ("fill", "prod-1", "late"):
        assert ops[op_id]["state"] == "completed"
        assert ops[op_id]["finish_time"] > ops[op_id]["start_time"] >= ops[op_id]["submit_time"]
    assert ops["late"]["completed_job_count"] == 20
    finished = [e for e in events(out) if e["event"] == "allocation_finished" and e["operation_id"] == "late"]
    assert len(finished) == 20 and all(e["state"] == "completed" for e in finished)


def test_vanilla_clique_lives_until_completed_and_honours_graceful_preemption(mixed):
    summary, out = mixed
    clique = next(o for o in summary["operations"] if o["id"] == "clique")
    assert clique["state"] == "completed"
    assert clique["finish_time"] == pytest.approx(clique["start_time"] + 20 * 60)
    log = events(out)
    graceful = [
        e for e in log if e["event"] == "allocation_preempted" and e["reason"] == "graceful_preemption"
    ]
    assert graceful, "the clique runs above its fair share once prod arrives"
    ends = {e["allocation_id"]: e for e in log if e["event"] in ("allocation_finished", "allocation_aborted")}
    for record in graceful:
        end = ends[record["allocation_id"]]
        # interruptible instances exit within the timeout (the scenario's 3 s interruption delay), as completed
        assert end["time"] - record["time"] <= record["timeout"]
        assert end["time"] - record["time"] == pytest.approx(3.0)
        assert end["state"] == "completed"
    assert clique["interrupted_job_count"] == len(graceful)


def test_memory_usage_drives_the_digest_and_overdraft_aborts(mixed, tmp_path):
    summary, _out = mixed
    prod = next(o for o in summary["operations"] if o["id"] == "prod-1")
    # the default reserve is half the 1 GiB limit; peaks around 700 MiB exceed it, so the digest learns a higher factor
    assert prod["user_job_memory_reserve_factor"] > 0.6
    assert prod["job_proxy_memory_reserve_factor"] is not None
    # a node whose jobs all peak above their reserves runs out of memory: overdraft aborts, re-queued jobs complete
    result = run(crowded_document(), tmp_path)
    hungry = next(o for o in result["operations"] if o["id"] == "hungry")
    assert hungry["resource_overdraft_count"] > 0
    assert hungry["aborted_job_count_by_reason"]["resource_overdraft"] == hungry["resource_overdraft_count"]
    assert hungry["state"] == "completed" and hungry["completed_job_count"] == 80
    assert hungry["user_job_memory_reserve_factor"] > 0.8
    assert result["global"]["wasted_job_time"] > 0
    assert any(e["event"] == "job_resource_overdraft" for e in events(tmp_path))


def test_node_failure_aborts_and_requeues(mixed):
    summary, out = mixed
    log = events(out)
    failed = [e for e in log if e["event"] == "node_failed"]
    restored = [e for e in log if e["event"] == "node_restored"]
    assert [e["time"] for e in failed] == [400.0] and [e["time"] for e in restored] == [580.0]
    lost = [
        e for e in log if e["event"] == "allocation_aborted" and e["node"] == "n-1" and e["time"] == 400.0
    ]
    assert lost
    started_on_dead = [
        e for e in log if e["event"] == "allocation_started" and e["node"] == "n-1" and 400 <= e["time"] < 580
    ]
    assert not started_on_dead
    reasons = sum((o["aborted_job_count_by_reason"].get("node_offline", 0) for o in summary["operations"]), 0)
    assert reasons == len(lost)


def test_interrupted_map_jobs_hand_back_their_rest(tmp_path):
    document = mixed_document(node_failures=[])
    document["operations"] = [
        {
            "id": "long",
            "submit_time": 0,
            "spec": {"pool": "adhoc"},
            "tasks": [
                {"job_count": 32, "resources": job(1, "1Gi"), "duration": "20m", "interruptible": True}
            ],
        },
        {
            "id": "urgent",
            "submit_time": "60s",
            "spec": {"pool": "prod"},
            "tasks": [{"job_count": 16, "resources": job(1, "1Gi"), "duration": "1m"}],
        },
    ]
    summary = run(document, tmp_path)
    ops = {o["id"]: o for o in summary["operations"]}
    assert ops["urgent"]["state"] == "completed"
    assert ops["long"]["interrupted_job_count"] > 0
    # interrupted jobs complete (not aborted): nothing is wasted, the rest of their input runs later
    assert ops["long"]["aborted_job_count_by_reason"] == {}
    assert summary["global"]["wasted_job_time"] == 0
    preempted = [e for e in events(tmp_path) if e["event"] == "allocation_preempted"]
    assert preempted and all(e["preemptor_operation_id"] == "urgent" for e in preempted)


def test_reusing_inputs_and_published_elements_is_exact(monkeypatch, tmp_path):
    """The per-period caches (the fair-share input objects, the scheduling tree's structure and the strategy's
    elements kept across publishes) give byte-identical outputs to building everything anew each period."""
    document = mixed_document(until="10m")
    cached = run(document, tmp_path / "cached")
    import pooltree.strategy.snapshot as snapshot
    import pooltree.strategy.update_steps as steps
    from pooltree.tree.projection import TreeProjection

    def fresh_tree(self, total, elements):
        return snapshot.SchedulingTree(total, elements, self.config, name=self.name)

    read = steps.read_input
    monkeypatch.setattr(snapshot.SchedulingTree, "with_shares", fresh_tree)
    monkeypatch.setattr(  # every input read on a projection of its own, without the previous rows
        steps,
        "read_input",
        lambda pool_tree, resources, *, nodes, projection, previous, delta: read(
            pool_tree, resources, nodes=nodes, projection=TreeProjection(), previous=None, delta=delta
        ),
    )
    fresh = run(document, tmp_path / "fresh")
    for name in ("events.jsonl", "timeline.csv", "operations.csv"):
        assert filecmp.cmp(tmp_path / "cached" / name, tmp_path / "fresh" / name, shallow=False), name
    assert _comparable(cached) == _comparable(fresh)
    assert cached["global"]["preempted_allocation_count"] > 0


def test_historic_usage_weights_keep_skipping_exact(tmp_path):
    """A pool inferring its children's weights from their historic usage makes every update depend on time: the
    engine then runs every update (heartbeats are still skipped), and both runs agree."""
    document = mixed_document(until="6m")
    pools = document["pool_trees"]["physical"]["pools"]
    document["pool_trees"]["physical"]["pools"] = {
        "all": {
            "infer_children_weights_from_historic_usage": True,
            "historic_usage_aggregation_period": "1m",
            "strong_guarantee_resources": {"cpu": 24},
            "pools": pools,
        }
    }
    skipping = run(document, tmp_path / "skip")
    naive = run(
        document, tmp_path / "naive", skip_idle_heartbeats=False, skip_unchanged_fair_share_updates=False
    )
    assert skipping["engine"]["fair_share_updates_skipped"] == 0
    assert skipping["engine"]["heartbeats_skipped"] > 0
    for name in ("events.jsonl", "timeline.csv", "operations.csv"):
        assert filecmp.cmp(tmp_path / "skip" / name, tmp_path / "naive" / name, shallow=False), name
    assert _comparable(skipping) == _comparable(naive)
