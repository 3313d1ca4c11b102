"""Bad snapshots through `pooltree fair-share`: non-zero exit, one message naming the path, no partial output."""

from __future__ import annotations

from pathlib import Path

import pytest
from clikit import run_fair_share

CLUSTER = "cluster: {total_resources: {cpu: 10, user_slots: 10}}\n"

CASES = [
    pytest.param(
        "wrong-type.yaml",
        CLUSTER + "pool_trees: {t: {pools: {a: {max_running_operation_count: many}}}}\n",
        ["pool_trees.t.pools.a.max_running_operation_count:", "integer"],
        id="wrong-type",
    ),
    pytest.param(
        "negative-limit.yaml",
        CLUSTER + "pool_trees: {t: {pools: {a: {resource_limits: {cpu: -1}}}}}\n",
        ["pool_trees.t.pools.a.resource_limits.cpu:", "non-negative"],
        id="negative-resource-limit",
    ),
    pytest.param(
        "negative-usage.yaml",
        CLUSTER
        + "pool_trees: {t: {pools: {a: {}}}}\n"
        + "operations: [{id: o1, spec: {pool: a}, resource_usage: {cpu: -2}}]\n",
        ["operations[0].resource_usage.cpu:", "non-negative"],
        id="negative-usage",
    ),
    pytest.param(
        "duplicate.yaml",
        CLUSTER + "pool_trees: {t: {pools: {a: {pools: {x: {}}}, b: {pools: {x: {}}}}}}\n",
        ["pool_trees.t.pools.b.pools.x:", 'Duplicate pool "x"', "pool_trees.t.pools.a.pools.x"],
        id="duplicate-pool",
    ),
    pytest.param(
        "other-tree.yaml",
        CLUSTER
        + "default_pool_tree: t\n"
        + "pool_trees: {t: {pools: {a: {}}}, g: {pools: {gp: {}}}}\n"
        + "operations: [{id: o1, spec: {pool: gp}, resource_demand: {cpu: 1}}]\n",
        ["operations[0].spec.pool:", 'pool "gp" is a configured pool of tree "g"'],
        id="pool-of-another-tree",
    ),
    pytest.param(
        "too-many.yaml",
        CLUSTER
        + "pool_trees: {t: {pools: {a: {max_operation_count: 1, max_running_operation_count: 1}}}}\n"
        + "operations: [{id: o1, spec: {pool: a}}, {id: o2, spec: {pool: a}}]\n",
        [
            "operations[1].spec.pool: operation o2 cannot start:",
            'Limit for the number of concurrent operations 1 for pool "a" in tree "t" has been reached',
        ],
        id="too-many-operations",
    ),
    pytest.param(
        "ephemeral.yaml",
        CLUSTER
        + "pool_trees: {t: {pools: {a: {}}}}\n"
        + "operations: [{id: o1, user: u, spec: {pool: x}}, {id: o2, user: u, spec: {pool: y}}]\n",
        ["operations[1].spec.pool:", 'limit for number of ephemeral pools 1 for user "u"', "pools are [x]"],
        id="ephemeral-pool-limit",
    ),
    pytest.param(
        "root.yaml",
        CLUSTER + "pool_trees: {t: {pools: {a: {}}}}\noperations: [{id: o1, spec: {pool: <Root>}}]\n",
        ["operations[0].spec.pool:", 'Starting operations immediately in pool "<Root>" is forbidden'],
        id="operation-in-root",
    ),
    pytest.param(
        "broken.yaml",
        "cluster: {total_resources: {cpu: 10}\npool_trees: [\n",
        ["broken.yaml:", "invalid YAML at line 2"],
        id="unparsable-yaml",
    ),
    pytest.param(
        "broken.json",
        '{"cluster": {"total_resources": {"cpu": 10}}, "pool_trees": ',
        ["broken.json:", "invalid JSON"],
        id="unparsable-json",
    ),
    pytest.param(
        "broken.yson",
        "{cluster={total_resources={cpu=10}}; pool_trees=",
        ["broken.yson:"],
        id="unparsable-yson",
    ),
]


@pytest.mark.parametrize(("name", "text", "expected"), CASES)
def test_bad_snapshot_fails_with_one_message(
    tmp_path: Path, name: str, text: str, expected: list[str]
) -> None:
    path = tmp_path / name
    path.write_text(text)
    done = run_fair_share(str(path))
    assert done.returncode != 0
    assert done.stdout == ""
    # The console may wrap a long message; compare with white space folded.
    message = " ".join(done.stderr.split())
    assert message.startswith("error: ") and message.count("error:") == 1, message
    assert "Traceback" not in done.stderr
    for fragment in expected:
        assert fragment in message, message


def test_unknown_tree_option_names_the_known_trees() -> None:
    done = run_fair_share("examples/project-root.yaml", "--tree", "gpu")
    assert done.returncode != 0 and done.stdout == ""
    assert " ".join(done.stderr.split()) == "error: --tree: unknown pool tree 'gpu'; known: physical"


def test_options_pooltree_ignores_are_listed_on_stderr(tmp_path: Path) -> None:
    path = tmp_path / "production.yaml"
    path.write_text(
        CLUSTER
        + "pool_trees: {t: {config: {waiting_for_resources_on_node_timeout: 60000},"
        + " pools: {a: {enable_detailed_logs: true}}}}\n"
        + "operations: [{id: op1, spec: {pool: a, allow_idle_cpu_policy: true}}]\n"
    )
    done = run_fair_share(str(path))
    assert done.returncode == 0, done.stderr
    assert '"pool_trees"' in done.stdout
    assert "3 option(s) accepted but not implemented" in done.stderr
    for fragment in (
        "pool_trees.t.config.waiting_for_resources_on_node_timeout:",
        "pool_trees.t.pools.a.enable_detailed_logs:",
        "operations.op1.spec.allow_idle_cpu_policy:",
    ):
        assert fragment in done.stderr, done.stderr


def test_unknown_option_names_load_and_are_listed_with_the_closest_known_option(tmp_path: Path) -> None:
    """YTsaurus keeps option names it does not know and alerts; so does ``pooltree fair-share`` (issue 14)."""
    path = tmp_path / "typos.yaml"
    path.write_text(
        CLUSTER
        + "pool_trees: {t: {config: {max_operations: 3}, pools: {a: {wieght: 1}}}}\n"
        + "operations: [{id: op1, spec: {pool: a, poool: b}}]\n"
    )
    done = run_fair_share(str(path))
    assert done.returncode == 0, done.stderr
    assert '"pool_trees"' in done.stdout
    message = " ".join(done.stderr.split())
    assert "3 unrecognized option(s), kept and ignored" in message
    assert (
        "pool_trees.t.pools.a.wieght: unrecognized option" in message and "did you mean 'weight'?" in message
    )
    assert "pool_trees.t.config.max_operations:" in message
    assert "operations.op1.spec.poool:" in message and "did you mean 'pool'?" in message
