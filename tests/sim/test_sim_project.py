"""The seeds' project example end to end: adhoc starves, then gets its guarantee by preemption; backup gets its
guarantee; batch uses what is left. Assertions read summary.json, timeline.csv and events.jsonl."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sim.simkit import events, project_document, run, timeline


@pytest.fixture(scope="module")
def project_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("project")
    return run(project_document(), out, plots=True), out


def _usage(rows: list[dict[str, str]], element: str, t0: float, t1: float) -> list[float]:
    return [float(r["usage_ratio"]) for r in rows if r["element"] == element and t0 <= float(r["time"]) <= t1]


def test_adhoc_starves_then_receives_its_guarantee_by_preemption(project_run):
    summary, out = project_run
    rows = timeline(out)
    adhoc = summary["pools"]["project-adhoc"]
    assert adhoc["starving_time"] > 0
    starving = [
        float(r["time"])
        for r in rows
        if r["element"] == "adhoc-1" and r["starvation_status"] != "non_starving"
    ]
    # starvation begins after the 30 s timeout (batch holds every cpu with 20-minute jobs) and ends
    assert starving and 300 + 30 < starving[0] < 300 + 45
    assert starving[-1] < 480
    preempted = [e for e in events(out) if e["event"] == "allocation_preempted"]
    assert preempted and all(e["operation_id"] == "batch-1" for e in preempted)
    by_adhoc = [e for e in preempted if e["preemptor_operation_id"] == "adhoc-1"]
    assert len(by_adhoc) >= 60 and all(e["reason"] == "preemption" for e in by_adhoc)
    # after starvation adhoc holds at least the starvation tolerance (0.8) of its fair share (80 of 100 cpu
    # plus 1/11 of the unguaranteed rest while backup is absent): preemption stops once it no longer starves
    fair = [
        float(r["fair_share_ratio"])
        for r in rows
        if r["element"] == "project-adhoc" and float(r["time"]) == 400.0
    ]
    assert fair == [pytest.approx(0.8 + 0.2 / 11, abs=1e-6)]
    assert min(_usage(rows, "project-adhoc", 400, 470)) >= 0.8 * fair[0]
    assert summary["pools"]["project-batch"]["preempted_allocation_count"] == len(preempted)
    batch = next(o for o in summary["operations"] if o["id"] == "batch-1")
    assert batch["aborted_job_count_by_reason"]["preemption"] == len(by_adhoc) + sum(
        1 for e in preempted if e["preemptor_operation_id"] == "backup-1"
    )
    assert batch["preempted_job_time"] > 0


def test_backup_receives_its_guarantee_and_batch_uses_the_rest(project_run):
    summary, out = project_run
    rows = timeline(out)
    # backup arrives at 480 s, starves and preempts batch until it is within one allocation of its 20-cpu
    # guarantee (0.2 of the tree); the allocation crossing batch's fair share is not preemptible (§d)
    backup = _usage(rows, "project-backup", 600, 800)
    assert min(backup) >= 0.19 - 1e-9 and max(backup) <= 0.2 + 1e-9
    assert summary["pools"]["project-backup"]["starving_time"] > 0
    assert any(e.get("preemptor_operation_id") == "backup-1" for e in events(out))
    for t in (650.0, 750.0, 800.0):
        at = {r["element"]: float(r["usage_ratio"]) for r in rows if float(r["time"]) == t}
        assert at["project-batch"] == pytest.approx(1.0 - at["project-adhoc"] - at["project-backup"])
        assert at["<Root>"] == pytest.approx(1.0)
    # batch ran at 100% before adhoc arrived
    assert min(_usage(rows, "project-batch", 5, 300)) == pytest.approx(1.0)
    assert summary["global"]["utilization"]["cpu"] > 0.99
    states = {o["id"]: o["state"] for o in summary["operations"]}
    assert states == {"batch-1": "running", "adhoc-1": "completed", "backup-1": "completed"}
    adhoc = next(o for o in summary["operations"] if o["id"] == "adhoc-1")
    assert adhoc["completed_job_count"] == adhoc["job_count"] == 150
    assert adhoc["pending_duration"] == 0.0


def test_outputs_and_plots_exist(project_run):
    summary, out = project_run
    for name in ("summary.json", "operations.csv", "timeline.csv", "events.jsonl", "report.html"):
        assert (out / name).stat().st_size > 0
    for name in ("fair_share_vs_usage.png", "pending_time.png", "preemptions.png"):
        import matplotlib.image

        assert matplotlib.image.imread(out / name).shape[0] > 100
        assert name in (out / "report.html").read_text()
    header = (out / "operations.csv").read_text().splitlines()[0]
    assert header == (
        "id,job_count,preempted_job_count,start_time,finish_time,real_duration,jobs_total_duration,"
        "job_max_duration,preempted_jobs_total_duration,operation_type,operation_state,in_timeframe"
    )
    assert (out / "timeline.csv").read_text().splitlines()[0] == (
        "time,tree,element,kind,fair_share_ratio,usage_ratio,demand_ratio,starvation_status"
    )
    operation = summary["operations"][0]
    for key in (
        "id",
        "pool",
        "state",
        "submit_time",
        "start_time",
        "finish_time",
        "pending_duration",
        "job_count",
        "completed_job_count",
        "aborted_job_count_by_reason",
        "preempted_job_time",
        "user_job_memory_reserve_factor",
        "job_proxy_memory_reserve_factor",
        "resource_overdraft_count",
    ):
        assert key in operation
    for key in (
        "mean_fair_share_ratio",
        "mean_usage_ratio",
        "starving_time",
        "below_fair_share_time",
        "preempted_allocation_count",
    ):
        assert key in summary["pools"]["project-adhoc"]
    for key in (
        "utilization",
        "preempted_allocation_count",
        "wasted_job_time",
        "simulated_time",
        "wall_time",
    ):
        assert key in summary["global"]
    assert summary["global"]["simulated_time"] == 1500.0
