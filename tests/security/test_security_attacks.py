"""The attacks of issue #24 (items 1-4 and 6, and the open store health), as alice, bob and an unauthenticated
caller against real processes: a scheduler and a node, plain HTTP (what a script sends, not only what the official
client sends) and the official client. Each attack succeeded before the deny-by-default rules; each now gets the
YTsaurus authorization error naming the user, the permission and the object, and changes nothing."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yt.wrapper as ytw

from pooltree.node import wire

sys.path.insert(0, str(Path(__file__).parent.parent / "live"))
from live_procs import (
    NODE_HEADERS,
    NODE_SECRET,
    ROOT_TOKEN,
    Procs,
    client,
    slotless_heartbeat,
    state,
    vanilla,
)
from polling import wait_for

TREES = "//sys/pool_trees/default"
BOB_SCRIPT = b"#!/bin/sh\necho bob's job\n"


def ace(action: str, subjects: list[str], permissions: list[str]) -> dict[str, Any]:
    return {"action": action, "subjects": subjects, "permissions": permissions}


class Cluster:
    def __init__(self, root: Path) -> None:
        self.procs = Procs(root)
        self.process, self.url = self.procs.scheduler(root / "data", 0)
        self.procs.node(self.url, "n1", "user_slots=4,cpu=4,memory=4Gi")
        self.yt = client(self.url)
        wait_for(lambda: len(self.yt.get("//sys/scheduler/orchid/scheduler/nodes")) == 1, timeout=30)
        self.tokens: dict[str, str] = {}
        for name in ("alice", "bob"):
            self.yt.create("user", attributes={"name": name})
            token = self.yt.issue_token(name)
            self.tokens[name] = token.decode() if isinstance(token, bytes) else token
        # //home/bob: bob's, alice denied read and write (the issue's setup)
        self.yt.create(
            "map_node",
            "//home/bob",
            recursive=True,
            attributes={
                "acl": [
                    ace("allow", ["bob"], ["read", "write", "remove"]),
                    ace("deny", ["alice"], ["read", "write"]),
                ]
            },
        )
        bob = self.user("bob")
        bob.write_file("//home/bob/run.sh", BOB_SCRIPT)
        # team: alice may write (create pools) under it; team/bobs denies her everything
        self.yt.create(
            "scheduler_pool",
            attributes={"name": "team", "pool_tree": "default", "acl": [ace("allow", ["alice"], ["write"])]},
        )
        self.yt.create(
            "scheduler_pool",
            attributes={
                "name": "bobs",
                "pool_tree": "default",
                "parent_name": "team",
                "acl": [
                    ace("allow", ["bob"], ["use", "write", "remove"]),
                    ace("deny", ["alice"], ["use", "write", "remove", "administer"]),
                ],
            },
        )
        self.yt.create(
            "scheduler_pool", attributes={"name": "alices", "pool_tree": "default", "parent_name": "team"}
        )

    def user(self, name: str) -> ytw.YtClient:
        return client(self.url, self.tokens[name])

    def http(
        self, who: str | None, method: str, command: str, params: dict[str, Any], content: bytes | None = None
    ) -> httpx.Response:
        headers = {"X-YT-Parameters": json.dumps(params), "X-YT-Header-Format": "json"}
        if who is not None:
            headers["Authorization"] = f"OAuth {self.tokens.get(who, ROOT_TOKEN)}"
        return httpx.request(
            method, f"{self.url}/api/v4/{command}", headers=headers, content=content, timeout=30
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = Cluster(tmp_path_factory.mktemp("attacks"))
    try:
        yield made
    finally:
        made.procs.close()


def refused(answer: httpx.Response, user: str, permission: str) -> dict[str, Any]:
    assert answer.status_code == 400, (answer.status_code, answer.text)
    error = answer.json()
    assert error["code"] == 901, error
    assert error["message"].startswith(f'Access denied for user "{user}": "{permission}" permission for ')
    assert error["attributes"]["user"] == user and error["attributes"]["permission"] == permission
    return error


def test_files_of_others_cannot_be_read_written_or_locked(cluster: Cluster) -> None:
    """Issue item 1: alice read bob's file and overwrote it with a plain PUT write_file."""
    path = "//home/bob/run.sh"
    error = refused(cluster.http("alice", "GET", "read_file", {"path": path}), "alice", "read")
    assert error["attributes"]["object"] == "node //home/bob/run.sh"
    refused(cluster.http("alice", "PUT", "write_file", {"path": path}, b"echo pwned\n"), "alice", "write")
    refused(cluster.http("alice", "POST", "lock", {"path": path, "mode": "exclusive"}), "alice", "write")
    refused(cluster.http("alice", "POST", "lock", {"path": path, "mode": "snapshot"}), "alice", "read")
    # the official client too (it checks nothing itself on read)
    with pytest.raises(ytw.YtResponseError) as error_info:
        cluster.user("alice").read_file(path).read()
    assert error_info.value.contains_code(901)
    # a job of alice's cannot read bob's file either: file_paths need read
    with pytest.raises(ytw.YtResponseError) as started:
        cluster.user("alice").run_operation(
            ytw.VanillaSpecBuilder()
            .begin_task("main")
            .command("cat run.sh")
            .job_count(1)
            .file_paths([path])
            .end_task(),
            sync=False,
        )
    assert started.value.contains_code(901)
    assert cluster.user("bob").read_file(path).read() == BOB_SCRIPT  # unchanged, and bob still reads it
    assert cluster.http(None, "GET", "read_file", {"path": path}).status_code == 401


def test_a_transaction_belongs_to_its_user(cluster: Cluster) -> None:
    """Issue item 1: any user could abort another's transaction by id."""
    bob = cluster.user("bob")
    tx = bob.start_transaction(timeout=60_000)
    for command in ("abort_transaction", "commit_transaction", "ping_transaction"):
        error = refused(cluster.http("alice", "POST", command, {"transaction_id": tx}), "alice", "write")
        assert error["attributes"]["object"] == f"transaction {tx}"
    # nor can alice use it for her own commands
    refused(
        cluster.http(
            "alice", "POST", "create", {"type": "map_node", "path": "//tmp/a", "transaction_id": tx}
        ),
        "alice",
        "write",
    )
    bob.ping_transaction(tx)  # still alive: bob's to commit
    bob.commit_transaction(tx)


def test_the_file_cache_checks_both_ends_and_hides_md5(cluster: Cluster) -> None:
    """Issue item 2: alice created cache entries under //sys and bob's directory, and learnt an MD5."""
    bob_md5 = hashlib.md5(BOB_SCRIPT, usedforsecurity=False).hexdigest()
    alice = cluster.user("alice")
    alice.write_file("//tmp/alice.sh", b"echo alice\n")
    alice_md5 = hashlib.md5(b"echo alice\n", usedforsecurity=False).hexdigest()
    answer = cluster.http(
        "alice",
        "POST",
        "put_file_to_cache",
        {"path": "//home/bob/run.sh", "md5": "0" * 32, "cache_path": "//tmp/cache"},
    )
    refused(answer, "alice", "read")
    assert bob_md5 not in answer.text
    for cache in ("//sys/cache", "//home/bob/cache"):
        answer = cluster.http(
            "alice",
            "POST",
            "put_file_to_cache",
            {"path": "//tmp/alice.sh", "md5": alice_md5, "cache_path": cache},
        )
        refused(answer, "alice", "write")
    assert not cluster.yt.exists("//sys/cache") and not cluster.yt.exists("//home/bob/cache")
    ok = cluster.http(
        "alice",
        "POST",
        "put_file_to_cache",
        {"path": "//tmp/alice.sh", "md5": alice_md5, "cache_path": "//tmp/c"},
    )
    assert ok.status_code == 200, ok.text


def test_acl_changes_through_any_path_need_administer(cluster: Cluster) -> None:
    """Issue item 3: ``set PATH/@ '{acl=...}'`` replaced a pool's ACL with only ``write``."""
    alice = cluster.user("alice")
    before = cluster.yt.get(f"{TREES}/team/@acl")
    grab = [ace("allow", ["alice", "bob"], ["administer", "use"])]
    for path, value in (
        (f"{TREES}/team/@", {"acl": grab}),
        (f"{TREES}/team/@", {"weight": 2.0}),  # a whole-map set wipes the ACL too
        (f"{TREES}/team/@acl", grab),
        (f"{TREES}/team/@inherit_acl", False),
        (f"{TREES}/team/@owner", "alice"),
    ):
        with pytest.raises(ytw.YtResponseError) as error:
            alice.set(path, value)
        found = error.value.find_matching_error(code=901)
        assert found is not None and found.attributes["permission"] == "administer", path
    with pytest.raises(ytw.YtResponseError):
        alice.remove(f"{TREES}/team/@acl")
    assert cluster.yt.get(f"{TREES}/team/@acl") == before
    alice.set(f"{TREES}/team/@weight", 3.0)  # write is enough for other attributes
    # bob may write, use and remove his pool, not hand it over: the deny on alice stays
    bob = cluster.user("bob")
    bobs_acl = cluster.yt.get(f"{TREES}/team/bobs/@acl")
    for path, value in (
        (f"{TREES}/team/bobs/@", {"weight": 1.0}),
        (f"{TREES}/team/bobs/@acl", [ace("allow", ["bob"], ["administer"])]),
    ):
        with pytest.raises(ytw.YtResponseError) as error:
            bob.set(path, value)
        found = error.value.find_matching_error(code=901)
        assert found is not None and found.attributes["user"] == "bob", path
        assert found.attributes["permission"] == "administer"
    assert cluster.yt.get(f"{TREES}/team/bobs/@acl") == bobs_acl


def test_abort_job_by_job_id_needs_manage_on_its_operation(cluster: Cluster) -> None:
    """Issue item 4: ``yt abort-job JOB_ID`` sends no operation id; alice aborted bob's jobs."""
    bob = cluster.user("bob")
    spec = vanilla("sleep 60", 1, acl=[ace("deny", ["alice"], ["manage"])])
    op = bob.run_operation(spec, sync=False)
    try:
        wait_for(lambda: len(bob.list_jobs(op.id, job_state="running")["jobs"]) == 1, timeout=30)
        job_id = bob.list_jobs(op.id, job_state="running")["jobs"][0]["id"]
        error = refused(cluster.http("alice", "POST", "abort_job", {"job_id": job_id}), "alice", "manage")
        assert error["attributes"]["operation_id"] == op.id
        # naming her own operation does not help: the job's operation decides
        own = cluster.user("alice").run_operation(vanilla("sleep 60", 1), sync=False)
        refused(
            cluster.http("alice", "POST", "abort_job", {"job_id": job_id, "operation_id": own.id}),
            "alice",
            "manage",
        )
        cluster.user("alice").abort_operation(own.id)
        jobs = bob.list_jobs(op.id)["jobs"]
        assert [j["state"] for j in jobs if j["id"] == job_id] == ["running"]
    finally:
        bob.abort_operation(op.id)
    assert state(bob, op.id) == "aborted"


def test_a_pool_is_removed_moved_or_replaced_only_with_remove_on_it(cluster: Cluster) -> None:
    """Issue item 6: with ``write`` on the parent alice removed, replaced (``create --force``) and moved bob's
    pool that denies her."""
    alice = cluster.user("alice")
    bobs = f"{TREES}/team/bobs"
    acl = cluster.yt.get(bobs + "/@acl")
    for attempt in (
        lambda: alice.remove(bobs),
        lambda: alice.create("scheduler_pool", bobs, force=True),
        lambda: alice.move(bobs, f"{TREES}/team/alices/bobs"),
        lambda: alice.set(bobs + "/@parent_name", "alices"),
    ):
        with pytest.raises(ytw.YtResponseError) as error:
            attempt()
        found = error.value.find_matching_error(code=901)
        assert found is not None and found.attributes["permission"] in ("remove", "write"), found
        assert found.attributes["user"] == "alice"
    assert cluster.yt.get(bobs + "/@acl") == acl  # still there, still bob's


def test_store_health_is_for_superusers_and_nodes(cluster: Cluster) -> None:
    """Issue item 11: ``/internal/store_health`` answered anyone with the leader's pid, host and store path."""
    url = f"{cluster.url}/internal/store_health"
    anonymous = httpx.get(url, timeout=10)
    assert anonymous.status_code == 401 and "pid" not in anonymous.text and "store" not in anonymous.json()
    alice = httpx.get(url, headers={"Authorization": f"OAuth {cluster.tokens['alice']}"}, timeout=10)
    assert alice.status_code == 403 and alice.json()["code"] == 901
    assert httpx.get(url, headers={"Authorization": f"OAuth {ROOT_TOKEN}"}, timeout=10).json()["ok"]
    node = httpx.get(url, headers={"X-Pooltree-Node-Secret": NODE_SECRET}, timeout=10)
    assert node.status_code == 200 and node.json()["role"] == "leader"


def test_a_forwarded_for_header_does_not_move_a_node_to_another_host(cluster: Cluster) -> None:
    """The scheduler takes a caller's address from its connection: an ``X-Forwarded-For`` header (which uvicorn
    trusted from 127.0.0.1 by default) does not make a node's heartbeat come from elsewhere, so it can neither
    bind a node address to a host it does not heartbeat from nor take a bound one over."""
    body = slotless_heartbeat("n-forwarded")
    url = f"{cluster.url}{wire.HEARTBEAT_PATH}"
    headers = NODE_HEADERS
    spoofed = httpx.post(url, content=body, headers={**headers, "X-Forwarded-For": "10.20.30.40"}, timeout=30)
    assert spoofed.status_code == 200, spoofed.text
    plain = httpx.post(url, content=body, headers=headers, timeout=30)
    assert plain.status_code == 200, plain.text  # the same host both times: 127.0.0.1
