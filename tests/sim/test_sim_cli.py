"""`pooltree simulate` and `pooltree workload generate` as real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.sim.simkit import project_document

ROOT = Path(__file__).resolve().parents[2]


def pooltree(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pooltree.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_simulate_writes_every_output(tmp_path: Path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(project_document(until="5m")))
    out = tmp_path / "out"
    done = pooltree("simulate", str(scenario), "--out", str(out), "--seed", "5", "--until", "4m")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["simulated_time"] == 240.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seed"] == 5 and summary["global"]["simulated_time"] == 240.0
    for name in ("operations.csv", "timeline.csv", "events.jsonl", "report.html", "fair_share_vs_usage.png"):
        assert (out / name).exists()
    assert "simulating" in done.stderr


def test_bad_scenario_exits_1_with_the_field_and_no_traceback(tmp_path: Path):
    document = project_document()
    document["operations"][3 - 1]["tasks"][0]["job_count"] = 0
    document["operations"].append(dict(document["operations"][0], id="x"))
    document["operations"][3]["tasks"] = [{"job_count": -1, "resources": {"cpu": 1}, "duration": "1m"}]
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(yaml.safe_dump(document))
    done = pooltree("simulate", str(scenario), "--out", str(tmp_path / "out"))
    assert done.returncode == 1
    assert "operations[2].tasks[0].job_count" in done.stderr
    assert "Traceback" not in done.stderr
    done = pooltree("simulate", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    scenario.write_text(yaml.safe_dump(project_document()))
    done = pooltree("simulate", str(scenario), "--out", str(tmp_path / "out"), "--until", "soon")
    assert done.returncode == 1 and "--until" in done.stderr


def test_workload_generate_then_simulate(tmp_path: Path):
    trace = tmp_path / "trace.csv"
    done = pooltree(
        "workload",
        "generate",
        "--out",
        str(trace),
        "--rate",
        "project-adhoc=30",
        "--rate",
        "project-batch=10",
        "--hours",
        "0.2",
        "--job-count",
        "5",
        "--duration",
        "1m",
        "--seed",
        "3",
    )
    assert done.returncode == 0, done.stderr
    count = json.loads(done.stdout)["operations"]
    assert count > 0 and len({line.split(",")[0] for line in trace.read_text().splitlines()[1:]}) == count
    document = project_document(operations=[])
    document["workload_file"] = trace.name
    document["until"] = "15m"
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(document))
    done = pooltree("simulate", str(tmp_path / "scenario.yaml"), "--out", str(tmp_path / "out"), "--no-plots")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert len(summary["operations"]) == count
    bad = pooltree("workload", "generate", "--out", str(trace), "--rate", "adhoc")
    assert bad.returncode == 1 and "POOL=OPERATIONS_PER_HOUR" in bad.stderr


UNFIT_AND_ENDLESS = """
seed: 1
cluster:
  nodes:
    - {address: node, count: 3, resource_limits: {user_slots: 8, cpu: 8, memory: 32Gi}}
pool_trees: {physical: {pools: {batch: {}}}}
operations:
  - {id: fits, submit_time: 0, spec: {pool: batch},
     tasks: [{job_count: 4, resources: {cpu: 2, memory: 4Gi, user_slots: 1}, duration: 60s}]}
  - {id: too-big, submit_time: 5s, spec: {pool: batch},
     tasks: [{name: huge, job_count: 2, resources: {cpu: 32, memory: 4Gi, user_slots: 1}, duration: 60s}]}
  - {id: service, type: vanilla, submit_time: 10s, spec: {pool: batch},
     tasks: [{name: svc, job_count: 2, resources: {cpu: 1, memory: 1Gi, user_slots: 1}}]}
"""


def test_until_ends_services_and_an_operation_no_node_fits_fails_with_the_reason(tmp_path: Path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(UNFIT_AND_ENDLESS)
    without = pooltree("simulate", str(scenario), "--out", str(tmp_path / "none"), "--no-plots")
    assert without.returncode == 1 and "operations[2].lifetime" in without.stderr
    assert "--until" in without.stderr
    done = pooltree("simulate", str(scenario), "--out", str(tmp_path / "out"), "--until", "25m", "--no-plots")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    ops = {op["id"]: op for op in summary["operations"]}
    assert ops["fits"]["state"] == "completed" and ops["service"]["state"] == "running"
    big = ops["too-big"]
    # the live service's rule and timeout: no online node fits a job of "huge" for 10 s -> failed, with why
    assert big["state"] == "failed" and big["finish_time"] == 15.0 and big["completed_job_count"] == 0
    assert "No online node can satisfy the resource demand" in big["error"]
    assert "'huge'" in big["error"] and "short of cpu" in big["error"]
    assert summary["global"]["simulated_time"] == 1500.0
