"""A production GPU tree (YTsaurus's public unit-test data) against production's fair shares (issue 14).

YTsaurus's ``TestExampleFromProductionCluster`` loads ``unittests/data/gpu_tree_elements.yson`` (an orchid dump
of a production GPU pool tree, ``tests/fairshare/data/README.md``), builds the tree the way
``pooltree.fairshare.elements_dump`` does and runs the update with gang step functions and the improved
fit-factor computation (with its distribution gap). Here every element's fair share is compared with the
``total_fair_share`` production reported, resource by resource: an element matches when all five are within
1e-4 (YTsaurus's test only logs the root's two values). The exact counts are pinned, so any change to the core
that moves an element shows here; ``pooltree/fairshare/ARCHITECTURE.md`` ("A production GPU tree") explains
every remaining difference.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pooltree.cli import app
from pooltree.config.documents import loads_document
from pooltree.errors import ConfigError
from pooltree.fairshare import Operation, Pool, update_fair_share
from pooltree.fairshare import functions as fn
from pooltree.fairshare.elements_dump import (
    Comparison,
    ElementsDump,
    compare,
    load_elements_dump,
    parse_elements_dump,
    unit_test_settings,
)

DATA = Path(__file__).parent / "data" / "gpu_tree_elements.yson.gz"
DUMP_CHARS = 896_583
ELEMENTS = 1309
# The unit test's own options (main resource cpu, its default); the numpy reference passes give the same since
# their pool sums round as the compiled ones (they gave 1,184: rounding noise at jumps moved six elements).
UNIT_TEST_MATCHING = 1190
# The same with the tree's main resource, gpu (implied by the dump): the figure of issue 14.
FIGURE_MATCHING = 1247
# Counterfactuals that explain the remaining differences (ARCHITECTURE.md).
GANG_RULES_MATCHING = 1258  # gang operations as production evidently ran them: no step, FIFO truncation
GANG_RULES_AND_ORDER_MATCHING = 1276  # ... and FIFO pools running their running operations first
NO_GAP_MATCHING = 1185  # the gang rules without the distribution gap


@pytest.fixture(scope="module")
def dump() -> ElementsDump:
    return load_elements_dump(DATA)


def run(dump: ElementsDump, **overrides: object) -> Comparison:
    result = update_fair_share(dump.root, dump.total_resources, unit_test_settings(**overrides), 0.0)
    return compare(result, dump)


@pytest.fixture(scope="module")
def figure(dump: ElementsDump) -> Comparison:
    return run(dump, main_resource="gpu")


def test_the_dump_is_the_published_file(dump: ElementsDump) -> None:
    text = gzip.decompress(DATA.read_bytes()).decode("utf-8")
    assert len(text) == DUMP_CHARS
    document = loads_document(text, "yson")
    assert len(document) == ELEMENTS
    assert Counter(item["type"] for item in document) == {"pool": 566, "operation": 743}
    assert Counter(item.get("operation_type") for item in document if item["type"] == "operation") == {
        "vanilla": 670,
        "map": 70,
        "reduce": 3,
    }

    # A check of the transcription as well: production's fair share of every pool is its children's sum.
    def check(pool: Pool) -> None:
        if pool.children:
            total = sum(dump.production_fair_share[child.id] for child in pool.children)
            np.testing.assert_allclose(total, dump.production_fair_share[pool.id], atol=1e-9, err_msg=pool.id)
        for child in pool.children:
            if isinstance(child, Pool):
                check(child)

    check(dump.root)


def test_the_tree_is_built_as_the_unit_test_builds_it(dump: ElementsDump) -> None:
    assert dump.root.id == "<Root>"
    np.testing.assert_array_equal(dump.total_resources, [124992, 93818.4, 5952, 754088408226001, 74400])
    pools = [e for e in _elements(dump.root) if isinstance(e, Pool)]
    operations = [e for e in _elements(dump.root) if isinstance(e, Operation)]
    assert len(pools) == 566 and len(operations) == 743
    assert sum(op.is_gang for op in operations) == 670  # every vanilla operation is a gang
    for pool in pools[1:]:
        assert pool.strong_guarantee_resources[[0, 1, 3, 4]].tolist() == [0, 0, 0, 0]  # only gpu
        assert pool.fifo_sort_parameters == ("weight",)
    # Every pool that sets a guarantee sets it in GPU only: the tree's main resource is gpu.
    assert dump.main_resource == "gpu"


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    with fn.use_compiled_kernels(request.param == "compiled"):
        yield request.param


def test_the_unit_test_options_as_they_are(dump: ElementsDump, kernels: str) -> None:
    """With the unit test's main resource (cpu) no pool gets an implicit cpu/memory guarantee."""
    comparison = run(dump)
    assert comparison.total == ELEMENTS
    assert comparison.matching == UNIT_TEST_MATCHING
    assert comparison.fraction < 0.95


def test_production_figure(figure: Comparison) -> None:
    """Issue 14's figure: at least 95% of the elements within 1e-4 of production."""
    assert figure.total == ELEMENTS
    assert figure.matching == FIGURE_MATCHING
    assert figure.fraction >= 0.95
    name, difference, resource = figure.worst(1)[0]
    assert (name, resource) == ("operation332", "gpu")
    assert difference == pytest.approx(0.013141, abs=1e-6)


def test_production_figure_with_the_numpy_passes(dump: ElementsDump) -> None:
    """The same figure where the C extension could not be built (the numpy reference passes)."""
    with fn.use_compiled_kernels(False):
        comparison = run(dump, main_resource="gpu")
    assert comparison.matching == FIGURE_MATCHING


def test_every_remaining_difference_is_in_or_around_a_fifo_pool(
    dump: ElementsDump, figure: Comparison
) -> None:
    """The differences sit in FIFO pools (their order and gang handling), their ancestors, and the siblings
    that share a water level with those ancestors (pool115's fair-share subtree pool116 … pool151)."""
    parent: dict[str, str] = {}
    kind: dict[str, Pool | Operation] = {}
    for element in _elements(dump.root):
        kind[element.id] = element  # type: ignore[assignment]
        for child in getattr(element, "children", []):
            parent[child.id] = element.id
    mismatched = set(figure.mismatched())
    fifo = {n for n in mismatched if isinstance(kind[n], Pool) and kind[n].mode == "fifo"}  # type: ignore[union-attr]
    ancestors = set()
    for name in fifo:
        while name in parent:
            name = parent[name]
            ancestors.add(name)
    classes = Counter()
    others = []
    for name in mismatched:
        if name in fifo:
            classes["fifo pool"] += 1
        elif isinstance(kind[name], Operation) and kind[parent[name]].mode == "fifo":  # type: ignore[union-attr]
            classes["operation in a fifo pool"] += 1
        elif name in ancestors:
            classes["ancestor of a fifo pool"] += 1
        else:
            others.append(name)
    assert classes == {"fifo pool": 10, "operation in a fifo pool": 26, "ancestor of a fifo pool": 20}
    assert sorted(others) == ["pool116", "pool134", "pool135", "pool144", "pool148", "pool151"]
    assert all(parent[name] in {"pool115", *others} for name in others)


def _production_rules(dump: ElementsDump, *, running_first: bool) -> None:
    """What production evidently did and the dump does not say: FIFO pools truncate unsatisfied gangs
    (``enable_fair_share_truncation_in_fifo_pool``), and (``running_first``) run operations with usage before
    pending ones (their start times are not in the dump)."""
    for element in _elements(dump.root):
        if isinstance(element, Pool) and element.mode == "fifo":
            element.enable_fair_share_truncation_in_fifo_pool = True
            if running_first:
                element.fifo_sort_parameters = ("weight", "start_time")
                for op in element.children:
                    op.start_time = 0.0 if op.usage.max() > 0 else 1.0  # type: ignore[attr-defined]


def test_the_remaining_differences_are_fifo_rules_and_order() -> None:
    """Counterfactuals: with production's gang rules the count rises, with a plausible FIFO order further."""
    dump = load_elements_dump(DATA)  # modified below: not the shared fixture
    _production_rules(dump, running_first=False)
    gang_rules = run(dump, main_resource="gpu", enable_step_function_for_gang_operations=False)
    assert gang_rules.matching == GANG_RULES_MATCHING
    _production_rules(dump, running_first=True)
    ordered = run(dump, main_resource="gpu", enable_step_function_for_gang_operations=False)
    assert ordered.matching == GANG_RULES_AND_ORDER_MATCHING
    # pool542 (weight 100, no guarantee) then gets production's share to 1e-8: the truncated gangs' share is
    # left unallocated at the root, as in production (root GPU 0.99016, not 1).
    assert ordered.difference[ordered.names.index("pool542")] < 1e-8


def _elements(root: Pool) -> list[Pool | Operation]:
    out: list[Pool | Operation] = []
    stack: list[Pool | Operation] = [root]
    while stack:
        element = stack.pop()
        out.append(element)
        stack.extend(reversed(getattr(element, "children", [])))
    return out


# ---- the loader's input checks ------------------------------------------------------------------------------

ROOT = {
    "type": "pool",
    "name": "<Root>",
    "parent": None,
    "mode": "fair_share",
    "strong_guarantee_resources": {"cpu": 10.0, "gpu": 8},
    "total_fair_share": {"user_slots": 0.1, "cpu": 0.5, "gpu": 0.5, "memory": 0.5},
    "weight": 1.0,
    "resource_limits": {"user_slots": 10, "cpu": 10.0, "gpu": 8, "user_memory": 1000, "network": 0},
}
POOL = {
    "type": "pool",
    "name": "p",
    "parent": "<Root>",
    "mode": "fifo",
    "strong_guarantee_resources": {"gpu": 4},
    "total_fair_share": {"user_slots": 0.1, "cpu": 0.5, "gpu": 0.5, "memory": 0.5},
    "weight": 2.0,
    "resource_limits": None,
}
OPERATION = {
    "type": "operation",
    "name": "o",
    "parent": "p",
    "resource_usage": {"cpu": 1.0, "gpu": 2, "user_memory": 100},
    "resource_demand": {"user_slots": 1, "cpu": 5.0, "gpu": 4, "user_memory": 500},
    "total_fair_share": {"user_slots": 0.1, "cpu": 0.5, "gpu": 0.5, "memory": 0.5},
    "operation_type": "vanilla",
    "weight": 1.0,
}


def test_a_small_dump_loads_and_compares() -> None:
    dump = parse_elements_dump([ROOT, POOL, OPERATION])
    assert dump.main_resource == "gpu"
    (pool,) = dump.root.children
    assert isinstance(pool, Pool) and pool.mode == "fifo" and pool.weight == 2.0
    np.testing.assert_array_equal(pool.strong_guarantee_resources, [0, 0, 4, 0, 0])
    (op,) = pool.children
    assert isinstance(op, Operation) and op.is_gang
    np.testing.assert_array_equal(op.demand, [1, 5, 4, 500, 0])
    result = update_fair_share(dump.root, dump.total_resources, unit_test_settings(main_resource="gpu"), 0.0)
    comparison = compare(result, dump)
    assert comparison.total == 3 and comparison.matching == 3
    # A production value pooltree does not reach is reported with its element and resource.
    dump.production_fair_share["o"] = np.array([0.1, 0.5, 0.25, 0.5, 0.0])
    comparison = compare(result, dump)
    assert comparison.matching == 2 and comparison.mismatched() == ["o"]
    assert comparison.worst(1) == [("o", 0.25, "gpu")]


@pytest.mark.parametrize(
    ("index", "change", "path"),
    [
        (2, {"parent": "nowhere"}, "elements[2].parent"),
        (2, {"parent": "o"}, "elements[2].parent"),
        (1, {"mode": "lifo"}, "elements[1].mode"),
        (1, {"weight": -1.0}, "elements[1].weight"),
        (2, {"type": "job"}, "elements[2].type"),
        (2, {"resource_demand": {"cpu": 0.5}}, "elements[2].resource_demand"),
        (2, {"resource_usage": {"disk_space": 1}}, "elements[2].resource_usage.disk_space"),
        (2, {"resource_usage": {"cpu": "many"}}, "elements[2].resource_usage.cpu"),
        (2, {"total_fair_share": {"cpu": 2.0}}, "elements[2].total_fair_share.cpu"),
        (0, {"resource_limits": None}, "elements[0].resource_limits"),
        (2, {"name": "p"}, "elements[2].name"),
    ],
)
def test_bad_input_names_the_field(index: int, change: dict[str, object], path: str) -> None:
    document = [dict(ROOT), dict(POOL), dict(OPERATION)]
    document[index].update(change)
    with pytest.raises(ConfigError) as error:
        parse_elements_dump(document)
    assert error.value.path == path


def test_missing_field_and_missing_root() -> None:
    operation = dict(OPERATION)
    del operation["resource_usage"]
    with pytest.raises(ConfigError) as error:
        parse_elements_dump([ROOT, POOL, operation])
    assert error.value.path == "elements[2].resource_usage"
    with pytest.raises(ConfigError) as error:
        parse_elements_dump([dict(POOL, parent="<Root>")])
    assert error.value.path == "elements[0].parent"
    with pytest.raises(ConfigError):
        parse_elements_dump({"not": "a list"})


def test_cli_compares_a_dump(tmp_path: Path) -> None:
    path = tmp_path / "elements.yson.gz"
    from yt import yson

    path.write_bytes(gzip.compress(yson.dumps([ROOT, POOL, OPERATION], yson_format="pretty")))
    outcome = CliRunner().invoke(app, ["fair-share", "--elements-dump", str(path)])
    assert outcome.exit_code == 0, outcome.output
    report = json.loads(outcome.stdout)
    assert report["elements"] == 3 and report["within_tolerance"] == 3
    assert report["main_resource"] == "gpu" and report["main_resource_inferred"]
    bad = tmp_path / "bad.yson"
    bad.write_text("[{type=pool}]")
    outcome = CliRunner().invoke(app, ["fair-share", "--elements-dump", str(bad)])
    assert outcome.exit_code == 1
    assert "elements" in outcome.output or str(bad) in outcome.output


def test_a_tree_config_replaces_the_unit_test_options(tmp_path: Path) -> None:
    """``--tree-config``: the tree's own options; here the gang rules of the counterfactual above, and an
    unknown option reported with the closest known one."""
    config = tmp_path / "tree.yaml"
    config.write_text(
        "main_resource: gpu\n"
        "enable_fair_share_truncation_in_fifo_pool: true\n"
        "enable_improved_fair_share_by_fit_factor_computation: true\n"
        "enable_improved_fair_share_by_fit_factor_computation_distribution_gap: true\n"
        "enable_step_functon_for_gang_operations: true\n"
    )
    outcome = CliRunner().invoke(
        app, ["fair-share", "--elements-dump", str(DATA), "--tree-config", str(config), "--format", "json"]
    )
    assert outcome.exit_code == 0, outcome.output
    report = json.loads(outcome.stdout)
    assert report["within_tolerance"] == GANG_RULES_MATCHING
    assert report["fifo_truncation"] and not report["settings"]["enable_step_function_for_gang_operations"]
    (alert,) = report["alerts"]
    assert "enable_step_functon_for_gang_operations" in alert
    assert "did you mean 'enable_step_function_for_gang_operations'" in alert
    # Without the distribution gap the split stops at steps that overshoot a target by rounding only.
    config.write_text(
        "main_resource: gpu\n"
        "enable_fair_share_truncation_in_fifo_pool: true\n"
        "enable_improved_fair_share_by_fit_factor_computation: true\n"
    )
    outcome = CliRunner().invoke(
        app, ["fair-share", "--elements-dump", str(DATA), "--tree-config", str(config), "--format", "json"]
    )
    assert json.loads(outcome.stdout)["within_tolerance"] == NO_GAP_MATCHING
    outcome = CliRunner().invoke(app, ["fair-share", str(DATA), "--tree-config", str(config)])
    assert outcome.exit_code == 1 and "--tree-config" in outcome.output
