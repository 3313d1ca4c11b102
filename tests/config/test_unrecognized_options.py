"""Option names YTsaurus's structs keep: accepted, reported with the closest known option, never ignored silently.

YTsaurus parses pool tree configs, pool configs and operation specs into YSON structs that keep unrecognized
keys; the scheduler raises "Pool tree config contains unrecognized options" (tree option
``enable_unrecognized_alert``, default true) and lists an operation's in ``unrecognized_spec``. pooltree used to
refuse such a name; a bad value of a known option is still refused with an error naming the field.
"""

from __future__ import annotations

import pytest

from pooltree.config import OperationSpec, PoolConfig, PoolTreeConfig, parse_pool_trees
from pooltree.config.support import unrecognized_options, unrecognized_options_alert
from pooltree.errors import ConfigError


def _doc(config: dict, pool: dict) -> dict:
    return {"t": {"config": config, "pools": {"p": pool}}}


def test_unknown_names_load_and_are_listed_with_the_closest_option() -> None:
    trees = parse_pool_trees(
        _doc(
            {"max_running_operation_cout": 5, "integral_guarantees": {"smooth_periodd": 10}},
            {"max_share_ration": 0.5, "ephemeral_subpool_config": {"moode": "fifo"}, "my_note": "x"},
        )
    )
    entries = unrecognized_options(trees)
    assert [(e["path"], e.get("closest")) for e in entries] == [
        ("pool_trees.t.config.max_running_operation_cout", "max_running_operation_count"),
        ("pool_trees.t.config.integral_guarantees.smooth_periodd", "smooth_period"),
        ("pool_trees.t.pools.p.max_share_ration", "max_share_ratio"),
        ("pool_trees.t.pools.p.my_note", None),
        ("pool_trees.t.pools.p.ephemeral_subpool_config.moode", "mode"),
    ]
    assert "did you mean 'max_share_ratio'?" in entries[2]["reason"]
    # Kept, without an effect: the known options keep their defaults.
    assert trees["t"].pools["p"].config.max_share_ratio is None
    alert = unrecognized_options_alert(entries)
    assert alert is not None and alert["message"] == "Pool tree config contains unrecognized options"
    assert alert["attributes"]["alert_type"] == "unrecognized_pool_tree_config_options"
    assert unrecognized_options_alert([]) is None


def test_known_options_and_yt_options_pooltree_does_not_implement_are_not_unrecognized() -> None:
    trees = parse_pool_trees(_doc({"scheduling_segments": {"mode": "large_gpu"}}, {"weight": 2, "pools": {}}))
    assert unrecognized_options(trees) == []


def test_enable_unrecognized_alert_false_silences_the_tree_config_part_as_in_yt() -> None:
    trees = parse_pool_trees(_doc({"enable_unrecognized_alert": False, "frobnicate": 1}, {"wieght": 1}))
    assert [e["path"] for e in unrecognized_options(trees)] == ["pool_trees.t.pools.p.wieght"]


def test_operation_spec_unknown_names_are_listed_with_the_closest_option() -> None:
    spec = OperationSpec.parse(
        {"pool": "p", "is_gnag": True, "tasks": {"main": {"command": "true", "job_count": 1, "cpu_limt": 2}}}
    )
    entries = unrecognized_options([], [("op1", spec)])
    assert [(e["path"], e.get("closest")) for e in entries] == [
        ("operations.op1.spec.is_gnag", "is_gang"),
        ("operations.op1.spec.tasks.main.cpu_limt", "cpu_limit"),
    ]


@pytest.mark.parametrize(
    ("model", "data", "path", "text"),
    [
        (PoolConfig, {"weight": "heavy", "wieght": 2}, "cfg.weight", "valid number"),
        (PoolTreeConfig, {"max_operation_count": -1, "frobnicate": 1}, "cfg.max_operation_count", ">= 0"),
        (
            PoolConfig,
            {"integral_guarantees": {"guarantee_type": "sometimes", "x": 1}},
            "cfg.integral_guarantees.guarantee_type",
            "'none', 'burst' or 'relaxed'",
        ),
    ],
)
def test_a_bad_value_of_a_known_option_is_still_an_error_naming_it(model, data, path, text) -> None:
    with pytest.raises(ConfigError) as info:
        model.parse(data, "cfg")
    assert info.value.path == path
    assert (
        text in info.value.reason or text.replace(">= 0", "greater than or equal to 0") in info.value.reason
    )


def test_the_document_structure_stays_strict() -> None:
    """``pool_trees.<tree>`` holds ``config`` and ``pools``: pooltree's document, not a YTsaurus struct."""
    with pytest.raises(ConfigError) as info:
        parse_pool_trees({"t": {"configs": {}}})
    assert info.value.path == "pool_trees.t.configs"
