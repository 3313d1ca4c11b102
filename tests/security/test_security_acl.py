"""ACL evaluation as YTsaurus does it (``pooltree.security.acl``): every rule of ``check`` pinned — deny wins,
inheritance modes by depth, ``inherit_acl``, groups, superusers — and the YTsaurus authorization error."""

from __future__ import annotations

import pytest

from pooltree.errors import PooltreeError
from pooltree.security.acl import Ace, AclNode, check, parse_acl

ALICE = frozenset({"alice", "analysts", "users", "everyone"})


def ace(
    action: str, subjects: tuple[str, ...], permissions: tuple[str, ...], mode: str = "object_and_descendants"
) -> Ace:
    return Ace(action, subjects, permissions, mode)


def chain(*acls: tuple[Ace, ...], inherit: tuple[bool, ...] | None = None) -> list[AclNode]:
    inherit = inherit or tuple(True for _ in acls)
    return [AclNode(f"node{i}", acl, inherit[i]) for i, acl in enumerate(acls)]


def test_no_matching_ace_denies() -> None:
    decision = check(chain((), ()), "alice", ALICE, "use")
    assert not decision.allowed and decision.reason == "no matching ACE"
    error = decision.error()
    assert error.code == 901
    assert (
        error.message
        == 'Access denied for user "alice": "use" permission for node0 is not allowed by any matching ACE'
    )
    assert error.attributes == {"user": "alice", "permission": "use", "object": "node0"}


def test_allow_through_a_group_and_from_an_ancestor() -> None:
    decision = check(chain((), (ace("allow", ("analysts",), ("use",)),)), "alice", ALICE, "use")
    assert decision.allowed and decision.ace_owner == "node1" and decision.subject == "analysts"
    assert not check(
        chain((), (ace("allow", ("analysts",), ("use",)),)), "bob", {"bob", "users"}, "use"
    ).allowed
    assert not check(chain((ace("allow", ("alice",), ("read",)),)), "alice", ALICE, "use").allowed


@pytest.mark.parametrize("deny_at", [0, 1, 2])
@pytest.mark.parametrize("allow_at", [0, 1, 2])
def test_deny_wins_wherever_it_is(deny_at: int, allow_at: int) -> None:
    acls: list[list[Ace]] = [[], [], []]
    acls[allow_at].append(ace("allow", ("alice",), ("use",)))
    acls[deny_at].append(ace("deny", ("analysts",), ("use",)))
    decision = check(chain(*map(tuple, acls)), "alice", ALICE, "use")
    assert not decision.allowed
    assert decision.ace_owner == f"node{deny_at}" and decision.subject == "analysts"
    error = decision.error()
    assert f'is denied for "analysts" by ACE at node{deny_at}' in error.message
    assert error.attributes["denied_by"] == f"node{deny_at}" and error.attributes["denied_for"] == "analysts"


@pytest.mark.parametrize(
    ("mode", "reaches"),
    [
        ("object_and_descendants", (True, True, True)),
        ("object_only", (True, False, False)),
        ("descendants_only", (False, True, True)),
        ("immediate_descendants_only", (False, True, False)),
    ],
)
def test_inheritance_modes_by_depth(mode: str, reaches: tuple[bool, bool, bool]) -> None:
    for depth, expected in enumerate(reaches):
        acls: list[tuple[Ace, ...]] = [() for _ in range(depth + 1)]
        acls[depth] = (ace("allow", ("alice",), ("use",), mode),)
        assert check(chain(*acls), "alice", ALICE, "use").allowed is expected, (mode, depth)


def test_inherit_acl_false_cuts_the_ancestors_but_keeps_its_own() -> None:
    acls = ((), (ace("allow", ("alice",), ("use",)),), (ace("deny", ("alice",), ("use",)),))
    assert not check(chain(*acls), "alice", ALICE, "use").allowed  # the grandparent's deny reaches
    cut = check(chain(*acls, inherit=(True, False, True)), "alice", ALICE, "use")
    assert cut.allowed and cut.ace_owner == "node1"  # node1 stops inheritance above it; its own ACE counts
    cut_at_object = check(chain(*acls, inherit=(False, True, True)), "alice", ALICE, "use")
    assert not cut_at_object.allowed and cut_at_object.reason == "no matching ACE"


def test_superusers_pass_every_check() -> None:
    acls = ((ace("deny", ("everyone",), ("use",)),),)
    assert check(chain(*acls), "root", {"root", "superusers"}, "use", superuser=True).allowed
    assert not check(chain(*acls), "root", {"root", "superusers"}, "use").allowed


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("allow", "acl"),
        ([{"action": "maybe", "subjects": ["a"], "permissions": ["use"]}], "acl[0].action"),
        ([{"action": "allow", "subjects": "a", "permissions": ["use"]}], "acl[0].subjects"),
        ([{"action": "allow", "subjects": ["a"], "permissions": ["fly"]}], "acl[0].permissions"),
        ([{"action": "allow", "subjects": ["a"]}], "acl[0].permissions"),
        ([{"action": "allow", "subjects": ["a"], "permissions": ["use"], "colour": 1}], "acl[0].colour"),
        (
            [{"action": "allow", "subjects": ["a"], "permissions": ["use"], "inheritance_mode": "x"}],
            "acl[0].inheritance_mode",
        ),
    ],
)
def test_malformed_acls_name_the_field(value: object, field: str) -> None:
    with pytest.raises(PooltreeError) as error:
        parse_acl(value)
    assert error.value.attributes["field"] == field


def test_operation_acls_know_only_read_and_manage() -> None:
    assert parse_acl(
        [{"action": "allow", "subjects": ["a"], "permissions": ["manage"]}], permissions=("read", "manage")
    )
    with pytest.raises(PooltreeError, match="unknown permission 'use'"):
        parse_acl(
            [{"action": "allow", "subjects": ["a"], "permissions": ["use"]}], permissions=("read", "manage")
        )
