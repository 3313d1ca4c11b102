"""The simulator runs speculative jobs through the same controllers and core as the live service."""

from __future__ import annotations

from collections import Counter

from simkit import events, job, run


def _document(spec: dict, *, job_count: int = 24) -> dict:
    return {
        "seed": 5,
        "until": "3h",
        "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
        "cluster": {
            "nodes": [
                {"address": "n", "count": 4, "resource_limits": {"user_slots": 8, "cpu": 8, "memory": "32Gi"}}
            ]
        },
        "pool_trees": {"t": {"pools": {"a": {}}}},
        "operations": [
            {
                "id": "op",
                "type": "map",
                "submit_time": 0,
                "spec": {"pool": "a", **spec},
                "tasks": [
                    {
                        "job_count": job_count,
                        "resources": job(cpu=1, memory="1Gi"),
                        # a heavy tail: a few jobs run ten times longer than the median
                        "duration": {"distribution": "lognormal", "median": "60s", "sigma": 1.2},
                    }
                ],
            }
        ],
    }


def test_copies_of_slow_jobs_finish_the_operation_sooner_and_count_each_job_once(tmp_path) -> None:
    plain = run(_document({}), tmp_path / "plain")["operations"][0]
    spec = {"job_speculation_timeout": "120s", "max_speculative_job_count_per_task": 4}
    summary = run(_document(spec), tmp_path / "speculative")
    op = summary["operations"][0]
    log = events(tmp_path / "speculative")
    assert plain["state"] == op["state"] == "completed"
    assert op["completed_job_count"] == plain["completed_job_count"] == 24  # never both results
    assert op["finish_time"] < plain["finish_time"]  # the tail is cut
    stops = Counter(e["reason"] for e in log if e["event"] == "allocation_preempted")
    assert stops["speculative_run_won"] > 0 and stops["speculative_run_lost"] > 0
    assert op["aborted_job_count_by_reason"] == {
        "speculative_run_won": stops["speculative_run_won"],
        "speculative_run_lost": stops["speculative_run_lost"],
    }
    assert op["preempted_job_time"] == 0  # losers are not preemptions
    assert summary["global"]["preempted_allocation_count"] == 0
    assert summary["global"]["wasted_job_time"] > 0  # the losers ran for nothing
    # the cap: at most 4 copies requested or running at once (a copy runs from its start to its end)
    started = {e["allocation_id"]: e["time"] for e in log if e["event"] == "allocation_started"}
    ended = {
        e["allocation_id"]: e["time"]
        for e in log
        if e["event"] in ("allocation_finished", "allocation_aborted", "allocation_failed")
    }
    assert len(started) == 24 + stops["speculative_run_won"] + stops["speculative_run_lost"]
    # allocation ids are numbered in start order, and copies start only once the 24 jobs were all started
    copies = [a for a in started if int(a.rpartition("/")[2]) > 24]
    assert copies
    for copy in copies:
        at = started[copy]
        overlapping = [c for c in copies if started[c] <= at < ended[c]]
        assert len(overlapping) <= 4


def test_try_avoid_duplicating_jobs_turns_it_off(tmp_path) -> None:
    spec = {"job_speculation_timeout": "120s", "try_avoid_duplicating_jobs": True}
    op = run(_document(spec), tmp_path)["operations"][0]
    assert op["aborted_job_count_by_reason"] == {}
    log = events(tmp_path)
    assert len([e for e in log if e["event"] == "allocation_started"]) == 24


def test_the_same_scenario_gives_the_same_events(tmp_path) -> None:
    spec = {"job_speculation_timeout": "120s"}
    run(_document(spec), tmp_path / "a")
    run(_document(spec), tmp_path / "b")
    assert (tmp_path / "a" / "events.jsonl").read_bytes() == (tmp_path / "b" / "events.jsonl").read_bytes()
