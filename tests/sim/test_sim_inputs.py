"""Scenario validation (errors name the field), pool trees from a yt-CLI dump, CSV/JSONL traces, the generator."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from yt import yson

from pooltree.errors import ConfigError
from pooltree.sim import (
    Simulation,
    WorkloadParameters,
    generate_workload,
    load_scenario,
    load_trace,
    parse_scenario,
    write_trace,
)
from tests.sim.simkit import project_document


def _error(document: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_scenario(document)
    return info.value


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (
            lambda d: d["operations"][2]["tasks"][0].__setitem__("job_count", -3),
            "operations[2].tasks[0].job_count",
        ),
        (
            lambda d: d["operations"][1]["tasks"][0].__setitem__("job_count", "many"),
            "operations[1].tasks[0].job_count",
        ),
        (lambda d: d["operations"][0]["tasks"][0].pop("duration"), "operations[0].tasks[0].duration"),
        (
            lambda d: d["operations"][0]["tasks"][0].__setitem__("duration", {"distribution": "zipf"}),
            "operations[0].tasks[0].duration.distribution",
        ),
        (
            lambda d: d["operations"][0]["tasks"][0].__setitem__("resources", {"cpu": 1, "disks": 2}),
            "operations[0].tasks[0].resources.disks",
        ),
        (lambda d: d["operations"][1].__setitem__("submit_time", "soon"), "operations[1].submit_time"),
        (lambda d: d["operations"][1].__setitem__("type", "mapreduce"), "operations[1].type"),
        (lambda d: d["operations"][1].__setitem__("lifetime", "1h"), "operations[1].lifetime"),
        (lambda d: d["operations"][1].__setitem__("id", "batch-1"), "operations[1].id"),
        (lambda d: d["operations"][0]["spec"].__setitem__("weight", -1), "operations[0].spec.weight"),
        (
            lambda d: d["scheduler"].__setitem__("node_heartbeat_period", "0s"),
            "scheduler.node_heartbeat_period",
        ),
        (
            lambda d: d["scheduler"].__setitem__("node_heartbeat_jitter", "5s"),
            "scheduler.node_heartbeat_jitter",
        ),
        (lambda d: d["scheduler"].__setitem__("speed", 2), "scheduler.speed"),
        (
            lambda d: d.__setitem__("node_failures", [{"address": "nowhere", "at": 1}]),
            "node_failures[0].address",
        ),
        (lambda d: d.__setitem__("seed", -1), "seed"),
        (lambda d: d.__setitem__("until", "forever"), "until"),
        (lambda d: d.__setitem__("operations", []), "operations"),
        (
            lambda d: d["pool_trees"]["physical"]["pools"]["project-root"].__setitem__("weight", -2),
            "pool_trees.physical.pools.project-root.weight",
        ),
        (lambda d: d.__setitem__("cluster", {"total_resources": {"cpu": 10}}), "cluster.total_resources"),
    ],
)
def test_bad_scenario_names_the_field(mutate, path):
    document = copy.deepcopy(project_document())
    mutate(document)
    error = _error(document)
    assert error.path == path, error.message


def _dump() -> dict:
    """//sys/pool_trees as `yt get --format json --attribute ...` prints it: pool options as attributes."""

    def pool(attributes: dict, children: dict | None = None) -> dict:
        return {"$attributes": attributes, "$value": children or {}}

    return {
        "$attributes": {"default_tree": "physical"},
        "$value": {
            "physical": {
                "$attributes": {"config": {"fair_share_starvation_timeout": 30000}, "id": "1-2-3-4"},
                "$value": {
                    "project-root": pool(
                        {"strong_guarantee_resources": {"cpu": 100}, "type": "scheduler_pool"},
                        {
                            "project-adhoc": pool({"strong_guarantee_resources": {"cpu": 80}}),
                            "project-batch": pool({"weight": 10}),
                            "project-backup": pool({"strong_guarantee_resources": {"cpu": 20}}),
                        },
                    )
                },
            }
        },
    }


def _to_yson(node):
    if isinstance(node, dict) and "$value" in node:
        value = _to_yson(node["$value"])
        value.attributes = node.get("$attributes", {})
        return value
    if isinstance(node, dict):
        return yson.YsonMap({key: _to_yson(item) for key, item in node.items()})
    return node


@pytest.mark.parametrize("form", ["json", "yson"])
def test_pool_trees_from_a_cypress_dump(tmp_path: Path, form: str):
    dump = tmp_path / f"pool_trees.{form}"
    if form == "json":
        dump.write_text(json.dumps(_dump()))
    else:
        dump.write_bytes(yson.dumps(_to_yson(_dump()), yson_format="text"))
    document = project_document()
    document.pop("pool_trees")
    document["pool_trees_file"] = dump.name
    (tmp_path / "scenario.json").write_text(json.dumps(document))
    scenario = load_scenario(tmp_path / "scenario.json")
    tree = scenario.snapshot.pool_trees["physical"]
    assert set(tree.pools) == {"project-root", "project-adhoc", "project-batch", "project-backup"}
    assert tree.pools["project-batch"].config.weight == 10


def test_csv_trace_with_multi_task_operations(tmp_path: Path):
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "id,submit_time,user,pool,type,task,job_count,cpu,memory,user_slots,duration,duration_sigma,interruptible\n"
        "op-a,0,alice,project-adhoc,map,map,10,1,2Gi,1,300,0.5,true\n"
        "op-a,0,alice,project-adhoc,map,merge,2,2,4Gi,1,60,,\n"
        "op-b,1.5m,bob,project-batch,map,main,5,1,1073741824,1,2m,,\n"
    )
    document = project_document(operations=[])
    document["workload_file"] = str(trace)
    scenario = parse_scenario(document)
    ops = {op.id: op for op in scenario.operations}
    assert [task.name for task in ops["op-a"].tasks] == ["map", "merge"]
    assert ops["op-a"].tasks[0].duration.kind == "lognormal" and ops["op-a"].tasks[0].duration.a == 300
    assert ops["op-a"].tasks[0].interruptible is True
    assert ops["op-b"].submit_time == 90.0 and ops["op-b"].tasks[0].resources[3] == 1024**3


def test_csv_trace_errors_name_line_and_column(tmp_path: Path):
    trace = tmp_path / "trace.csv"
    trace.write_text("id,submit_time,cpu,duration\nx,0,1,60\ny,0,lots,60\n")
    with pytest.raises(ConfigError) as info:
        load_trace(trace)
    assert info.value.path == "trace.csv:3.cpu"
    trace.write_text("id,when\nx,0\n")
    with pytest.raises(ConfigError) as info:
        load_trace(trace)
    assert info.value.path == "trace.csv:1.when"


def test_jsonl_trace_errors_and_validation(tmp_path: Path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"id": "a", "submit_time": 0, "tasks": [{"resources": {"cpu": 1}, "duration": "1m"}]}\n{oops\n'
    )
    with pytest.raises(ConfigError) as info:
        load_trace(trace)
    assert info.value.path == "trace.jsonl:2"
    trace.write_text(
        '{"id": "a", "submit_time": 0, "tasks": [{"job_count": 0, "resources": {"cpu": 1}, "duration": "1m"}]}\n'
    )
    document = project_document(operations=[])
    document["workload_file"] = str(trace)
    with pytest.raises(ConfigError) as info:
        parse_scenario(document)
    assert info.value.path == f"workload_file({trace})[0].tasks[0].job_count"


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 1000),
    rate=st.floats(1, 60),
    sigma=st.floats(0, 1.5),
    suffix=st.sampled_from([".csv", ".jsonl"]),
)
def test_generated_traces_round_trip_and_are_deterministic(tmp_path_factory, seed, rate, sigma, suffix):
    params = WorkloadParameters(
        rates={"project-adhoc": rate, "project-batch": rate / 2}, hours=2, duration_sigma=sigma, seed=seed
    )
    first = generate_workload(params)
    assert first == generate_workload(params)
    times = [float(op["submit_time"][:-1]) for op in first]
    assert times == sorted(times) and all(0 <= t < 7200 for t in times)
    path = tmp_path_factory.mktemp("trace") / f"trace{suffix}"
    write_trace(first, path)
    document = project_document(operations=[])
    document["workload_file"] = str(path)
    if not first:
        return
    scenario = parse_scenario(document)
    assert sorted(op.id for op in scenario.operations) == sorted(op["id"] for op in first)
    by_id = {op.id: op for op in scenario.operations}
    for op in first:
        assert by_id[op["id"]].job_count == op["tasks"][0]["job_count"]
        assert by_id[op["id"]].submit_time == pytest.approx(float(op["submit_time"][:-1]))


def test_generator_rejects_bad_parameters():
    with pytest.raises(ConfigError) as info:
        generate_workload(WorkloadParameters(rates={"a": -1}))
    assert info.value.path == "rates.a"
    with pytest.raises(ConfigError) as info:
        generate_workload(WorkloadParameters(rates={"a": 1}, duration_sigma=9))
    assert info.value.path == "duration_sigma"


@pytest.mark.parametrize("name", ["sim-project-root.yaml", "sim-chyt-clique.yaml", "sim-from-dump.yaml"])
def test_examples_are_valid_scenarios(name):
    scenario = load_scenario(Path(__file__).resolve().parents[2] / "examples" / name)
    assert scenario.operations and scenario.until is not None


def test_endless_services_need_a_lifetime_or_until():
    document = project_document()
    document.pop("until")
    document["operations"][1] = {"id": "svc", "type": "vanilla", "tasks": [{"resources": {"cpu": 1}}]}
    scenario = parse_scenario(document)
    with pytest.raises(ConfigError) as info:
        Simulation(scenario)
    assert info.value.path == "operations[1].lifetime" and "--until" in info.value.message
    # the run's until (pooltree simulate --until) is an end too
    result = Simulation(scenario, until=1500.0).run()
    assert result.summary["global"]["simulated_time"] == 1500.0
    document["operations"][1]["lifetime"] = "1h"
    assert parse_scenario(document).horizon() == 480 + 7 * 86400
