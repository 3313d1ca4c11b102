"""No sequence of ACL changes lets a user act on what an explicit deny forbids (hypothesis, bounded).

Random ACEs, ``inherit_acl`` switches and group membership changes are applied to a real Cypress pool tree; after
every step each pool is checked through the same ``authorize`` the API calls (``start_operation`` for ``use``,
``set`` of a pool attribute for ``write``) against a reference written independently: the ACEs each node passes
down to its descendants, top-down. A matching deny in effect must refuse; otherwise a matching allow must let
through; otherwise the answer is no."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pooltree.errors import PooltreeError
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TREE = "//sys/pool_trees/default"
POOLS = {"a": TREE + "/a", "b": TREE + "/a/b", "c": TREE + "/a/b/c", "d": TREE + "/d"}
NODES = {"tree": TREE, **POOLS}
PARENT = {"tree": "//sys/pool_trees", "a": TREE, "b": POOLS["a"], "c": POOLS["b"], "d": TREE}
TOP = ("/", "//sys", "//sys/pool_trees")
BUILTIN = {
    "/": [{"action": "allow", "subjects": ["everyone"], "permissions": ["read"]}],
    "//sys/pool_trees": [{"action": "allow", "subjects": ["users"], "permissions": ["read", "use"]}],
}
MODES = ("object_and_descendants", "object_only", "descendants_only", "immediate_descendants_only")

aces = st.fixed_dictionaries(
    {
        "action": st.sampled_from(["allow", "deny"]),
        "subjects": st.lists(
            st.sampled_from(["alice", "bob", "g", "users", "everyone"]), min_size=1, max_size=2
        ),
        "permissions": st.lists(
            st.sampled_from(["use", "write", "read"]), min_size=1, max_size=2, unique=True
        ),
        "inheritance_mode": st.sampled_from(MODES),
    }
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("acl"), st.sampled_from(sorted(NODES)), st.lists(aces, max_size=3)),
        st.tuples(st.just("inherit"), st.sampled_from(sorted(NODES)), st.booleans()),
        st.tuples(st.just("member"), st.booleans(), st.none()),
    ),
    min_size=1,
    max_size=8,
)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> SchedulerService:
    root = tmp_path_factory.mktemp("acl-props")
    made = SchedulerService(
        open_store(f"sqlite:///{Path(root) / 'db.sqlite'}"), token="ytct-0000-" + "f0" * 16
    )
    made.cypress.create("scheduler_pool_tree", TREE)
    for name in ("a", "b", "c", "d"):
        made.cypress.create("scheduler_pool", POOLS[name])
    made.security.directory.create_user("alice")
    made.security.directory.create_user("bob")
    made.security.directory.create_group("g")
    return made


def _reset(service: SchedulerService) -> None:
    for path in NODES.values():
        service.cypress.set(path + "/@acl", [])
        service.cypress.set(path + "/@inherit_acl", True)
    if "g" in service.security.directory.member_of("alice"):
        service.security.directory.remove_member("alice", "g")


def _applies(ace: dict[str, Any], distance: int) -> bool:
    mode = ace.get("inheritance_mode", "object_and_descendants")
    if distance == 0:
        return mode in ("object_and_descendants", "object_only")
    if distance == 1:
        return mode != "object_only"
    return mode in ("object_and_descendants", "descendants_only")


def _effective(
    node: str, acls: dict[str, list[dict[str, Any]]], inherit: dict[str, bool]
) -> list[dict[str, Any]]:
    """The ACEs in effect on ``node``: its own that reach it, plus what its parent passes down (top-down)."""

    def passed_down(parent: str) -> list[tuple[dict[str, Any], int]]:
        own = [(ace, 1) for ace in acls.get(parent, [])]
        if not inherit.get(parent, True) or parent == "/":
            return own
        above = "/" if parent == "//sys" else ("//sys" if parent == "//sys/pool_trees" else None)
        if above is None:
            above = next(PARENT[k] for k, v in NODES.items() if v == parent)
        return own + [(ace, distance + 1) for ace, distance in passed_down(above)]

    own = [ace for ace in acls.get(node, []) if _applies(ace, 0)]
    if not inherit.get(node, True):
        return own
    parent = next(PARENT[k] for k, v in NODES.items() if v == node)
    return own + [ace for ace, distance in passed_down(parent) if _applies(ace, distance)]


def _allowed(service: SchedulerService, name: str, permission: str) -> bool:
    try:
        if permission == "use":
            service.security.authorize("start_operation", "alice", {"spec": {"pool": name}})
        else:
            service.security.authorize("set", "alice", {"path": POOLS[name] + "/@weight"}, 1.0)
    except PooltreeError as error:
        assert error.code == 901, error.message
        return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_an_explicit_deny_always_wins(service: SchedulerService, steps: list[tuple[str, Any, Any]]) -> None:
    _reset(service)
    acls: dict[str, list[dict[str, Any]]] = {path: list(aces) for path, aces in BUILTIN.items()}
    inherit: dict[str, bool] = {}
    member = False
    for kind, target, value in steps:
        if kind == "acl":
            service.cypress.set(NODES[target] + "/@acl", value)
            acls[NODES[target]] = [*value, *BUILTIN.get(NODES[target], [])]
        elif kind == "inherit":
            service.cypress.set(NODES[target] + "/@inherit_acl", value)
            inherit[NODES[target]] = value
        elif target != member:
            (service.security.directory.add_member if target else service.security.directory.remove_member)(
                "alice", "g"
            )
            member = target
        subjects = {"alice", "users", "everyone"} | ({"g"} if member else set())
        for name in POOLS:
            effective = _effective(POOLS[name], acls, inherit)
            for permission in ("use", "write"):
                matching = [
                    ace
                    for ace in effective
                    if permission in ace["permissions"] and subjects & set(ace["subjects"])
                ]
                expected = bool(matching) and all(ace["action"] == "allow" for ace in matching)
                assert _allowed(service, name, permission) is expected, (name, permission, matching)
