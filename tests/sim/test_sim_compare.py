"""What-if comparisons: `pooltree simulate --variant` and a scenario's `variants:` section."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
import yaml

from pooltree.errors import ConfigError
from pooltree.sim import load_scenario, run_to_directory
from pooltree.sim.compare import BASELINE, compare, comparison_html, parse_variants
from tests.sim.simkit import PROJECT_POOLS, project_document
from tests.sim.test_sim_cli import pooltree


def moved_guarantee() -> dict:
    """adhoc's guarantee 80 -> 20 and backup's 20 -> 80 (same sum): adhoc starves longer, backup less."""
    pools = copy.deepcopy(PROJECT_POOLS)
    children = pools["project-root"]["pools"]
    children["project-adhoc"]["strong_guarantee_resources"] = {"cpu": 20}
    children["project-backup"]["strong_guarantee_resources"] = {"cpu": 80}
    return {"physical": {"config": {"fair_share_starvation_timeout": "30s"}, "pools": pools}}


def test_variant_runs_the_same_workload_and_reports_deltas(tmp_path: Path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(project_document(until="15m")))
    variant = tmp_path / "adhoc-20.yaml"
    variant.write_text(yaml.safe_dump({"pool_trees": moved_guarantee()}))
    out = tmp_path / "out"
    done = pooltree("simulate", str(scenario), "--out", str(out), "--variant", str(variant), "--no-plots")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runs"] == [BASELINE, "adhoc-20"]
    for name in ("comparison.json", "comparison.html", "comparison_pools.csv", "comparison_operations.csv"):
        assert (out / name).exists(), name
    for run in (BASELINE, "adhoc-20"):
        assert (out / run / "summary.json").exists() and (out / run / "events.jsonl").exists()
    comparison = json.loads((out / "comparison.json").read_text())
    base = json.loads((out / BASELINE / "summary.json").read_text())
    other = json.loads((out / "adhoc-20" / "summary.json").read_text())
    # the same workload: the same operations, submitted at the same times
    assert [(o["id"], o["submit_time"]) for o in base["operations"]] == [
        (o["id"], o["submit_time"]) for o in other["operations"]
    ]
    adhoc = comparison["pools"]["project-adhoc"]
    for metric in ("mean_fair_share_ratio", "starving_time", "below_fair_share_time"):
        values = adhoc[metric]["values"]
        assert values[BASELINE] == base["pools"]["project-adhoc"][metric]
        assert values["adhoc-20"] == other["pools"]["project-adhoc"][metric]
        assert adhoc[metric]["delta"]["adhoc-20"] == pytest.approx(values["adhoc-20"] - values[BASELINE])
    # a smaller guarantee: adhoc's fair share falls and backup's rises
    assert adhoc["mean_fair_share_ratio"]["delta"]["adhoc-20"] < -0.01
    backup = comparison["pools"]["project-backup"]["mean_fair_share_ratio"]["delta"]["adhoc-20"]
    assert backup > 0.01
    ranking = comparison["gain_and_lose"]["adhoc-20"]
    assert "project-adhoc" in [p["pool"] for p in ranking["lose"]]
    # a parent pool counts the operations of its subtree
    assert comparison["pools"]["project-root"]["pending_p50"]["values"][BASELINE] is not None
    glob = comparison["global"]["utilization_cpu"]["values"]
    assert glob[BASELINE] == base["global"]["utilization"]["cpu"]
    with (out / "comparison_pools.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {"pool", "metric", BASELINE, "adhoc-20", "delta adhoc-20"} <= set(rows[0])
    assert any(r["pool"] == "project-adhoc" and r["metric"] == "starving_time" for r in rows)
    page = (out / "comparison.html").read_text()
    assert "adhoc-20 vs baseline" in page and "project-adhoc" in page and "Lose most" in page


def test_variants_section_and_dump_files_are_variants_too(tmp_path: Path):
    examples = Path(__file__).resolve().parents[2] / "examples"
    (tmp_path / "dump.json").write_text((examples / "pool_trees-dump.json").read_text())
    document = project_document(until="5m")
    document["variants"] = [
        {"name": "moved", "pool_trees": moved_guarantee()},
        {"pool_trees_file": "dump.json", "scheduler": {"fair_share_update_period": "2s"}},
    ]
    variants = parse_variants(document, tmp_path, source="test")
    assert [v.name for v in variants] == ["moved", "variant-2"]
    assert variants[1].scenario.scheduler.fair_share_update_period == 2.0
    assert [(o.id, o.submit_time) for o in variants[1].scenario.operations] == [
        (o.id, o.submit_time) for o in variants[0].scenario.operations
    ]
    # a file that is itself a yt get //sys/pool_trees dump is a variant's pool trees
    dumped = parse_variants(project_document(until="5m"), tmp_path, files=[tmp_path / "dump.json"])
    assert (
        dumped[0].name == "dump"
        and "project-adhoc" in dumped[0].scenario.snapshot.pool_trees["physical"].pools
    )
    with pytest.raises(ConfigError) as info:
        parse_variants({**document, "variants": [{"pool_trees": {}, "seed": 3}]}, tmp_path)
    assert "variants[0].seed" in info.value.path
    renamed = parse_variants(
        {**document, "variants": [{"name": BASELINE, "pool_trees": moved_guarantee()}]}, tmp_path
    )
    assert renamed[0].name == "baseline-2"  # run directories never collide
    with pytest.raises(ConfigError) as info:
        parse_variants(
            {**document, "variants": [{"name": "../up", "pool_trees": moved_guarantee()}]}, tmp_path
        )
    assert info.value.path == "variants[0].name"


def test_comparison_is_deterministic(tmp_path: Path):
    document = project_document(until="6m")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(document))
    scenario = load_scenario(tmp_path / "s.yaml")
    variant = parse_variants(
        {**document, "variants": [{"name": "v", "pool_trees": moved_guarantee()}]}, tmp_path
    )[0]
    pages = []
    for attempt in range(2):
        results = {
            BASELINE: run_to_directory(scenario, tmp_path / f"{attempt}b", plots=False),
            "v": run_to_directory(variant.scenario, tmp_path / f"{attempt}v", plots=False),
        }
        comparison = compare(results)
        comparison.pop("runs_global")
        pages.append(json.dumps(comparison, sort_keys=True))
    assert pages[0] == pages[1]
    assert "v vs baseline" in comparison_html({**json.loads(pages[0]), "runs_global": _walls()})


def _walls() -> dict:
    return {run: {"simulated_time": 360.0, "wall_time": 1.0} for run in (BASELINE, "v")}


def _cell(before, after) -> dict:
    delta = None if before is None or after is None else after - before
    return {"values": {BASELINE: before, "v": after}, "delta": {"v": delta}}


def test_page_names_operations_that_finish_sooner_later_or_not_at_all():
    """Mean usage cannot show a fixed amount of work done sooner: the verdict names the operations whose
    completion moved, says which did not finish, and a single variant's cells read "before → after"."""
    from pooltree.sim.compare import GLOBAL_METRICS, OPERATION_METRICS, POOL_METRICS

    def operation(pool: str, completion: tuple, state: tuple) -> dict:
        entry = {metric: _cell(0, 0) for metric, _label, _direction in OPERATION_METRICS}
        entry["completion_time"] = _cell(*completion)
        entry["pool"] = {BASELINE: pool, "v": pool}
        entry["state"] = {BASELINE: state[0], "v": state[1]}
        return entry

    pools = {"backup": {metric: _cell(0.083, 0.083) for metric, _label, _direction in POOL_METRICS}}
    pools["backup"]["completion_mean"] = _cell(2836.0, 2242.0)
    comparison = {
        "runs": [BASELINE, "v"],
        "scenario": "s.yaml",
        "seed": 1,
        "global": {metric: _cell(1, 1) for metric, _label, _direction in GLOBAL_METRICS},
        "runs_global": _walls(),
        "pools": pools,
        "operations": {
            "backup-1": operation("backup", (2836.0, 2242.0), ("completed", "completed")),
            "adhoc-1": operation("adhoc", (1000.0, 1300.0), ("completed", "completed")),
            "batch-1": operation("batch", (None, None), ("running", "running")),
            "late-1": operation("batch", (None, 700.0), ("running", "completed")),
        },
        "gain_and_lose": {"v": {"gain": [], "lose": []}},
    }
    page = comparison_html(comparison)
    verdict = page.split("</section>")[0]
    assert "<b>Finish sooner</b>: backup-1 (backup): 2,836 → 2,242 s" in verdict
    assert "<b>Finish later</b>: adhoc-1 (adhoc): 1,000 → 1,300 s" in verdict
    assert "late-1 (batch) in the variant only" in verdict
    assert "Not finished at the end of either run: batch-1" in verdict
    assert "no pool's mean usage moved" in verdict
    assert "2,836 → 2,242<br><span class='d good'>−594</span>" in page
    assert "not finished" in page.split("Operations that moved most")[1]
