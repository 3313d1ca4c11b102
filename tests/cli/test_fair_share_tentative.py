"""``pooltree fair-share`` places operations in their tentative pool trees (issue 30), with the same rule the live
service applies at start (`pooltree/strategy/tentative.py` ``tentative_trees``): the spec's
``tentative_pool_trees``, or the snapshot's ``default_tentative_pool_trees`` for a spec with
``use_default_tentative_pool_trees``; a tree whose ``non_tentative_operation_types`` lists the type is left out."""

from __future__ import annotations

import json
from pathlib import Path

from clikit import run_fair_share

SNAPSHOT = """
cluster: {total_resources: {cpu: 10, user_slots: 10}}
default_pool_tree: physical
default_tentative_pool_trees: [cloud]
pool_trees:
  physical: {pools: {research: {}}}
  cloud: {pools: {research: {}}}
operations:
  - {id: own, spec: {pool: research, pool_trees: [physical], tentative_pool_trees: [cloud]},
     resource_demand: {cpu: 4, user_slots: 4}}
  - {id: defaults, spec: {pool: research, pool_trees: [physical], use_default_tentative_pool_trees: true},
     resource_demand: {cpu: 2, user_slots: 2}}
  - {id: plain, spec: {pool: research, pool_trees: [physical]}, resource_demand: {cpu: 2, user_slots: 2}}
  - {id: sorting, type: sort, spec: {pool: research, pool_trees: [physical], tentative_pool_trees: [cloud]},
     resource_demand: {cpu: 2, user_slots: 2}}
"""


def test_operations_are_placed_in_their_tentative_trees(tmp_path: Path) -> None:
    path = tmp_path / "tentative.yaml"
    path.write_text(SNAPSHOT)
    done = run_fair_share(str(path), "--format", "json")
    assert done.returncode == 0, done.stderr
    trees = json.loads(done.stdout)["pool_trees"]
    assert sorted(trees["physical"]["operations"]) == ["defaults", "own", "plain", "sorting"]
    assert sorted(trees["cloud"]["operations"]) == ["defaults", "own"]  # sort: a non-tentative type
    assert trees["cloud"]["operations"]["own"]["fair_share_ratio"] > 0
    assert "tentative_pool_trees" not in done.stderr  # implemented here, not reported


def test_a_tentative_tree_needs_regular_trees(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        SNAPSHOT.replace("pool_trees: [physical], tentative_pool_trees", "tentative_pool_trees", 1)
    )
    done = run_fair_share(str(path))
    assert done.returncode != 0
    assert "operations[0].spec.tentative_pool_trees" in done.stderr
    assert "Regular pool trees must be explicitly specified" in done.stderr
