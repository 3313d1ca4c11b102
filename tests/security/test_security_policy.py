"""Each row of ``pooltree.security.policy``'s table, through the same ``authorize`` the API calls, on a real Cypress
and live scheduler (in process): reads, writes, moves and removals of nodes and pools, ACL changes, job commands."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pooltree.errors import PooltreeError
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TREE = "//sys/pool_trees/default"


@pytest.fixture
def service(tmp_path: Path) -> SchedulerService:
    made = SchedulerService(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token="ytct-0000-" + "c3" * 16)
    made.cypress.create("scheduler_pool_tree", TREE)
    write = [{"action": "allow", "subjects": ["alice"], "permissions": ["write"]}]
    made.cypress.create("scheduler_pool", TREE + "/mine", attributes={"acl": write})
    made.cypress.create("scheduler_pool", TREE + "/mine/sub")
    made.cypress.create("scheduler_pool", TREE + "/theirs")
    made.cypress.create(
        "map_node",
        "//tmp/private",
        attributes={"acl": [{"action": "deny", "subjects": ["alice"], "permissions": ["read", "write"]}]},
    )
    made.security.directory.create_user("alice")
    made.security.directory.create_user("bob")
    return made


def allowed(service: SchedulerService, command: str, params: dict[str, Any], value: Any = None) -> bool:
    try:
        service.security.authorize(command, "alice", params, value)
    except PooltreeError as error:
        assert error.code == 901, error.message
        return False
    return True


def test_reads_follow_read(service: SchedulerService) -> None:
    for command in ("get", "list", "exists"):
        assert allowed(service, command, {"path": TREE + "/theirs/@weight"})
        assert not allowed(service, command, {"path": "//tmp/private"})
        assert not allowed(service, command, {"path": "//tmp/private/child/@x"})  # below a denied node
    assert allowed(service, "get", {"path": "//sys/users/bob/@member_of"})


def test_writes_to_nodes_and_pools(service: SchedulerService) -> None:
    assert allowed(service, "set", {"path": "//tmp/mine"}, 1)  # //tmp is every user's
    assert allowed(service, "create", {"type": "map_node", "path": "//tmp/x"})
    assert allowed(service, "remove", {"path": "//tmp/x"})
    assert not allowed(service, "set", {"path": "//tmp/private/@x"}, 1)
    assert allowed(service, "set", {"path": TREE + "/mine/sub/@weight"}, 2.0)  # write inherited from mine
    assert not allowed(service, "set", {"path": TREE + "/theirs/@weight"}, 2.0)
    assert not allowed(service, "set", {"path": "//sys/pool_trees/@default_tree"}, "default")
    assert allowed(
        service,
        "create",
        {
            "type": "scheduler_pool",
            "attributes": {"name": "n", "pool_tree": "default", "parent_name": "mine"},
        },
    )
    assert not allowed(
        service, "create", {"type": "scheduler_pool", "attributes": {"name": "n", "pool_tree": "default"}}
    )
    assert allowed(service, "create", {"type": "scheduler_pool", "path": TREE + "/mine/n2"})
    # YTsaurus RemoveSelf: "remove" on the node and its descendants, "write" on the parent
    assert not allowed(service, "remove", {"path": TREE + "/mine/sub"})  # write alone is not remove
    grant(service, TREE + "/mine", ["write", "remove"])
    assert allowed(service, "remove", {"path": TREE + "/mine/sub"})
    assert not allowed(service, "remove", {"path": TREE + "/mine"})  # the parent is the tree
    assert not allowed(service, "create", {"type": "scheduler_pool_tree", "attributes": {"name": "t"}})


def grant(service: SchedulerService, path: str, permissions: list[str]) -> None:
    service.cypress.set(
        path + "/@acl", [{"action": "allow", "subjects": ["alice"], "permissions": permissions}]
    )


def test_moves_need_remove_and_write_on_both_parents(service: SchedulerService) -> None:
    assert not allowed(
        service, "move", {"source_path": TREE + "/mine/sub", "destination_path": TREE + "/mine/sub2"}
    )  # write on both parents is not enough: the moved pool leaves its parent
    assert not allowed(service, "set", {"path": TREE + "/mine/sub/@parent_name"}, "mine")
    grant(service, TREE + "/mine", ["write", "remove"])
    assert allowed(
        service, "move", {"source_path": TREE + "/mine/sub", "destination_path": TREE + "/mine/sub2"}
    )
    assert not allowed(
        service, "move", {"source_path": TREE + "/mine/sub", "destination_path": TREE + "/theirs/sub"}
    )
    assert not allowed(
        service, "move", {"source_path": TREE + "/theirs", "destination_path": TREE + "/mine/theirs"}
    )
    assert allowed(service, "set", {"path": TREE + "/mine/sub/@parent_name"}, "mine")
    assert not allowed(service, "set", {"path": TREE + "/mine/sub/@parent_name"}, "theirs")
    assert not allowed(service, "set", {"path": TREE + "/mine/sub/@parent_name"}, "<Root>")


def test_acls_need_administer_and_are_validated(service: SchedulerService) -> None:
    acl = [{"action": "allow", "subjects": ["alice"], "permissions": ["use"]}]
    assert not allowed(service, "set", {"path": TREE + "/mine/@acl"}, acl)  # write is not administer
    assert not allowed(service, "set", {"path": TREE + "/mine/@inherit_acl"}, False)
    assert not allowed(
        service, "set", {"path": TREE + "/mine/@acl/0/action"}, "deny"
    )  # a part: administer too
    assert not allowed(service, "remove", {"path": TREE + "/mine/@acl"})
    assert not allowed(
        service, "create", {"type": "scheduler_pool", "path": TREE + "/mine/n", "attributes": {"acl": acl}}
    )
    service.cypress.set(
        TREE + "/mine/@acl",
        [{"action": "allow", "subjects": ["alice"], "permissions": ["write", "administer"]}],
    )
    assert allowed(service, "set", {"path": TREE + "/mine/sub/@acl"}, acl)
    for bad, field in (
        ([{"action": "allow"}], "acl[0].subjects"),
        ("yes", "inherit_acl"),
    ):
        name = "acl" if field.startswith("acl") else "inherit_acl"
        with pytest.raises(PooltreeError) as error:
            service.security.authorize("set", "root", {"path": TREE + f"/mine/@{name}"}, bad)
        assert error.value.attributes["field"].endswith(field)
    # a part of @acl is authorized (Cypress refuses it when the ACL it leaves is invalid); @inherit_acl has no parts
    service.security.authorize("set", "root", {"path": TREE + "/mine/@acl/0"}, acl[0])
    with pytest.raises(PooltreeError, match="has no parts"):
        service.security.authorize("set", "root", {"path": TREE + "/mine/@inherit_acl/0"}, True)


def test_job_commands_follow_the_operation(service: SchedulerService) -> None:
    spec = {
        "tasks": {"main": {"command": "true", "job_count": 1}},
        "acl": [{"action": "deny", "subjects": ["alice"], "permissions": ["read"]}],
    }
    op = service.scheduler.start_operation("vanilla", spec, "bob", time.time())
    for command in ("get_operation", "list_jobs", "get_job", "get_job_stderr"):
        assert not allowed(service, command, {"operation_id": op.id, "job_id": "x"}), command
    for command in (
        "abort_operation",
        "suspend_operation",
        "resume_operation",
        "complete_operation",
    ):
        assert not allowed(service, command, {"operation_id": op.id, "job_id": "x"}), command
    assert allowed(service, "get_operation", {"operation_id": "1-2-3-4"})  # unknown: the handler answers
    service.security.authorize("abort_operation", "bob", {"operation_id": op.id})  # the owner
    with pytest.raises(PooltreeError, match=r"spec\.acl"):
        service.security.authorize(
            "start_operation",
            "bob",
            {"spec": {"acl": [{"action": "allow", "subjects": ["x"], "permissions": ["use"]}]}},
        )


def test_pool_children_attributes_and_transfers(service: SchedulerService) -> None:
    """YTsaurus's master: a child is added or removed with ``write`` or ``modify_children`` on its parent; pool
    attributes other than the user-managed ones need ``administer``; ``transfer_pool_resources`` needs ``write`` on
    every pool whose guarantees change (below the two pools' common ancestor)."""
    modify = [{"action": "allow", "subjects": ["alice"], "permissions": ["modify_children"]}]
    service.cypress.set(TREE + "/theirs/@acl", modify)
    pool = {
        "type": "scheduler_pool",
        "attributes": {"name": "kid", "pool_tree": "default", "parent_name": "theirs"},
    }
    assert allowed(service, "create", pool)
    assert not allowed(
        service, "set", {"path": TREE + "/theirs/@weight"}, 2.0
    )  # modify_children is not write
    assert allowed(service, "set", {"path": TREE + "/mine/@weight"}, 2.0)  # user-managed: write is enough
    assert not allowed(service, "set", {"path": TREE + "/mine/@enable_aggressive_starvation"}, True)
    assert not allowed(service, "set", {"path": TREE + "/mine/@my_note"}, "x")  # a custom attribute
    assert not allowed(service, "remove", {"path": TREE + "/mine/@my_note"})
    transfer = {"pool_tree": "default", "resource_delta": {"max_operation_count": 1}}
    assert allowed(
        service, "transfer_pool_resources", {**transfer, "source_pool": "mine", "destination_pool": "sub"}
    )
    assert not allowed(
        service, "transfer_pool_resources", {**transfer, "source_pool": "mine", "destination_pool": "theirs"}
    )
