"""ACLs with real processes: a scheduler, two nodes, the official client with tokens of three users.

alice cannot start in a pool she has no ``use`` on (nor in an ephemeral pool under it), cannot see or abort bob's
operation unless its ACL lets her, cannot change pools she may not ``write``; bob's ``secure_vault`` reaches only
his job's environment."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent.parent / "live"))
from live_procs import Procs, client, state, vanilla, yt_cli
from polling import wait_for

TREES = "//sys/pool_trees/default"
SECRET = "s3cr3t-value-0f-bob"


def allow(subjects: list[str], permissions: list[str], **extra: Any) -> dict[str, Any]:
    return {"action": "allow", "subjects": subjects, "permissions": permissions, **extra}


def deny(subjects: list[str], permissions: list[str], **extra: Any) -> dict[str, Any]:
    return {"action": "deny", "subjects": subjects, "permissions": permissions, **extra}


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs = Procs(root)
        self.process, self.url = self.procs.scheduler(root / "data", 0)
        for name in ("n1", "n2"):
            self.procs.node(self.url, name, "user_slots=2,cpu=2,memory=2Gi")
        self.yt = client(self.url)
        wait_for(lambda: len(self.yt.get("//sys/scheduler/orchid/scheduler/nodes")) == 2, timeout=30)
        self.tokens: dict[str, str] = {}
        for name in ("alice", "bob", "carol"):
            self.yt.create("user", attributes={"name": name})
            token = self.yt.issue_token(name)
            self.tokens[name] = token.decode() if isinstance(token, bytes) else token
        self.yt.create("group", attributes={"name": "analysts"})
        self.yt.add_member("carol", "analysts")
        # research: open to users (the default); bobs: only bob may use it, nothing inherited from above;
        # closed: alice denied explicitly; team: analysts may create pools under it and remove them (YTsaurus: removing needs "remove" on the pool)
        self.yt.create("scheduler_pool", attributes={"name": "research", "pool_tree": "default"})
        self.yt.create(
            "scheduler_pool",
            attributes={
                "name": "bobs",
                "pool_tree": "default",
                "inherit_acl": False,
                "acl": [allow(["bob"], ["use", "read"])],
            },
        )
        self.yt.create(
            "scheduler_pool",
            attributes={"name": "closed", "pool_tree": "default", "acl": [deny(["alice"], ["use"])]},
        )
        self.yt.create(
            "scheduler_pool",
            attributes={
                "name": "team",
                "pool_tree": "default",
                "acl": [allow(["analysts"], ["write", "remove"])],
            },
        )

    def user(self, name: str) -> ytw.YtClient:
        return client(self.url, self.tokens[name])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = Cluster(tmp_path_factory.mktemp("acl"))
    try:
        yield made
    finally:
        made.procs.close()


def denied(call: Any) -> dict[str, Any]:
    with pytest.raises(ytw.YtResponseError) as error:
        call()
    assert error.value.contains_code(901), error.value
    found = error.value.find_matching_error(code=901)
    return {"message": found.message, **found.attributes}


def test_use_on_the_pool_decides_where_an_operation_may_start(cluster: Cluster) -> None:
    alice = cluster.user("alice")
    op = alice.run_operation(vanilla("true", 1, pool="research"), sync=False)
    wait_for(lambda: state(alice, op.id) == "completed", timeout=30)
    error = denied(lambda: alice.run_operation(vanilla("true", 1, pool="bobs"), sync=False))
    assert error["message"] == (
        'Access denied for user "alice": "use" permission for pool "bobs" in pool tree "default" '
        "is not allowed by any matching ACE"
    )
    assert error["user"] == "alice" and error["permission"] == "use" and error["pool"] == "bobs"
    closed = denied(lambda: alice.run_operation(vanilla("true", 1, pool="closed"), sync=False))
    assert 'is denied for "alice" by ACE at pool "closed" in pool tree "default"' in closed["message"]
    # an ephemeral pool is checked on its parent
    ephemeral = denied(lambda: alice.run_operation(vanilla("true", 1, pool="bobs$alice"), sync=False))
    assert ephemeral["ephemeral_pool_parent"] == "bobs"
    bob = cluster.user("bob")
    op = bob.run_operation(vanilla("true", 1, pool="bobs"), sync=False)
    wait_for(lambda: state(bob, op.id) == "completed", timeout=30)
    # the CLI answers the same questions
    assert (
        json.loads(
            yt_cli(
                cluster.url,
                cluster.root,
                "check-permission",
                "alice",
                "use",
                f"{TREES}/bobs",
                "--format",
                "json",
            ).stdout
        )["action"]
        == "deny"
    )
    assert (
        json.loads(
            yt_cli(
                cluster.url,
                cluster.root,
                "check-permission",
                "bob",
                "use",
                f"{TREES}/bobs",
                "--format",
                "json",
            ).stdout
        )["action"]
        == "allow"
    )
    assert cluster.yt.check_permission("alice", "use", f"{TREES}/research")["action"] == "allow"


def test_moving_an_operation_needs_use_on_the_new_pool(cluster: Cluster) -> None:
    alice = cluster.user("alice")
    op = alice.run_operation(vanilla("sleep 30", 1, pool="research"), sync=False)
    try:
        error = denied(lambda: alice.update_operation_parameters(op.id, {"pool": "bobs"}))
        assert error["permission"] == "use"
        alice.update_operation_parameters(op.id, {"pool": "team"})
        assert alice.get_operation(op.id, attributes=["pool"])["pool"] == "team"
    finally:
        alice.abort_operation(op.id)


def test_operations_are_read_and_managed_as_their_acl_says(cluster: Cluster) -> None:
    alice, bob, carol = cluster.user("alice"), cluster.user("bob"), cluster.user("carol")
    plain = bob.run_operation(vanilla("sleep 60", 1, pool="research"), sync=False)
    shared = bob.run_operation(
        vanilla("sleep 60", 1, pool="research", acl=[allow(["analysts"], ["manage"])]), sync=False
    )
    hidden = bob.run_operation(
        vanilla("sleep 60", 1, pool="research", acl=[deny(["alice"], ["read"])]), sync=False
    )
    try:
        for operation_id in (plain.id, shared.id):
            assert alice.get_operation(operation_id, attributes=["state"])  # everyone may read
        error = denied(lambda: alice.abort_operation(plain.id))
        assert error["message"] == (
            f'Access denied for user "alice": "manage" permission for operation {plain.id} '
            "is not allowed by any matching ACE"
        )
        for call in (alice.suspend_operation, alice.resume_operation, alice.complete_operation):
            denied(lambda call=call: call(plain.id))
        denied(lambda: alice.update_operation_parameters(plain.id, {"weight": 2.0}))
        denied(lambda: alice.get_operation(hidden.id))
        denied(lambda: alice.list_jobs(hidden.id))
        listed = {o["id"] for o in alice.list_operations(user="bob")["operations"]}
        assert hidden.id not in listed and plain.id in listed
        assert hidden.id in {o["id"] for o in bob.list_operations(user="bob")["operations"]}
        assert cluster.yt.check_operation_permission(hidden.id, "alice", "read")["action"] == "deny"
        assert cluster.yt.check_operation_permission(shared.id, "carol", "manage")["action"] == "allow"
        assert cluster.yt.check_operation_permission(plain.id, "bob", "manage")["action"] == "allow"  # owner
        carol.suspend_operation(shared.id)  # the spec's ACL lets analysts manage it
        carol.abort_operation(shared.id)
        assert state(bob, shared.id) == "aborted"
        # bob lets alice manage his operation at runtime
        bob.update_operation_parameters(plain.id, {"acl": [allow(["alice"], ["manage"])]})
        alice.abort_operation(plain.id)
        assert state(bob, plain.id) == "aborted"
    finally:
        for op in (plain, shared, hidden):
            if state(cluster.yt, op.id) not in ("aborted", "completed", "failed"):
                cluster.yt.abort_operation(op.id)


def test_pools_change_only_with_write_and_their_acl_with_administer(cluster: Cluster) -> None:
    alice, carol = cluster.user("alice"), cluster.user("carol")
    carol.create(
        "scheduler_pool", attributes={"name": "carols", "pool_tree": "default", "parent_name": "team"}
    )
    carol.set(f"{TREES}/team/carols/@weight", 2.0)
    error = denied(
        lambda: alice.create(
            "scheduler_pool", attributes={"name": "mine", "pool_tree": "default", "parent_name": "team"}
        )
    )
    assert error["permission"] == "write" and 'pool "team"' in error["message"]
    denied(lambda: alice.set(f"{TREES}/team/carols/@weight", 5.0))
    denied(lambda: alice.remove(f"{TREES}/team/carols"))
    denied(lambda: alice.create("scheduler_pool", attributes={"name": "top", "pool_tree": "default"}))
    denied(lambda: alice.create("scheduler_pool_tree", attributes={"name": "alices"}))
    # write is not administer: carol may not hand the pool to others
    administer = denied(lambda: carol.set(f"{TREES}/team/carols/@acl", [allow(["alice"], ["write"])]))
    assert administer["permission"] == "administer"
    bad = cluster.yt
    with pytest.raises(ytw.YtResponseError) as malformed:
        bad.set(f"{TREES}/team/@acl", [{"action": "maybe", "subjects": ["alice"], "permissions": ["use"]}])
    assert "acl[0].action" in str(malformed.value)
    carol.remove(f"{TREES}/team/carols")
    assert not cluster.yt.exists(f"{TREES}/team/carols")


def test_secure_vault_reaches_only_the_job(cluster: Cluster) -> None:
    bob, alice = cluster.user("bob"), cluster.user("alice")
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    check = f'test "$(printf %s "$YT_SECURE_VAULT_TOKEN" | sha256sum | cut -c1-64)" = {digest}'
    spec = vanilla(
        f'{check} && test "$YT_SECURE_VAULT_N" = 5 && echo ok >&2',
        1,
        pool="research",
        secure_vault={"TOKEN": SECRET, "N": 5},
    )
    op = bob.run_operation(spec, sync=False)
    wait_for(lambda: state(bob, op.id) in ("completed", "failed"), timeout=30)
    assert state(bob, op.id) == "completed"  # the job saw both values in its environment
    for who in (bob, alice, cluster.yt):
        attributes = who.get_operation(op.id)
        for key in ("spec", "full_spec", "provided_spec"):
            assert "secure_vault" not in attributes[key]
        assert SECRET not in json.dumps(attributes, default=str)
        assert SECRET not in json.dumps(who.list_operations(user="bob"))
    with pytest.raises(ytw.YtResponseError) as error:
        bob.run_operation(vanilla("true", 1, secure_vault={"not a name": SECRET}), sync=False)
    assert SECRET not in str(error.value) and "spec.secure_vault" in str(error.value)
    logs = "".join(path.read_text(errors="replace") for path in cluster.root.glob("proc-*.log"))
    assert SECRET not in logs
